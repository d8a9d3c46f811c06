"""``ShmVecEnv``: SB3's ``SubprocVecEnv`` semantics on the shared-memory engine, and SB3's state
rules, written once for every SB3-facing vec env on a run (:class:`SB3RunVecEnv`).

``SubprocVecEnv`` and ``DummyVecEnv`` keep one piece of state, ``waiting`` (a ``step_async`` whose
``step_wait`` has not come yet), and a few rules around it, which vecshm's SB3-facing classes keep
alike: :class:`~vecshm.ShmVecEnv` (an env a row) and :class:`~vecshm.pettingzoo.AgentVecEnv` (an
agent of a copy a row). :class:`SB3RunVecEnv` holds them, and each subclass says only how its rows
map onto the run's envs and how a batch becomes SB3's results:

- ``step_wait`` without a pending ``step_async`` is a ``NoAsyncCallError``;
- a call on the envs (``get_attr``, ``env_method``, ...) while a step is pending, or while envs sent
  with ``send`` are in flight, is an ``AlreadyPendingCallError``: ``SubprocVecEnv`` would hand the
  step's results to the call and the call's to ``step_wait``, so no answer is the peers';
- ``reset()`` cancels a pending step (finished, its results dropped) and whatever async batches
  have in flight, then resets every env with the seeds and options set since the last reset;
- ``close()`` may be called twice; every other call after it is a ``ClosedError``;
- ``get_images()`` warns and returns Nones unless the envs render ``rgb_array``, as SB3's.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from vecshm.options import ProcessOptions, resolved, takes_options
from vecshm.parent.core.inspection import RunProperties
from vecshm.parent.core.run import VecRun
from vecshm.parent.handback.results import Batch
from vecshm.sb3 import stands_for
from vecshm.shared.errors import AlreadyPendingCallError, NoAsyncCallError
from vecshm.shared.protocol import AutoReset, CallOp
from vecshm.vec_env.base import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn, stack_dynamic

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["SB3_CALLS", "SB3RunVecEnv", "ShmVecEnv"]

# SB3's calls on some envs -> the engine's operation and its arguments (the envs' indices aside)
SB3_CALLS: dict[str, Callable[..., tuple[CallOp, tuple]]] = {
    "get_attr": lambda attr_name, /: (CallOp.GET_ATTR, (attr_name,)),
    "set_attr": lambda attr_name, value, /: (CallOp.SET_ATTR, (attr_name, value, False)),
    "env_method": lambda method_name, /, *args, **kwargs: (CallOp.ENV_METHOD, (method_name, args, kwargs, False)),
    "env_is_wrapped": lambda wrapper_class, /: (CallOp.IS_WRAPPED, (wrapper_class,)),
    "has_attr": lambda attr_name, /: (CallOp.HAS_ATTR, (attr_name,)),
    "get_images": lambda: (CallOp.RENDER, ()),
}


class SB3RunVecEnv(RunProperties, VecEnv):
    """SB3's ``VecEnv`` on a run, with SB3's state rules (see the module)."""

    waiting: bool
    closed: bool
    copy: bool
    in_flight_rows = "envs"  # what the run's envs are, in the errors (the multi-agent class: copies)
    # Around each wait for results, where the run's envs go by another name in errors (the
    # multi-agent class: copies); None: none (no context entered on the step path)
    naming: Callable[[], contextlib.AbstractContextManager[None]] | None = None

    def _reset_requests(self) -> list[dict[str, Any]]:
        """Each of the run's envs' ``reset`` keywords, from the seeds and options set since the last reset."""
        raise NotImplementedError

    def _render_ids(self) -> list[int]:
        """The run's envs whose images ``get_images()`` returns."""
        return list(range(self._run.num_envs))

    # -- stepping ---------------------------------------------------------------------------------

    def step_async(self, actions: np.ndarray) -> None:
        self._check_idle("step_async")
        self._run.start_step(actions, self.copy)
        self.waiting = True

    def _pending_step(self) -> Batch:
        """The results of the pending step (``step_wait``'s), which is then no longer pending."""
        self._run.check_usable()
        if not self.waiting:
            raise NoAsyncCallError("step_wait() was called without a pending step_async()")
        self.waiting = False
        if self.naming is None:
            return self._run.finish()
        with self.naming():
            return self._run.finish()

    def _reset_batch(self) -> Batch:
        """``reset()``'s results: a pending step and the async batches in flight are finished and
        dropped first; the seeds and options set since the last reset are used up."""
        self._run.check_usable()
        with self.naming() if self.naming is not None else contextlib.nullcontext():
            if self.waiting:
                self.waiting = False
                self._run.finish()
            self._run.drain()
            self._run.start_reset(self._reset_requests(), self.copy)
            batch = self._run.finish()
        self._reset_seeds()
        self._reset_options()
        return batch

    # -- async batches (EnvPool style) ------------------------------------------------------------

    def async_reset(self) -> None:
        """Reset every env without waiting; ``recv()`` returns the reset observations batch by batch."""
        self._run.check_usable()
        self._run.async_reset(self._reset_requests())
        self._reset_seeds()
        self._reset_options()

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Step ``env_ids`` (default: the batch the last ``recv`` returned) without waiting."""
        self._run.check_usable()
        self._run.send(actions, env_ids)

    # -- calls ------------------------------------------------------------------------------------

    def _check_idle(self, name: str) -> None:
        """Raise unless the vec env is usable and no step holds its workers (``name``: the caller's method)."""
        self._run.check_usable()
        if self.waiting:
            raise AlreadyPendingCallError(f"{name}() was called while a step is pending; call step_wait() first")
        if self._run.in_flight:
            raise AlreadyPendingCallError(
                f"{name}() was called while {self.in_flight_rows} are in flight from send()/async_reset(); "
                "recv() them first"
            )

    def get_images(self) -> Sequence[np.ndarray | None]:
        ids = self._render_ids()
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it is `rgb_array` to obtain images.",
                stacklevel=2,
            )
            return [None for _ in ids]
        self._check_idle("get_images")
        return self._run.call(CallOp.RENDER, ids)

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.waiting = False
        self._run.close()


