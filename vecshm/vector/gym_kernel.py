"""Gymnasium's ``VectorEnv`` contract, written once for every Gymnasium-facing vec env: :class:`GymKernel`.

``AsyncVectorEnv`` keeps one explicit state, which of its calls is pending (``reset``, ``step`` or
``call``, between the ``*_async`` and its ``*_wait``), refuses what comes out of turn with its own
errors and messages, waits for a pending call at ``close``, and logs each env's failure before it
raises the last. vecshm's Gymnasium-facing classes keep it alike, because they all sit on this
kernel: :class:`~vecshm.ShmVectorEnv` (an env a row), :class:`~vecshm.pettingzoo.AgentVectorEnv`
and :class:`~vecshm.pettingzoo.SuperSuitVecEnv` (an agent of a copy a row). Each says only:

- its **row map** (:mod:`vecshm.row_maps`): which rows it has and where each lives;
- its **result shape**: how a batch becomes its peer's return values (:meth:`GymKernel._step_results`,
  :meth:`GymKernel._reset_results`, :meth:`GymKernel._render_results`).

The kernel also holds vecshm's EnvPool-style async batches (``async_reset``, ``send``, ``recv``):
while envs are in flight, every other call is refused. The argument checks and messages it raises
are AsyncVectorEnv's, kept in :mod:`vecshm.vector.rules`.
"""

from __future__ import annotations

from typing import Any, NoReturn

import gymnasium as gym
import numpy as np
from gymnasium import logger
from gymnasium.vector import AutoresetMode

from vecshm.parent.core.inspection import StatsHooks
from vecshm.parent.core.run import VecRun
from vecshm.parent.handback.results import Batch
from vecshm.row_maps import EnvRows
from vecshm.shared.errors import ClosedError, VecShmError, WorkerError
from vecshm.shared.protocol import CallOp
from vecshm.vector.infos import step_infos, vector_infos
from vecshm.vector.rules import (
    CallState,
    check_reset_mask,
    expect_idle,
    expect_pending,
    raise_as_async_vector_env,
    seed_list,
    values_per_env,
)

__all__ = ["GymKernel"]


