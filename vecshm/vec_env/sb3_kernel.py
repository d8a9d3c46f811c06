"""SB3's ``VecEnv`` contract, written once for every SB3-facing vec env: :class:`SB3Kernel`.

``SubprocVecEnv`` and ``DummyVecEnv`` keep one piece of state, ``waiting`` (a ``step_async`` whose
``step_wait`` has not come yet), and a few rules around it. vecshm's SB3-facing classes keep them
alike, because they all sit on this kernel: :class:`~vecshm.ShmVecEnv` (an env a row),
:class:`~vecshm.pettingzoo.AgentVecEnv` (an agent of a copy a row, also what SuperSuit's
``concat_vec_envs_v1(..., base_class="stable_baselines3")`` returns) and
:class:`~vecshm.ray.RayVecEnv` (an env of a Ray actor a row). Each says only two things:

- its **row map** (:mod:`vecshm.row_maps`): which rows it has and where each lives;
- its **result shape**: how a batch becomes SB3's return values (:meth:`SB3Kernel._results`, of
  which ``step_wait`` and ``recv`` each return what their peer returns, and
  :meth:`SB3Kernel._reset_results`). The kernel's own is SB3's, of a batch whose rows are the run's envs.

The rules, for every class alike:

- ``step_wait`` without a pending ``step_async`` is a ``NoAsyncCallError``;
- a call on the envs (``get_attr``, ``env_method``, ...) while a step is pending, or while envs sent
  with ``send`` are in flight, is an ``AlreadyPendingCallError``: ``SubprocVecEnv`` would hand the
  step's results to the call and the call's to ``step_wait``, so no answer is the peers';
- ``reset()`` cancels a pending step (finished, its results dropped) and whatever async batches
  have in flight, then resets every env with the seeds and options set since the last reset;
  ``SubprocVecEnv`` itself would read the step's answers as the reset's;
- ``close()`` may be called twice; every other call after it is a ``ClosedError``;
- ``get_images()`` warns and returns Nones unless the envs render ``rgb_array``, as SB3's.

The kernel drives a run through :class:`SB3Run`, which the local run
(:class:`~vecshm.parent.core.run.VecRun`) and the Ray actors' (:class:`~vecshm.ray.actor_run.RayRun`)
both speak.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import gymnasium as gym
import numpy as np

from vecshm.parent.core.inspection import StatsHooks
from vecshm.parent.handback.results import Batch
from vecshm.row_maps import EnvRows
from vecshm.shared.errors import AlreadyPendingCallError, NoAsyncCallError, VecShmError
from vecshm.shared.protocol import CallOp
from vecshm.vec_env.base import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn

__all__ = ["SB3_CALLS", "SB3AsyncBatches", "SB3AsyncRun", "SB3Kernel", "SB3Run"]

Results = TypeVar("Results")

# SB3's calls on some envs -> the engine's operation and its arguments (the envs' indices aside)
SB3_CALLS: dict[str, Callable[..., tuple[CallOp, tuple]]] = {
    "get_attr": lambda attr_name, /: (CallOp.GET_ATTR, (attr_name,)),
    "set_attr": lambda attr_name, value, /: (CallOp.SET_ATTR, (attr_name, value, False)),
    "env_method": lambda method_name, /, *args, **kwargs: (CallOp.ENV_METHOD, (method_name, args, kwargs, False)),
    "env_is_wrapped": lambda wrapper_class, /: (CallOp.IS_WRAPPED, (wrapper_class,)),
    "has_attr": lambda attr_name, /: (CallOp.HAS_ATTR, (attr_name,)),
    "get_images": lambda: (CallOp.RENDER, ()),
}


class SB3Run(Protocol):
    """What the SB3 kernel asks of a run: start a step or a reset, finish it, call, close, stats.

    ``finish`` returns the run's batch, which only the class's result shape reads; ``hand_back``
    is the last point of a command's trip, where the caller's time starts (:mod:`vecshm.stats`)."""

    @property
    def in_flight(self) -> bool: ...

    def check_usable(self) -> None: ...

    def start_step(self, actions: Any, lend: bool) -> None: ...

    def start_reset(self, requests: Sequence[dict[str, Any] | None], lend: bool) -> None: ...

    def finish(self) -> Any: ...

    def drain(self) -> None: ...

    def call(self, op: CallOp, env_ids: Sequence[int], *args: Any) -> list[Any]: ...

    def close(self) -> None: ...

    def stats(self) -> Any: ...

    def reset_stats(self) -> None: ...

    def hand_back(self, results: Results) -> Results: ...


class SB3AsyncRun(SB3Run, Protocol):
    """A run with EnvPool-style async batches (the local one)."""

    def async_reset(self, requests: Sequence[dict[str, Any] | None]) -> None: ...

    def send(self, actions: Any, env_ids: Any = None) -> None: ...

    def recv(self) -> Any: ...

    @property
    def last_received(self) -> Any: ...


class SB3Kernel(StatsHooks, VecEnv):
    """SB3's ``VecEnv`` on a run, with SB3's state rules (see the module).

    A class on it starts its run, then calls :meth:`_started`; it supplies the result shape."""

    waiting = False
    closed = True  # until the run is up: close() must not touch a half-built object
    copy = False  # observations as arrays of their own (True), or views the next command overwrites
    rows: EnvRows
    _run: SB3Run

    def _started(
        self, run: SB3Run, rows: EnvRows, own_arrays: bool, observation_space: gym.Space, action_space: gym.Space
    ) -> None:
        """Take ``run`` (started), with ``rows`` over its envs; closed again if SB3's set-up fails.
        ``own_arrays``: the ``copy`` option (observations copied out of the segment, else lent)."""
        self._run, self.rows, self.copy = run, rows, own_arrays
        self.closed = False
        try:
            VecEnv.__init__(self, rows.num_rows, observation_space, action_space)
        except BaseException:
            self.close()
            raise

    # -- the result shape: SB3's own, of a batch whose rows are the run's envs ----------------------
    # (ShmVecEnv's; a class whose rows or batches differ writes its own: AgentVecEnv, RayVecEnv)

    def _results(self, batch: Any, device: bool) -> tuple[Any, Any, Any, Any, Any, list]:
        """``(obs, rewards, dones, terminated, truncated, infos)`` of ``batch``, of which ``step_wait``
        returns four and ``recv`` five: numpy (``step``), or observations, rewards and flags as the
        run's outputs give them (``device``: ``recv``, which hands tensors to a ``device``).

        ``reset_infos[i]`` takes the info of env ``i``'s automatic reset and keeps it until the
        env's next reset, as in SB3's DummyVecEnv.
        """
        ids, terminated, truncated = batch.ids, batch.terminated, batch.truncated
        dones = terminated | truncated
        flags = dones.tolist()
        if True not in flags and batch.infos_empty():  # the usual step: no info, no episode ended
            infos = [{"TimeLimit.truncated": False} for _ in flags]
        else:
            infos = self._sb3_infos(batch, ids, terminated, truncated, flags)
        rewards = batch.stacked_rewards()
        if device:
            obs, rewards, terminated, truncated = self._run.step_results(batch, rewards, self.copy)  # type: ignore[attr-defined]  # a local run's
            return obs, rewards, dones, terminated, truncated, infos
        return batch.observations(self.copy), rewards, dones, terminated, truncated, infos

    def _reset_results(self, batch: Any) -> VecEnvObs:
        """``reset``'s observations of ``batch``; sets ``reset_infos``."""
        self.reset_infos = batch.infos()
        return batch.observations(self.copy)

    def _sb3_infos(self, batch: Batch, ids: Sequence[int], terminated: Any, truncated: Any, flags: list[bool]) -> list:
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

    # -- stepping ---------------------------------------------------------------------------------

    def step_async(self, actions: np.ndarray) -> None:
        self._check_idle("step_async")
        rows = self.rows
        self._run.start_step(rows.to_envs(actions, rows.num_envs) if rows.regroups else actions, self.copy)
        self.waiting = True

    def step_wait(self) -> VecEnvStepReturn:
        run = self._run
        run.check_usable()
        if not self.waiting:
            raise NoAsyncCallError("step_wait() was called without a pending step_async()")
        self.waiting = False
        try:
            batch = run.finish()
        except VecShmError as error:
            self.rows.raise_named(error)
        obs, rewards, dones, _, _, infos = self._results(batch, False)
        return run.hand_back((obs, rewards, dones, infos))

    def reset(self) -> VecEnvObs:
        """Reset every env with the seeds and options set since the last reset (then used up); a
        pending step and the async batches in flight are finished and dropped first."""
        run = self._run
        run.check_usable()
        try:
            if self.waiting:
                self.waiting = False
                run.finish()
            run.drain()
            run.start_reset(self._reset_requests(), self.copy)
            batch = run.finish()
        except VecShmError as error:
            self.rows.raise_named(error)
        self._reset_seeds()
        self._reset_options()
        return run.hand_back(self._reset_results(batch))

    def _reset_requests(self) -> list[dict[str, Any]]:
        """Each of the run's envs' ``reset`` keywords, as SubprocVecEnv passes them (``options`` only
        when non-empty): those of its first row."""
        seeds, options = self._seeds, self._options
        return [
            {"seed": seeds[r], "options": options[r]} if options[r] else {"seed": seeds[r]}
            for r in self.rows.first_rows()
        ]

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Seed the run's env ``k`` with ``seed + k`` at the next reset (a random base seed when None),
        however many processes or actors host them; each row's entry is its env's seed."""
        if seed is None:
            seed = int(np.random.randint(0, np.iinfo(np.uint32).max, dtype=np.uint32))
        self._seeds = [seed + self.rows.env_of(r) for r in self.rows.all_rows()]
        return self._seeds

    # -- calls ------------------------------------------------------------------------------------

    def _check_idle(self, name: str) -> None:
        """Raise unless the vec env is usable and no step holds its workers (``name``: the caller's method)."""
        self._run.check_usable()
        if self.waiting:
            raise AlreadyPendingCallError(f"{name}() was called while a step is pending; call step_wait() first")
        if self._run.in_flight:
            raise AlreadyPendingCallError(
                f"{name}() was called while {self.rows.word} are in flight from send()/async_reset(); recv() them first"
            )

    def _call(self, name: str, indices: VecEnvIndices, /, *args: Any, **kwargs: Any) -> list[Any]:
        """SB3's call ``name`` on the rows ``indices``, once no step holds their workers; a row's
        answer is its env's. A call between ``step_async`` and ``step_wait``, or while ``send`` has
        envs in flight, is an error: ``SubprocVecEnv`` would hand the step's results to the call and
        the call's to ``step_wait``, and ``DummyVecEnv`` has not stepped yet, so no answer is the peers'."""
        op, call_args = SB3_CALLS[name](*args, **kwargs)
        self._check_idle(name)
        rows = list(self._get_indices(indices))
        envs = self.rows.envs_of(rows)
        return self.rows.per_row(rows, envs, self._on_envs(op, envs, *call_args))

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._call("get_attr", indices, attr_name)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._call("set_attr", indices, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        return self._call("env_method", indices, method_name, *method_args, **method_kwargs)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        """Whether each row's env is wrapped in ``wrapper_class`` (a copy of a ``ParallelEnv``:
        Gymnasium's wrappers, PettingZoo's and SuperSuit's, and those of the AEC env it was made from)."""
        return self._call("env_is_wrapped", indices, wrapper_class)

    def has_attr(self, attr_name: str) -> bool:
        return all(self._call("has_attr", None, attr_name))

    def get_images(self) -> Sequence[np.ndarray | None]:
        """Each env's ``rgb_array`` image (a copy's agents share one: one per copy)."""
        envs = self.rows.render_envs()
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it is `rgb_array` to obtain images.",
                stacklevel=2,
            )
            return [None for _ in envs]
        self._check_idle("get_images")
        return self._on_envs(CallOp.RENDER, envs)

    def _on_envs(self, op: CallOp, envs: list[int], *args: Any) -> list[Any]:
        """``op`` on the run's ``envs``, its errors naming them as the rows' caller reads them."""
        try:
            return self._run.call(op, envs, *args)
        except VecShmError as error:
            self.rows.raise_named(error)

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.waiting = False
        self._run.close()


class SB3AsyncBatches(SB3Kernel):
    """The SB3 kernel with EnvPool-style async batches (``async_reset``, ``send``, ``recv``), for a
    class whose run has them (a local one)."""

    _run: SB3AsyncRun

    def async_reset(self) -> None:
        """Reset every env without waiting; ``recv()`` returns the reset observations batch by batch."""
        self._run.check_usable()
        self._run.async_reset(self._reset_requests())
        self._reset_seeds()
        self._reset_options()

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Step ``env_ids`` (default: the batch the last ``recv`` returned) without waiting; a copy's
        rows: one per agent of each copy, in ``env_ids`` order."""
        run = self._run
        run.check_usable()
        if self.rows.regroups:
            actions = self.rows.sent(actions, run.last_received if env_ids is None else env_ids)
        run.send(actions, env_ids)

    def recv(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]], np.ndarray]:
        """The first ``batch_size`` envs (copies) to finish: ``(obs, rewards, terminated, truncated,
        infos, env_ids)``, their rows in ``env_ids`` order.

        Infos follow SB3's conventions (``terminal_observation``, ``TimeLimit.truncated``); the
        info of an automatic reset is in ``reset_infos`` at the row's index."""
        run = self._run
        try:
            batch = run.recv()
        except VecShmError as error:
            self.rows.raise_named(error)
        obs, rewards, _, terminated, truncated, infos = self._results(batch, True)
        return run.hand_back((obs, rewards, terminated, truncated, infos, batch.env_ids))
