"""EnvPool-style asynchronous batches: step some envs, take back whichever finish first.

Workers are the unit: a batch is ``batch_size / envs_per_worker`` workers. ``send`` starts the
given envs, ``recv`` waits until enough workers in flight have finished and hands back their env
ids. Each env still sees exactly the actions it was sent, in order, so per-env results are the
same as in a synchronous run.

Where the engine has a ring (see :mod:`vecshm.ring`), workers write their observations in the
order they finish, and ``recv`` lends the batch's rows as they lie, in that order; otherwise the
batch is the first workers found finished, in env order, and its observations are copied out.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vecshm.engine import Engine
from vecshm.errors import AlreadyPendingCallError, NoAsyncCallError
from vecshm.ring import CLAIM

__all__ = ["AsyncBatches"]


class AsyncBatches:
    """Which workers are in flight, and the send/recv protocol over an :class:`Engine`."""

    def __init__(self, engine: Engine, batch_size: int | None) -> None:
        n = engine.num_envs
        self.engine = engine
        self.ring = engine.ring
        self.slot = 0 if self.ring is None else CLAIM  # where workers write an async command's observations
        self.in_flight = np.zeros(engine.num_workers, dtype=bool)
        if batch_size is None:  # one batch of every env: any split works
            self.batch_size, self.workers_per_batch = n, engine.num_workers
            return
        sizes = {stop - start for start, stop in engine.slices}
        if not isinstance(batch_size, (int, np.integer)) or not 1 <= batch_size <= n or n % batch_size:
            raise ValueError(f"batch_size must divide num_envs={n} (1 <= batch_size <= {n}), got {batch_size!r}")
        size = next(iter(sizes))
        if len(sizes) != 1 or batch_size % size:
            raise ValueError(
                f"batch_size={batch_size} must be a multiple of envs_per_worker ({sorted(sizes)}): batches are "
                "made of whole workers; pass envs_per_worker that divides batch_size"
            )
        self.batch_size = batch_size
        self.workers_per_batch = batch_size // size
        if self.ring is not None:
            self.ring.use(self.workers_per_batch)

    @property
    def active(self) -> bool:
        return bool(self.in_flight.any())

    def reset(self, requests: list[tuple[Any, Any] | None]) -> None:
        """Reset every env; the results come back through ``recv`` like step results."""
        self.drain()
        self.engine.send_resets(requests, self.engine.all_workers, self.slot)
        self.in_flight[:] = True

    def send(self, actions: Any, env_ids: Any) -> np.ndarray:
        """Start stepping ``env_ids`` (whole workers, idle) with one row of ``actions`` per env."""
        env_ids = np.asarray(env_ids, dtype=np.int64)
        workers = self.engine.workers_of(env_ids)
        busy = workers[self.in_flight[workers]]
        if len(busy):
            raise AlreadyPendingCallError(
                f"envs {self.engine.env_ids_of(busy).tolist()} are still in flight; recv() them before sending again",
                "send",
            )
        self.engine.send_step(actions, workers, env_ids, self.slot)
        self.in_flight[workers] = True
        return env_ids

    def recv(self, timeout: float | None = None) -> tuple[np.ndarray, list[np.ndarray] | None]:
        """Wait for the first ``batch_size`` envs to finish: their ids and, from the ring, their
        fixed observation leaves (None: read them from the engine)."""
        pending = np.flatnonzero(self.in_flight)
        if len(pending) == 0:
            raise NoAsyncCallError("recv() was called with no envs in flight; send() or async_reset() first", "recv")
        need = min(self.workers_per_batch, len(pending))
        if self.ring is None:
            done = np.sort(self.engine.collect(pending, "step", need=need, timeout=timeout))
            self.in_flight[done] = False
            return self.engine.env_ids_of(done), None
        done = self.engine.collect_units(self.ring.next_units(need), pending, timeout)
        self.in_flight[done] = False
        return self.engine.env_ids_of(done), self.ring.take(need)

    def drain(self) -> None:
        """Finish and drop whatever is in flight (before a synchronous call)."""
        pending = np.flatnonzero(self.in_flight)
        if len(pending):
            self.engine.collect(pending, "step")
            self.in_flight[:] = False
            if self.ring is not None:
                self.ring.discard(len(pending))
        if self.ring is not None:
            self.ring.rebuild()  # nothing in flight: the free units go back in ring order