class GymKernel(StatsHooks, gym.vector.VectorEnv):
    """Gymnasium's ``VectorEnv`` on a run, with ``AsyncVectorEnv``'s state rules (see the module).

    A class on it starts its run, then calls :meth:`_started`; it sets its spaces and metadata,
    and supplies the result shape."""

    closed = True  # until the run is up: close() must not touch a half-built object
    copy = True  # observations as arrays of their own (True), or views the next command overwrites
    autoreset_mode = AutoresetMode.NEXT_STEP
    rows: EnvRows
    _run: VecRun
    _state: CallState  # set once the run is up (AsyncVectorEnv's own __del__ reads its presence as "started")

    def _started(self, run: VecRun, rows: EnvRows, own_arrays: bool) -> None:
        """Take ``run`` (started), with ``rows`` over its envs. ``own_arrays``: the ``copy`` option
        (observations copied out of the segment, else lent), ``copy`` as AsyncVectorEnv names it."""
        self._run, self.rows, self.copy = run, rows, own_arrays
        self.num_envs = rows.num_rows
        self._all_ids = np.arange(self.num_envs)
        self._state = CallState.DEFAULT
        self.closed = False

    # -- the result shape: Gymnasium's own, of a batch whose rows are the run's envs ----------------
    # (ShmVectorEnv's; the classes whose rows are agents of copies write their own)

    def _step_results(self, batch: Batch) -> tuple[Any, Any, Any, Any, Any]:
        """``(obs, rewards, terminations, truncations, infos)`` of ``batch`` (a step, or an async
        batch): numpy, or torch tensors for a ``device``; infos stay numpy."""
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        ended = same_step and bool(batch.terminated.any() or batch.truncated.any())  # (final_info)
        if not ended and batch.infos_empty():
            infos: dict[str, Any] = {}
        else:
            infos = step_infos(batch.step_info_parts(same_step, self._all_ids), same_step, self._all_ids, self)
        return (*self._run.step_results(batch, batch.rewards, self.copy), infos)

    def _reset_results(self, batch: Batch) -> tuple[Any, Any]:
        """``(obs, infos)`` of a reset's ``batch``; a restarted worker's envs were all reset, those
        outside the mask too, and their infos say so."""
        chosen = np.flatnonzero(self._reset_mask | np.isin(self._all_ids, list(batch.restarted)))
        obs = self._run.observations(batch, self.copy)
        return obs, vector_infos(batch.info_parts(chosen), self.num_envs, chosen, self)

    def _render_results(self, images: list[Any]) -> Any:
        """``render()``'s result from the images of the row map's ``render_envs``."""
        return tuple(images)

    @property
    def _same_step(self) -> bool:
        return self.autoreset_mode is AutoresetMode.SAME_STEP

    # -- reset ------------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, Any]:
        """Reset every env: env ``k`` of the run with ``seed + k`` (a list: a seed per row, an env's
        first row's counting)."""
        try:
            self.reset_async(seed=seed, options=options)
            return self._run.hand_back(self.reset_wait())
        except KeyboardInterrupt:
            self._nothing_pending()
            raise

    def _run_seeds(self, seed: int | list[int | None] | None) -> list[int | None]:
        """Each of the run's envs' seed: ``seed + k`` for env ``k``, whatever the number of processes."""
        rows = self.rows
        if isinstance(seed, (int, np.integer)):
            return [int(seed) + k for k in range(rows.num_envs)]
        seeds = seed_list(seed, rows.num_rows)
        return seeds if not rows.regroups else [seeds[r] for r in rows.first_rows()]

    def reset_async(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        self._assert_is_running()
        seeds = self._run_seeds(seed)
        expect_idle(self._state, "reset_async", self._run.in_flight)
        mask = np.ones(len(seeds), dtype=bool)
        # A partial reset names rows; where rows regroup (an agent of a copy), a copy resets whole,
        # so the mask is not vecshm's to read and goes to the env with the other options.
        if options is not None and "reset_mask" in options and not self.rows.regroups:
            options = dict(options)
            mask = check_reset_mask(options.pop("reset_mask"), self.num_envs)
        self._reset_mask = mask
        requests = [{"seed": s, "options": options} if m else None for s, m in zip(seeds, mask)]
        # Every worker takes part, even in a partial reset: the others rewrite their envs' latest
        # observations into the new slot, so the batch returned is whole.
        self._run.start_reset(requests, self.copy or self._run.outputs.lends)
        self._state = CallState.WAITING_RESET

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, Any]:
        return self._reset_results(self._wait_pending(CallState.WAITING_RESET, "reset_wait", "reset_async", timeout))

    # -- step -------------------------------------------------------------------------------------

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, Any]:
        try:
            self.step_async(actions)
            return self.step_wait()
        except KeyboardInterrupt:
            self._nothing_pending()
            raise

    def step_async(self, actions: Any) -> None:
        self._assert_is_running()
        run, rows = self._run, self.rows
        if self._state is not CallState.DEFAULT or run.in_flight:  # (the check, only to raise)
            expect_idle(self._state, "step_async", run.in_flight)
        # whole batches come lent from a slot for copies (``copy``) and for copies to a device (``lends``)
        run.start_step(
            rows.to_envs(actions, rows.num_envs) if rows.regroups else actions, self.copy or run.outputs.lends
        )
        self._state = CallState.WAITING_STEP

    def step_wait(self, timeout: float | None = None) -> tuple[Any, Any, Any, Any, Any]:
        batch = self._wait_pending(CallState.WAITING_STEP, "step_wait", "step_async", timeout)
        return self._run.hand_back(self._step_results(batch))

    def _wait_pending(self, state: CallState, call: str, opener: str, timeout: float | None) -> Batch:
        """The results of the pending ``state`` call (``call``, opened by ``opener``); whatever
        happens, the vec env is back in the default state after it."""
        self._assert_is_running()
        if self._state is not state:
            expect_pending(self._state, state, call, opener)
        try:
            return self._run.finish(timeout)
        except VecShmError as error:
            self._raise(error)
        finally:
            self._state = CallState.DEFAULT

    # -- async batches (EnvPool style) ------------------------------------------------------------

    def async_reset(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """Reset every env without waiting; ``recv()`` returns the reset results batch by batch."""
        self._assert_is_running()
        expect_idle(self._state, "async_reset", self._run.in_flight)
        self._run.async_reset([{"seed": s, "options": options} for s in self._run_seeds(seed)])

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Step ``env_ids`` (default: the batch the last ``recv`` returned) without waiting; a copy's
        rows: one per agent of each copy, in ``env_ids`` order."""
        self._assert_is_running()
        if self._state is not CallState.DEFAULT:  # (the check, only to raise; envs may be in flight)
            expect_idle(self._state, "send", self._run.in_flight)
        if self.rows.regroups:
            actions = self.rows.sent(actions, self._run.last_received if env_ids is None else env_ids)
        self._run.send(actions, env_ids)

    def recv(self, timeout: float | None = None) -> tuple[Any, Any, Any, Any, Any, np.ndarray]:
        """The first ``batch_size`` envs (copies) to finish: ``(obs, rewards, terminations,
        truncations, infos, env_ids)``, their rows in ``env_ids`` order.

        Infos are batched over the returned rows, in ``env_ids`` order.
        """
        self._assert_is_running()
        try:
            batch = self._run.recv(timeout)
        except VecShmError as error:
            self._raise(error)
        return self._run.hand_back((*self._step_results(batch), batch.env_ids))  # type: ignore[return-value]  # recv's batches name their envs

    # -- calls ------------------------------------------------------------------------------------

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of each row's env (an attribute that is no method: its value)."""
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
        rows = self.rows
        every_row = list(rows.all_rows())
        envs = rows.envs_of(every_row)
        return tuple(rows.per_row(every_row, envs, self._answers(envs)))

    def _answers(self, envs: list[int]) -> list[Any]:
        """The pending call's answers, one per env of ``envs`` (the run's)."""
        self._assert_is_running()
        expect_pending(self._state, CallState.WAITING_CALL, "call_wait", "call_async")
        name, args, kwargs = self._call
        self._state = CallState.DEFAULT
        if name in ("reset", "step", "close", "_setattr", "_check_spaces"):
            raise ValueError(f"Trying to call function `{name}` with `call`, use `{name}` directly instead.")
        return self._on_envs(CallOp.ENV_METHOD, envs, name, args, kwargs, True)

    def _on_envs(self, op: CallOp, envs: list[int], *args: Any) -> list[Any]:
        """``op`` on the run's ``envs``, its failures logged and raised as AsyncVectorEnv's."""
        try:
            return self._run.call(op, envs, *args)
        except VecShmError as error:
            self._raise(error)

    def _raise(self, error: VecShmError) -> NoReturn:
        """Raise ``error`` naming the run's envs as the rows' caller reads them; an env's failure
        logged and raised as AsyncVectorEnv does (:func:`~vecshm.vector.rules.raise_as_async_vector_env`)."""
        named = self.rows.named(error)
        if isinstance(named, WorkerError):
            raise_as_async_vector_env(named)
        self.rows.raise_named(error)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | object) -> None:
        """Set ``name`` on every env of the run (one value for all, or one per env; a copy's: per copy)."""
        self._assert_is_running()
        values = values_per_env(values, self.rows.num_envs)
        expect_idle(self._state, "set_attr", self._run.in_flight)
        for k, value in enumerate(values):
            self._on_envs(CallOp.SET_ATTR, [k], name, value, True)

    def env_is_wrapped(self, wrapper_class: type) -> list[bool]:
        """Whether each row's env is wrapped in ``wrapper_class`` (a copy of a ``ParallelEnv``:
        Gymnasium's wrappers, PettingZoo's and SuperSuit's, and those of the AEC env it was made from)."""
        self._assert_is_running()
        expect_idle(self._state, "env_is_wrapped", self._run.in_flight)
        rows = self.rows
        every_row = list(rows.all_rows())
        envs = rows.envs_of(every_row)
        return rows.per_row(every_row, envs, self._on_envs(CallOp.IS_WRAPPED, envs, wrapper_class))

    def render(self) -> Any:
        """Each env's render (a copy's agents share one: one per copy), as the result shape gives it."""
        try:
            self.call_async("render")
            return self._render_results(self._answers(self.rows.render_envs()))
        except KeyboardInterrupt:
            self._nothing_pending()
            raise

    # AsyncVectorEnv's: one per env, where VectorEnv declares one value
    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]
        return self.get_attr("np_random_seed")

    @property  # type: ignore[misc]
    def np_random(self) -> tuple[np.random.Generator, ...]:  # type: ignore[override]
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

    def __enter__(self) -> GymKernel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # an __init__ that failed before the run started left nothing to close
        if not getattr(self, "closed", True) and hasattr(self, "_run"):
            self.close(terminate=True)

    def _nothing_pending(self) -> None:
        """After a Ctrl-C in ``reset``, ``step`` or ``call``: no call is left pending for close() to wait
        for (forever, on a hung env). (A ``try`` costs nothing on the step path; a ``with`` does.)"""
        self._state = CallState.DEFAULT

    def _assert_is_running(self) -> None:
        if self.closed:
            raise ClosedError(f"Trying to operate on `{type(self).__name__}`, after a call to `close()`.")
        self._run.check_usable()
