"""``ShmVectorEnv``: a ``gymnasium.vector.VectorEnv`` (and ``AsyncVectorEnv`` drop-in) on the engine."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from gymnasium import logger
from gymnasium.vector import AutoresetMode

from vecshm.options import VecOptions, resolved, takes_options
from vecshm.parent.core.inspection import RunProperties
from vecshm.parent.core.run import VecRun
from vecshm.parent.handback.results import Batch
from vecshm.parent.options import tuple_of_values
from vecshm.parent.processes.start_methods import gymnasium_start_method
from vecshm.shared.errors import ClosedError, WorkerError
from vecshm.shared.protocol import AutoReset, CallOp
from vecshm.vector.infos import step_infos, vector_infos
from vecshm.vector.rules import (
    AUTORESET,
    CallState,
    check_async_options,
    check_reset_mask,
    check_spaces,
    custom_worker_argument,
    expect_idle,
    expect_pending,
    raise_as_async_vector_env,
    refuse_what_shared_memory_refuses,
    seed_list,
    values_per_env,
    vector_spaces,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["ShmVectorEnv"]


@takes_options(VecOptions)
class ShmVectorEnv(RunProperties, gym.vector.VectorEnv):
    """Gymnasium's vector API on shared memory; accepts ``AsyncVectorEnv``'s constructor keywords.

    >>> import gymnasium as gym
    >>> from vecshm import ShmVectorEnv
    >>> envs = ShmVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])
    >>> obs, infos = envs.reset(seed=0)
    >>> obs, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
    >>> envs.close()

    With a custom ``worker`` (Gymnasium's pipe protocol) the envs run on ``AsyncVectorEnv`` itself:
    see :mod:`vecshm.vector.on_pipes`.

    The arguments before ``*`` are ``AsyncVectorEnv``'s, with its meanings (``shared_memory`` is
    always true here; ``max_concurrency`` caps the worker processes); ``reset_ahead=True`` resets an
    env whose episode ended while the caller computes, so that the next step does not wait for it
    (``autoreset_mode`` NEXT_STEP only; docs/gymnasium.md, "Resetting ahead"). ``device`` (vecshm's
    options, below) returns observations, rewards and flags of ``step``, ``reset`` and ``recv`` as
    torch tensors there (docs/gpu.md).
    """

    # The subclass that runs a custom ``worker`` on AsyncVectorEnv's pipes: it names itself, where it
    # is defined (``class ...(..., ShmVectorEnv, runs_custom_workers=True)``, vecshm.vector.on_pipes,
    # which vecshm.vector imports with this class). Not an import of it here: it derives from this
    # class, so each importing the other would be a circle.
    _on_pipes: type | None = None

    def __init_subclass__(cls, runs_custom_workers: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if runs_custom_workers:
            ShmVectorEnv._on_pipes = cls

    def __new__(cls, *args: Any, **kwargs: Any) -> ShmVectorEnv:
        """``ShmVectorEnv(..., worker=fn)`` is the subclass on pipes; any other call, this class."""
        on_pipes = ShmVectorEnv._on_pipes
        if cls is ShmVectorEnv and on_pipes is not None and custom_worker_argument(args, kwargs) is not None:
            cls = on_pipes
        return super().__new__(cls)

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        shared_memory: bool = True,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        worker: Callable[..., None] | None = None,
        observation_mode: str | tuple[gym.Space, gym.Space] = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        max_concurrency: int | None = None,
        *,
        reset_ahead: bool = False,
        **options: Unpack[VecOptions],
    ) -> None:
        self.closed = True  # until the workers are up
        self.env_fns = env_fns
        self.worker = worker  # None here: ShmVectorEnv(worker=fn) is a ShmVectorEnvOnPipes
        self.shared_memory = shared_memory  # always shared here; kept for AsyncVectorEnv compatibility
        self.copy = copy
        self.context = context
        self.daemon = daemon
        self.observation_mode = observation_mode
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        check_async_options(worker, observation_mode, max_concurrency)
        if reset_ahead and self.autoreset_mode is not AutoresetMode.NEXT_STEP:
            raise ValueError(f"reset_ahead=True needs autoreset_mode NEXT_STEP, got {self.autoreset_mode}")
        self.max_concurrency = max_concurrency
        fns = list(env_fns)
        given = resolved("ShmVectorEnv", options)
        self._run = run = VecRun(
            fns,
            given,
            autoreset=AutoReset.NEXT_STEP_AHEAD if reset_ahead else AUTORESET[self.autoreset_mode],
            start_method=context if context is not None else gymnasium_start_method(sys._getframe(), fns),
            daemon=daemon,
            check_spaces=functools.partial(check_spaces, observation_mode),
            batch_dynamic=tuple_of_values,
            max_workers=max_concurrency,
        )
        self.closed = False
        self.device = given["device"]
        self._state = CallState.DEFAULT
        self.num_envs = run.num_envs
        self._all = list(range(self.num_envs))
        self._all_ids = np.arange(self.num_envs)
        try:
            single_obs, obs_space, single_action, action_space = vector_spaces(run, self.num_envs, observation_mode)
            self.single_observation_space, self.observation_space = single_obs, obs_space
            self.single_action_space, self.action_space = single_action, action_space
            if shared_memory:
                refuse_what_shared_memory_refuses(self.single_observation_space)
            metadata = run.call(CallOp.GET_ATTR, [0], "metadata")[0]
            render_mode = run.call(CallOp.GET_ATTR, [0], "render_mode")[0]
        except BaseException:
            self.close()
            raise
        self.metadata = {**metadata, "autoreset_mode": self.autoreset_mode}
        self.render_mode = render_mode

    # -- reset ------------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        try:
            self.reset_async(seed=seed, options=options)
            return self._run.hand_back(self.reset_wait())
        except KeyboardInterrupt:
            self._nothing_pending()
            raise

    def reset_async(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        self._assert_is_running()
        seeds = seed_list(seed, self.num_envs)
        expect_idle(self._state, "reset_async", self._run.in_flight)
        mask = np.ones(self.num_envs, dtype=bool)
        if options is not None and "reset_mask" in options:
            options = dict(options)
            mask = check_reset_mask(options.pop("reset_mask"), self.num_envs)
        self._reset_mask = mask
        requests = [{"seed": s, "options": options} if m else None for s, m in zip(seeds, mask)]
        # Every worker takes part, even in a partial reset: the others rewrite their envs' latest
        # observations into the new slot, so the batch returned is whole.
        self._run.start_reset(requests, self.copy or self._run.outputs.lends)
        self._state = CallState.WAITING_RESET

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        batch = self._wait_pending(CallState.WAITING_RESET, "reset_wait", "reset_async", timeout)
        # (a restarted worker's envs were all reset, those outside the mask too: their infos say so)
        chosen = np.flatnonzero(self._reset_mask | np.isin(self._all_ids, list(batch.restarted)))
        obs = self._run.observations(batch, self.copy)
        return obs, vector_infos(batch, self.num_envs, chosen, chosen, self)

    # -- step -------------------------------------------------------------------------------------

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        try:
            self.step_async(actions)
            return self.step_wait()
        except KeyboardInterrupt:
            self._nothing_pending()
            raise

    def step_async(self, actions: Any) -> None:
        self._assert_is_running()
        if self._state is not CallState.DEFAULT or self._run.in_flight:  # (the check, only to raise)
            expect_idle(self._state, "step_async", self._run.in_flight)
        # whole batches come lent from a slot for copies (``copy``) and for copies to a device (``lends``)
        self._run.start_step(actions, self.copy or self._run.outputs.lends)
        self._state = CallState.WAITING_STEP

    def step_wait(self, timeout: float | None = None) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        return self._run.hand_back(
            self._results(self._wait_pending(CallState.WAITING_STEP, "step_wait", "step_async", timeout))
        )

    def _wait_pending(self, state: CallState, call: str, opener: str, timeout: float | None) -> Batch:
        """The results of the pending ``state`` call (``call``, opened by ``opener``); whatever
        happens, the vec env is back in the default state after it."""
        self._assert_is_running()
        if self._state is not state:
            expect_pending(self._state, state, call, opener)
        try:
            return self._run.finish(timeout)
        except WorkerError as error:
            raise_as_async_vector_env(error)
        finally:
            self._state = CallState.DEFAULT

    def _results(self, batch: Batch) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Gymnasium-shaped results of ``batch`` (numpy, or torch tensors for a ``device``; infos stay numpy)."""
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        ended = same_step and bool(batch.terminated.any() or batch.truncated.any())  # (final_info)
        infos = {} if not ended and batch.infos_empty() else step_infos(batch, same_step, self._all_ids, self)
        return (*self._run.step_results(batch, batch.rewards, self.copy), infos)

    # -- async batches (EnvPool style) ------------------------------------------------------------

    def async_reset(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """Reset every env without waiting; ``recv()`` returns the reset results batch by batch."""
        self._assert_is_running()
        expect_idle(self._state, "async_reset", self._run.in_flight)
        self._run.async_reset([{"seed": s, "options": options} for s in seed_list(seed, self.num_envs)])

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Step ``env_ids`` (default: the batch the last ``recv`` returned) without waiting."""
        self._assert_is_running()
        if self._state is not CallState.DEFAULT:  # (the check, only to raise; envs may be in flight)
            expect_idle(self._state, "send", self._run.in_flight)
        self._run.send(actions, env_ids)

    def recv(self, timeout: float | None = None) -> tuple[Any, Any, Any, Any, dict[str, Any], np.ndarray]:
        """The first ``batch_size`` envs to finish: ``(obs, rewards, terminations, truncations, infos, env_ids)``.

        Infos are batched over the returned envs (masks of length ``batch_size``), in ``env_ids`` order.
        """
        self._assert_is_running()
        try:
            batch = self._run.recv(timeout)
        except WorkerError as error:
            raise_as_async_vector_env(error)
        return self._run.hand_back((*self._results(batch), batch.env_ids))  # type: ignore[return-value]  # recv's batches name their envs

    # -- calls ------------------------------------------------------------------------------------

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        try:
            self.call_async(name, *args, **kwargs)
            return self.call_wait()
        except KeyboardInterrupt:
            self._nothing_pending()
            raise

    def call_async(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        self._assert_is_running()
        expect_idle(self._state, "call_async", self._run.in_flight)
        self._call = (name, args, kwargs)
        self._state = CallState.WAITING_CALL

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        self._assert_is_running()
        expect_pending(self._state, CallState.WAITING_CALL, "call_wait", "call_async")
        name, args, kwargs = self._call
        self._state = CallState.DEFAULT
        if name in ("reset", "step", "close", "_setattr", "_check_spaces"):
            raise ValueError(f"Trying to call function `{name}` with `call`, use `{name}` directly instead.")
        try:
            return tuple(self._run.call(CallOp.ENV_METHOD, self._all, name, args, kwargs, True))
        except WorkerError as error:
            raise_as_async_vector_env(error)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | object) -> None:
        self._assert_is_running()
        values = values_per_env(values, self.num_envs)
        expect_idle(self._state, "set_attr", self._run.in_flight)
        try:
            for i, value in enumerate(values):
                self._run.call(CallOp.SET_ATTR, [i], name, value, True)
        except WorkerError as error:
            raise_as_async_vector_env(error)

    def render(self) -> tuple[Any, ...] | None:
        return self.call("render")

    @property
    def np_random_seed(self) -> tuple[int, ...]:
        return self.get_attr("np_random_seed")

    @property
    def np_random(self) -> tuple[np.random.Generator, ...]:
        return self.get_attr("np_random")

    # -- lifecycle --------------------------------------------------------------------------------

    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """Close the workers; a pending call is waited for first (``timeout``), as AsyncVectorEnv does."""
        timeout = 0 if terminate else timeout
        if self._state is not CallState.DEFAULT:
            logger.warn(f"Calling `close` while waiting for a pending call to `{self._state.value}` to complete.")
            try:
                getattr(self, f"{self._state.value}_wait")(timeout)
            except Exception:  # a failed or timed-out call: the workers are shut down below anyway
                pass
        self._state = CallState.DEFAULT
        self._run.close()

    def __enter__(self) -> ShmVectorEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # an __init__ that failed before ``closed`` was set (VectorEnv's is False) left nothing to close
        if not getattr(self, "closed", True) and hasattr(self, "_state"):
            self.close(terminate=True)

    def _nothing_pending(self) -> None:
        """After a Ctrl-C in ``reset``, ``step`` or ``call``: no call is left pending for close() to wait
        for (forever, on a hung env). (A ``try`` costs nothing on the step path; a ``with`` does.)"""
        self._state = CallState.DEFAULT

    def _assert_is_running(self) -> None:
        if self.closed:
            raise ClosedError(f"Trying to operate on `{type(self).__name__}`, after a call to `close()`.")
        self._run.check_usable()
