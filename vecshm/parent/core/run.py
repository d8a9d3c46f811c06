"""One vec env's run: the calls every facade makes, whatever API it speaks.

A facade maps its peer's keywords, keeps its peer's state rules (SB3's ``waiting``,
``AsyncVectorEnv``'s pending-call states and messages) and shapes results as its peer does.
Everything about running the envs goes through a :class:`VecRun`, written once, as EnvPool's
Python layer writes send/recv/step/reset once for every API flavour:

- a whole batch: :meth:`VecRun.start_step` or :meth:`VecRun.start_reset`, then :meth:`VecRun.finish`
  for its :class:`~vecshm.parent.handback.results.Batch` (the run holds the command in between);
- EnvPool-style batches: :meth:`VecRun.async_reset`, :meth:`VecRun.send`, :meth:`VecRun.recv`;
- calls on some envs (:meth:`VecRun.call`), and what a caller may inspect.

Both kinds of batch travel the same trip (:class:`~vecshm.parent.core.commands.Commands`: start,
wait, collect); a run only chooses which lanes run and where their observations land. A whole
batch is not ``send`` + ``recv`` of every env, for two reasons: it knows that every lane runs and
every lane finishes, so it needs none of the async batches' per-env bookkeeping (which envs the
caller holds, actions staged for a lane's other envs, the ring's units, checked env ids) and its
command words are written as whole arrays; and its observations go to a slot that stays lent
until the caller lets go of the arrays, where async batches lend ring units in the order lanes
finish. Async batches of every env (``batch_size=num_envs``) are the ``send`` + ``recv`` shape.

It owns the engine, its async batches, the outputs (numpy arrays, or torch tensors for a
``device``) and the CUDA registration of the segment (``pin_memory``).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np

from vecshm.parent.control import Ticket
from vecshm.parent.core.balance import CoreBalance
from vecshm.parent.core.batching import AsyncBatches
from vecshm.parent.core.calls import by_lane
from vecshm.parent.core.engine import Engine
from vecshm.parent.core.run_stats import RunStats
from vecshm.parent.core.waiting import WaitObserver
from vecshm.parent.engine_options import EngineOptions
from vecshm.parent.handback.delivery import NUMPY, NumpyOutputs, build_outputs, output_device
from vecshm.parent.handback.results import Batch
from vecshm.parent.plan import VecEnvPlan
from vecshm.parent.processes.start_methods import default_start_method
from vecshm.shared.buffers import Buffers
from vecshm.shared.errors import AlreadyPendingCallError, NoAsyncCallError, StatsOffError
from vecshm.shared.pickling import Pickled
from vecshm.shared.protocol import Arena, CallOp, Phase
from vecshm.shared.sync import yield_core
from vecshm.stats import VecStats

__all__ = ["Runtime", "VecRun"]

Results = TypeVar("Results")


@dataclass(frozen=True)
class Runtime:
    """How a vec env runs, as decided when it started: ``start_method`` and ``transport``
    (``"native"`` or ``"portable"``, see docs/design.md); ``worker_cores``: each process's cores
    (None: not pinned); ``nbytes``: the shared segment's size; ``ring``: whether async batches
    lend the observation rows the lanes wrote (else they are copied; docs/design.md)."""

    start_method: str
    transport: str
    worker_cores: list[list[int] | None]
    nbytes: int
    ring: bool


class VecRun:
    """The lanes of one vec env, and the commands, batches and calls a facade sends them."""

    def __init__(self, env_fns: Sequence[Callable[[], Any]], options: Mapping[str, Any], **rules: Any) -> None:
        """Start the lanes, the async batches and the outputs; nothing is left running if any fails.

        ``options``: vecshm's options as the facade's caller gave them, checked and completed
        (:func:`vecshm.options.resolved`); ``rules``: what the facade itself asks of the engine,
        its peer's rules (``autoreset``, ``check_spaces``, ``start_method``, ...; the fields of
        :class:`~vecshm.parent.engine_options.EngineOptions`)."""
        options = dict(options)
        batch_size, device, pin_memory = options.pop("batch_size"), options.pop("device"), options.pop("pin_memory")
        # the plan sizes its commands for the batches (see vecshm.parent.plan); AsyncBatches checks the size
        batch = int(batch_size) if isinstance(batch_size, (int, np.integer)) else None
        engine_options = EngineOptions(async_batch=batch, **options, **rules)
        start_method = engine_options.start_method or default_start_method()
        target, pin = output_device(device, pin_memory, start_method, engine_options.restarts)
        self._engine = engine = Engine(env_fns, engine_options)
        self._health = engine.health
        self._pending: Ticket | None = None  # the whole-batch command between a start_* and its finish
        self._last_batch: np.ndarray | None = None  # the envs the last recv returned: send's default
        self._registration: Any = None
        try:
            self._batches = AsyncBatches(engine, batch_size)
            # (vecshm.stats: counted from here where asked for; None: nothing counted, nothing paid)
            self._stats = RunStats(engine) if engine_options.stats else None
            # after the lanes started: none may inherit CUDA
            self.outputs, self._registration = build_outputs(target, pin, engine.buffers.mapping)
        except BaseException:
            engine.close()
            raise
        # What a caller may inspect, fixed once the run has started: plain values, which the
        # facades show as they are (vecshm.parent.core.inspection), with no layer of their own here.
        self.num_envs: int = engine.num_envs
        self.observation_space: gym.Space = engine.observation_space  # env 0's (each env's: ``env_spaces``)
        self.action_space: gym.Space = engine.action_space
        self.env_spaces: list[tuple[gym.Space, gym.Space]] = engine.env_spaces  # as each lane reported them
        self.plan: VecEnvPlan = engine.plan
        self.start_method: str = engine.start_method
        self.nbytes: int = engine.nbytes  # the shared segment's size
        self.segment: Buffers = engine.buffers  # the segment's arrays by name: read them, never write them
        self.core_balance: CoreBalance = engine.balance
        self.pin_memory: bool = self._registration is not None  # the segment page-locked and registered
        self.runtime = Runtime(
            engine.start_method,
            engine.transport.name,
            [None if cores is None else list(cores) for cores in engine.worker_cores],
            engine.nbytes,
            self._batches.ring is not None,
        )

    outputs: NumpyOutputs
    """What results become: numpy arrays, or torch tensors (``device=``; :mod:`vecshm.parent.handback.delivery`)."""

    # -- whole batches ----------------------------------------------------------------------------

    def start_step(self, actions: Any, lend: bool) -> None:
        """Step every env on its row of ``actions`` (checked first); :meth:`finish` returns the
        results. ``lend``: observations in a slot the batch lends, else views of slot 0 that the next
        command overwrites. Actions staged for async batches are dropped: every env gets one now."""
        if self._stats is not None:
            self._stats.entered()
        if self._batches.has_staged:
            self._batches.forget_staged()
        engine = self._engine
        dynamic = engine.actions.write(actions)
        if engine.balance.active:  # every lane runs at once: every core for them
            engine.balance.release()
        free = engine.slots.free  # (ObservationSlots.acquire inline, on the step path)
        self._pending = engine.commands.step(engine.plan.all_lanes, free.pop() if lend and free else 0, dynamic)
        stats = self._stats
        if engine.hand_over_core:
            if stats is None:
                yield_core()
            else:  # (the core given to a lane: a wait for the lanes)
                handed = perf_counter()
                yield_core()
                stats.handed_over += perf_counter() - handed
        if stats is not None:
            stats.handed_back()

    def start_reset(self, requests: Sequence[dict[str, Any] | None], lend: bool) -> None:
        """Reset every env whose ``requests[i]`` holds its ``reset`` keywords; an env whose request is
        None keeps its observation, rewritten into the batch's slot (:meth:`finish` returns it whole)."""
        if self._stats is not None:
            self._stats.entered()
        if self._batches.has_staged:
            self._batches.forget_staged()
        engine = self._engine
        if engine.balance.active:  # every lane runs at once: every core for them
            engine.balance.release()
        slot = engine.slots.acquire() if lend else 0
        self._pending = engine.commands.reset(list(requests), slot, engine.plan.all_lanes)
        if self._stats is not None:
            self._stats.handed_back()

    @property
    def pending(self) -> bool:
        """Whether a whole-batch command was started and not finished."""
        return self._pending is not None

    def finish(self, timeout: float | None = None) -> Batch:
        """Wait for the pending command (no longer pending, whatever happens); its results.
        ``timeout`` (seconds) overrides the run's ``step_timeout``."""
        ticket, self._pending = self._pending, None
        if ticket is None:
            raise NoAsyncCallError("finish() was called with no command pending")
        if self._stats is not None:
            self._stats.entered()
        engine, slot = self._engine, ticket.slot
        lent = engine.slots.lend(slot) if slot > 0 else None  # made while the lanes run, not after
        try:
            collected = engine.commands.collect(ticket, timeout)
        except BaseException:
            lent = None  # (the slot goes back with its arrays: nobody will read it)
            raise
        batch = Batch(engine.reader, None, collected.extras, lent)
        if self._stats is not None:
            self._stats.whole_batch(batch, ticket.phase is Phase.STEP)
        return batch

    # -- async batches (EnvPool style) ------------------------------------------------------------

    def async_reset(self, requests: Sequence[dict[str, Any] | None]) -> None:
        """Reset every env without waiting (whatever was in flight is finished and dropped first);
        :meth:`recv` returns the results batch by batch."""
        if self._stats is not None:
            self._stats.entered()
        self._batches.reset(list(requests))
        if self._stats is not None:
            self._stats.async_reset()
            self._stats.handed_back()

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Step ``env_ids`` (default: the batch the last :meth:`recv` returned) without waiting."""
        if env_ids is None:
            if self._last_batch is None:
                raise ValueError("send() needs env_ids before the first recv()")
            env_ids = self._last_batch
        if self._stats is not None:
            self._stats.entered()
        self._batches.send(actions, env_ids)
        if self._stats is not None:
            self._stats.handed_back()

    @property
    def last_received(self) -> np.ndarray | None:
        """The envs the last :meth:`recv` returned (None before the first): :meth:`send`'s default."""
        return self._last_batch

    def recv(self, timeout: float | None = None) -> Batch:
        """The first ``batch_size`` envs to finish (their ids: the batch's ``env_ids``); a
        ``ClosedError`` after :meth:`close`, a ``FailedError`` after a failure."""
        if not self._health.usable:  # (an attribute read while the run is usable)
            self._health.check_usable()
        if self._stats is not None:
            self._stats.entered()
        if self.outputs is not NUMPY:  # (numpy outputs: nothing to do, and nothing to call on the step path)
            self.outputs.before_batch()
        batch = self._batches.recv(timeout)
        self._last_batch = batch.env_ids
        if self._stats is not None:
            self._stats.async_batch(batch)
        return batch

    def observations(self, batch: Batch, copy: bool) -> Any:
        """``batch``'s observations as the outputs give them (numpy arrays, or tensors for a ``device``)."""
        if self.outputs is NUMPY:
            return batch.observations(copy)
        return self.outputs.observations(batch, copy)

    def step_results(self, batch: Batch, rewards: np.ndarray, copy: bool) -> tuple[Any, Any, Any, Any]:
        """``(observations, rewards, terminations, truncations)`` of ``batch`` as the outputs give them."""
        if self.outputs is NUMPY:
            return batch.observations(copy), rewards, batch.terminated, batch.truncated
        return self.outputs.step(batch, rewards, copy)

    @property
    def in_flight(self) -> bool:
        """Whether envs sent with ``send`` (or ``async_reset``) have not all come back from ``recv`` yet."""
        return self._batches.active

    def drain(self) -> None:
        """Finish and drop whatever async batches have in flight (before a synchronous command)."""
        self._batches.drain()

    # -- calls on some envs -----------------------------------------------------------------------

    def call(self, op: CallOp, env_ids: Sequence[int], *args: Any) -> list[Any]:
        """The rare operation ``op`` (:class:`~vecshm.shared.protocol.CallOp`) on ``env_ids``; each env's result."""
        if self._stats is None:
            return [pickle.loads(blob) for blob in self._call(op, env_ids, args)]
        self._stats.entered()
        try:
            return [pickle.loads(blob) for blob in self._call(op, env_ids, args)]
        finally:
            self._stats.handed_back()

    def call_pickled(self, op: CallOp, env_ids: Sequence[int], args: tuple[Any, ...] | Pickled) -> list[bytes]:
        """:meth:`call` with the arguments maybe still pickled and the results left pickled, for a
        process that passes both on (a Ray actor; :class:`~vecshm.shared.pickling.Pickled`). Refused
        while a command or an async batch holds the workers."""
        self.check_usable()
        if self.pending or self.in_flight:
            raise AlreadyPendingCallError(f"{op.name} was called while envs are stepping; finish or recv() them first")
        return self._call(op, env_ids, args)

    def _call(self, op: CallOp, env_ids: Sequence[int], args: tuple[Any, ...] | Pickled) -> list[bytes]:
        """The call's trip, as a step's (:class:`~vecshm.parent.core.commands.Commands`): started on
        the lanes hosting ``env_ids``, collected from all of them; each env's answer as its lane
        pickled it (the arguments may come still pickled: the lanes load them)."""
        self.check_usable()
        ids, lanes = by_lane(self.plan, env_ids)
        if not ids:
            return []
        commands = self._engine.commands
        during = Phase.of_call(op)
        ticket = commands.call(
            np.array(sorted(lanes), dtype=np.int64), {k: (op, lanes[k], args) for k in lanes}, during
        )
        _, side = commands.collect(ticket, rare=True)
        return [side.piped[(Arena.ANSWER, i)] for i in ids]

    # -- state ------------------------------------------------------------------------------------

    def check_usable(self) -> None:
        """Raise ``ClosedError`` after :meth:`close`, ``FailedError`` after a failure."""
        if not self._health.usable:  # (on the step path: an attribute read while the run is usable)
            self._health.check_usable()

    def close(self) -> None:
        """Finish the copies in flight, unregister the segment, then stop the lanes (in that
        order: a registration must be undone while its memory is still mapped)."""
        self._pending = None
        try:
            self.outputs.close()
        finally:
            if self._registration is not None:
                self._registration.close()
            self._engine.close()

    # -- what a caller may inspect ----------------------------------------------------------------

    def stats(self) -> VecStats:
        """Where the time went since the start or :meth:`reset_stats` (:mod:`vecshm.stats`), as a value."""
        return self._counting().snapshot()

    def reset_stats(self) -> None:
        """Count :meth:`stats` from now."""
        self._counting().reset()

    def _counting(self) -> RunStats:
        if self._stats is None:
            raise StatsOffError(
                "this vec env does not count where the time goes: create it with stats=True (off by default, as "
                "counting costs cheap steps a few percent; docs/usage.md, 'Where the time goes')"
            )
        return self._stats

    def hand_back(self, results: Results) -> Results:
        """The last point of a command's trip: a facade hands ``results``, shaped as its peer
        shapes them, to its caller (``step_wait``, ``reset``, ``recv``). The caller's time starts
        here (:mod:`vecshm.stats`: the vec env's own work ends once the results are shaped, not
        when the lanes' results were collected)."""
        if self._stats is not None:
            self._stats.handed_back()
        return results

    @property
    def processes(self) -> list[Any]:
        """The worker processes (``multiprocessing.Process``), one per process of the plan; a
        restarted lane's new process replaces its old one."""
        return list(self._engine.pool.processes)

    @property
    def observer(self) -> WaitObserver | None:
        """An object told of every wait for lanes, and every sleep within one (None: none); see
        :class:`vecshm.parent.core.waiting.WaitObserver`. For benchmarks and profilers: the step path checks
        for it once per wait."""
        return self._engine.waiter.observer

    @observer.setter
    def observer(self, observer: WaitObserver | None) -> None:
        self._engine.waiter.observer = observer
