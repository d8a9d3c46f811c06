"""What ``ShmVecEnv`` and ``ShmVectorEnv`` share: an engine, its async batches, and EnvPool's calls.

Each facade keeps its peer's API and state rules (SB3's ``waiting``, AsyncVectorEnv's pending-call
states and messages) and shapes a :class:`~vecshm.parent.results.Batch` as its peer would. Everything
else about running envs is here or below: starting the engine, ``send``/``recv`` over
:class:`~vecshm.parent.batching.AsyncBatches`, and what a caller may inspect (``processes``, ``plan``,
``runtime``, ``segment``, ``observer``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vecshm.parent.balance import CoreBalance
from vecshm.parent.batching import AsyncBatches
from vecshm.parent.delivery import NUMPY, NumpyOutputs, build_outputs, output_device
from vecshm.parent.engine import Engine
from vecshm.parent.options import EngineOptions
from vecshm.parent.plan import VecEnvPlan
from vecshm.parent.start_methods import default_start_method
from vecshm.parent.waiting import Ticket, WaitObserver
from vecshm.shared.buffers import Buffers

__all__ = ["EngineFacade", "Runtime"]


@dataclass(frozen=True)
class Runtime:
    """How a vec env runs, as decided when it started: ``start_method`` and ``transport``
    (``"native"`` or ``"portable"``, see docs/design.md); ``worker_cores``: each process's cores
    (None: not pinned); ``nbytes``: the shared segment's size; ``ring``: whether async batches
    lend the observation rows the workers wrote (else they are copied; docs/design.md)."""

    start_method: str
    transport: str
    worker_cores: list[list[int] | None]
    nbytes: int
    ring: bool


class EngineFacade:
    """Base of both facades: ``self._engine`` and ``self._batches``, and ``send`` with its default ids."""

    _engine: Engine
    _batches: AsyncBatches
    _last_batch: np.ndarray | None
    _ticket: Ticket | None = None  # the whole-batch command pending between a *_async and its *_wait
    _outputs: NumpyOutputs = NUMPY  # numpy arrays, or torch tensors (``device=``; vecshm.parent.delivery)
    _registration: Any = None  # the segment registered with CUDA (``pin_memory=True``; vecshm.parent.cuda)

    def _start_engine(
        self,
        env_fns: Sequence[Callable[[], Any]],
        batch_size: int | None,
        device: Any = None,
        pin_memory: bool | None = None,
        **options: Any,
    ) -> None:
        """Start the workers (``options`` are :class:`~vecshm.parent.options.EngineOptions`), the async
        batches of ``batch_size`` envs, and the outputs for ``device`` (the segment registered with
        CUDA for ``pin_memory``); nothing is left running if any fails."""
        # the plan sizes its commands for the batches (see vecshm.parent.plan); AsyncBatches checks the size
        batch = int(batch_size) if isinstance(batch_size, (int, np.integer)) else None
        engine_options = EngineOptions(async_batch=batch, **options)
        start_method = engine_options.start_method or default_start_method()
        target, pin = output_device(device, pin_memory, start_method, engine_options.restarts)
        self._engine = Engine(env_fns, engine_options)
        self._last_batch = None
        try:
            self._batches = AsyncBatches(self._engine, batch_size)
            # after the workers started: none may inherit CUDA
            self._outputs, self._registration = build_outputs(target, pin, self._engine.buffers.mapping)
        except BaseException:
            self._engine.close()
            raise

    def _close_engine(self) -> None:
        """Finish the copies in flight, unregister the segment, then close the engine (in that order:
        a registration must be undone while its memory is still mapped)."""
        try:
            self._outputs.close()
        finally:
            if self._registration is not None:
                self._registration.close()
            self._engine.close()

    @property
    def pin_memory(self) -> bool:
        """Whether the segment is page-locked and registered with CUDA (``pin_memory``)."""
        return self._registration is not None

    @property
    def processes(self) -> list[Any]:
        """The worker processes (``multiprocessing.Process``), as the peers' ``processes``: one per
        worker, each hosting ``envs_per_worker`` envs, so fewer than ``num_envs`` when a worker hosts
        several. A restarted worker's new process replaces its old one."""
        return list(self._engine.pool.processes)

    @property
    def plan(self) -> VecEnvPlan:
        """Which envs each worker process hosts, and each command runs on (see :mod:`vecshm.parent.plan`)."""
        return self._engine.plan

    @property
    def runtime(self) -> Runtime:
        engine = self._engine
        return Runtime(
            engine.start_method,
            engine.transport.name,
            [None if cores is None else list(cores) for cores in engine.worker_cores],
            engine.nbytes,
            self._batches.ring is not None,
        )

    @property
    def segment(self) -> Buffers:
        """The shared segment's arrays by name (control words, rewards, info arenas, observation
        slots; see :mod:`vecshm.shared.buffers`), for diagnostics: read them, never write them."""
        return self._engine.buffers

    @property
    def core_balance(self) -> CoreBalance:
        """Whether the workers keep off the parent's core during async batches, and the measured
        ratio that decided it (``reserved``, ``ratio``; see :mod:`vecshm.parent.balance`)."""
        return self._engine.balance

    @property
    def in_flight(self) -> bool:
        """Whether envs sent with ``send`` (or ``async_reset``) have not all come back from ``recv`` yet."""
        return self._batches.active

    @property
    def observer(self) -> WaitObserver | None:
        """An object told of every wait for workers, and every sleep within one (None: none); see
        :class:`vecshm.parent.waiting.WaitObserver`. For benchmarks and profilers: the step path checks
        for it once per wait."""
        return self._engine.waiter.observer

    @observer.setter
    def observer(self, observer: WaitObserver | None) -> None:
        self._engine.waiter.observer = observer

    def _whole_slot(self, copy: bool) -> int:
        """Where a whole batch's observations go: a free slot that ``wait_all`` lends with them
        (``copy``), else slot 0, which its views share with the next command."""
        return self._engine.slots.acquire() if copy else 0

    def _check_send(self) -> None:
        """Raise if the facade's state does not allow ``send`` now (each peer has its own rules)."""
        raise NotImplementedError

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Step ``env_ids`` (default: the batch the last ``recv`` returned) without waiting."""
        self._check_send()
        if env_ids is None:
            if self._last_batch is None:
                raise ValueError("send() needs env_ids before the first recv()")
            env_ids = self._last_batch
        self._batches.send(actions, env_ids)