@stands_for("SubprocVecEnv", one_way=True)  # (a SubprocVecEnv lacks the async API)
@takes_options(ProcessOptions)
class ShmVecEnv(SB3RunVecEnv):
    """Drop-in replacement for ``SubprocVecEnv``: workers write straight into shared memory.

    :param env_fns: factories, one per env (cloudpickled, so lambdas work with every start method)
    :param start_method: ``"fork"``, ``"forkserver"`` or ``"spawn"``; default as SB3 (forkserver)

    ``device`` (vecshm's options, below) returns the results of ``recv()`` as torch tensors there;
    ``step`` and ``reset`` stay numpy, as SB3 expects (docs/gpu.md).

    >>> import gymnasium as gym
    >>> from vecshm import ShmVecEnv
    >>> venv = ShmVecEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])
    >>> obs = venv.reset()
    >>> obs, rewards, dones, infos = venv.step(np.zeros(4, dtype=np.int64))
    >>> venv.close()
    """

    def __init__(
        self,
        env_fns: list[Callable[[], gym.Env]],
        start_method: str | None = None,
        **options: Unpack[ProcessOptions],
    ) -> None:
        self.waiting = False
        self.closed = True  # until the workers are up: close() must not touch a half-built object
        fns = list(env_fns)
        given = resolved("ShmVecEnv", options, ProcessOptions)
        copy = given.pop("copy")  # (the facade's: each batch's observations as arrays of their own, or views)
        self._run = VecRun(
            fns,
            given,
            autoreset=AutoReset.SAME_STEP,
            reward_codes=True,  # rewards in np.stack's dtype, as SubprocVecEnv returns them
            start_method=start_method,
            batch_dynamic=stack_dynamic,
        )
        self.closed = False
        self.copy = copy
        self._all_envs = list(range(len(fns)))
        try:
            super().__init__(len(fns), self._run.observation_space, self._run.action_space)
        except BaseException:
            self.close()
            raise

    # -- stepping ---------------------------------------------------------------------------------

    def step_wait(self) -> VecEnvStepReturn:
        # the usual step's infos, made while the workers run rather than after (0.6 us for 8 envs)
        usual = [{"TimeLimit.truncated": False} for _ in range(self.num_envs)]
        batch = self._pending_step()
        obs, rewards, dones, _, _, infos = self._results(batch, device=False, usual=usual)
        return self._run.hand_back((obs, rewards, dones, infos))

    def _results(self, batch: Batch, device: bool, usual: list | None = None) -> tuple[Any, Any, Any, Any, Any, list]:
        """SB3-shaped results of ``batch``: numpy (``step``), or observations, rewards and flags as
        the run's outputs give them (``device``: ``recv``, which hands tensors to a ``device``).

        ``reset_infos[i]`` takes the info of env ``i``'s automatic reset and keeps it until the
        env's next reset, as in SB3's DummyVecEnv. ``usual``: the infos of a step where no env said
        anything and no episode ended, made beforehand (else made here when needed).
        """
        ids, terminated, truncated = batch.ids, batch.terminated, batch.truncated
        dones = terminated | truncated
        flags = dones.tolist()
        if True not in flags and batch.infos_empty():  # the usual step: no info, no episode ended
            infos = usual if usual is not None else [{"TimeLimit.truncated": False} for _ in flags]
        else:
            infos = self._infos(batch, ids, terminated, truncated, flags)
        rewards = batch.stacked_rewards()
        if device:
            obs, rewards, terminated, truncated = self._run.step_results(batch, rewards, self.copy)
            return obs, rewards, dones, terminated, truncated, infos
        return batch.observations(self.copy), rewards, dones, terminated, truncated, infos

    def _infos(self, batch: Batch, ids: Sequence[int], terminated: Any, truncated: Any, flags: list[bool]) -> list:
        """SB3's info dicts of ``batch`` (``flags``: its envs' dones), with the final observation and
        info of each episode that ended, and ``worker_restarted`` where a restart ended one."""
        infos = batch.infos()
        for info, done in zip(infos, flags):
            if not done:
                info["TimeLimit.truncated"] = False  # as SubprocVecEnv, on every step; ended envs' below
        ended = [k for k, done in enumerate(flags) if done] if True in flags else []
        final_infos = batch.infos([ids[k] for k in ended], "final") if ended else []
        for k, step_info in zip(ended, final_infos):
            i = ids[k]
            step_info["TimeLimit.truncated"] = bool(truncated[k] and not terminated[k])
            step_info["terminal_observation"] = batch.final_observation(i)
            self.reset_infos[i] = infos[k]
            infos[k] = step_info
        if batch.restarted:
            for k, i in enumerate(ids):
                if i in batch.restarted:
                    infos[k]["worker_restarted"] = True
        return infos

    # -- async batches (EnvPool style) ------------------------------------------------------------

    def recv(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]], np.ndarray]:
        """The first ``batch_size`` envs to finish: ``(obs, rewards, terminated, truncated, infos, env_ids)``.

        Infos follow SB3's conventions (``terminal_observation``, ``TimeLimit.truncated``); the
        info of an automatic reset is in ``reset_infos`` at the env's index.
        """
        batch = self._run.recv()
        obs, rewards, _, terminated, truncated, infos = self._results(batch, device=True)
        return self._run.hand_back((obs, rewards, terminated, truncated, infos, batch.env_ids))

    def reset(self) -> VecEnvObs:
        batch = self._reset_batch()
        self.reset_infos = batch.infos()
        return self._run.hand_back(batch.observations(self.copy))

    def _reset_requests(self) -> list[dict[str, Any]]:
        """Each env's ``reset`` keywords, as SubprocVecEnv passes them (``options`` only when non-empty)."""
        return [
            {"seed": seed, "options": options} if options else {"seed": seed}
            for seed, options in zip(self._seeds, self._options)
        ]

    # -- lifecycle --------------------------------------------------------------------------------

    def __repr__(self) -> str:
        run = getattr(self, "_run", None)
        if run is None:
            return f"{type(self).__name__}(<not started>)"
        sizes = sorted({b - a for a, b in run.plan.process_slices})
        per_worker = "/".join(map(str, sizes))
        return (
            f"{type(self).__name__}(num_envs={run.num_envs}, workers={run.plan.num_processes}x{per_worker} envs, "
            f"start_method={run.start_method!r}, shared={run.nbytes / 2**20:.2f} MiB, "
            f"{'closed' if self.closed else 'open'})"
        )

    # -- rare calls -------------------------------------------------------------------------------

    def has_attr(self, attr_name: str) -> bool:
        return all(self._call("has_attr", self._all_envs, attr_name))

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._call("get_attr", self._get_indices(indices), attr_name)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._call("set_attr", self._get_indices(indices), attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        return self._call("env_method", self._get_indices(indices), method_name, *method_args, **method_kwargs)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return self._call("env_is_wrapped", self._get_indices(indices), wrapper_class)

    def _call(self, name: str, env_ids: Sequence[int], /, *args: Any, **kwargs: Any) -> list[Any]:
        """SB3's call ``name`` on ``env_ids``, once no step holds their workers. A call between
        ``step_async`` and ``step_wait``, or while ``send`` has envs in flight, is an error, as in
        the Gymnasium facade: ``SubprocVecEnv`` would hand the step's results to the call and the
        call's to ``step_wait``, and ``DummyVecEnv`` has not stepped yet, so no answer is the peers'."""
        op, call_args = SB3_CALLS[name](*args, **kwargs)
        self._check_idle(name)
        return self._run.call(op, env_ids, *call_args)
