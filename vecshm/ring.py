"""Where async batches land: a ring of output units that workers claim in the order they finish.

An async ``recv()`` returns the first workers to finish. For their observations to come back
without a copy, as a synchronous batch's do (see :mod:`vecshm.slots`), they must lie side by side
in the order the workers finished. So a worker that has stepped its envs claims the next free
*unit* (one row per env it hosts) and writes its observations there.

Claims go through a kernel pipe that holds the free units' numbers. Reading one number is atomic
among processes, there is no lock a dying worker could hold, and numbers come out in the order the
parent wrote them. The parent writes them in ring order and so knows which units the next claims
get: a batch is the next units in that order, lent as one array per observation leaf that gives
them back when the caller drops it. The parent lends at most ``units - workers`` units at once, so
a worker always finds a free one; beyond that, or when a batch's units are not adjacent, the batch
is copied out and its units go back at once.
"""

from __future__ import annotations

import os
import sys
from array import array
from collections import deque
from itertools import islice
from multiprocessing import reduction
from typing import Any

import numpy as np

from vecshm.buffers import Buffers
from vecshm.slots import lend_arrays

__all__ = ["UnitPipe", "UnitRing", "CLAIM", "ring_units", "RING_MIN_UNIT_BYTES", "LENDABLE_BATCHES"]

CLAIM = -1  # a worker's obs_slot word: claim a unit of the ring instead of writing a fixed slot
TOKEN = 4  # bytes per unit number in the pipe (a uint32 in native order)
LENDABLE_BATCHES = 2  # batches a caller may hold before further ones are copied out
RING_MIN_UNIT_BYTES = 64 * 1024  # below this, a copy costs less than lending (see slots.LEND_MIN_BYTES)


def ring_units(num_workers: int, workers_per_batch: int | None = None) -> int:
    """Units a ring needs: one in flight per worker, and ``LENDABLE_BATCHES`` batches lent (by
    default batches of every worker: the segment is laid out before the batch size is known)."""
    return num_workers + LENDABLE_BATCHES * (workers_per_batch or num_workers)


class UnitPipe:
    """The free units' numbers in a pipe: ``claim`` in any worker, ``give`` in the parent.

    Pickled into a worker (at process start) it carries only the read end.
    """

    def __init__(self, read_fd: int | None = None, write_fd: int = -1) -> None:
        if read_fd is None:
            read_fd, write_fd = os.pipe()
            os.set_blocking(read_fd, False)  # a claim never waits: an empty pipe is an error
        self.read_fd, self.write_fd = read_fd, write_fd

    def claim(self) -> int | None:
        """The next free unit, or None if there is none."""
        try:
            data = os.read(self.read_fd, TOKEN)
        except BlockingIOError:
            return None
        return int.from_bytes(data, sys.byteorder)

    def give(self, units: list[int]) -> None:
        """Append ``units`` to the free ones, in this order (nothing once closed)."""
        if self.write_fd < 0:
            return
        data = array("I", units).tobytes()  # native order: read back on this machine
        while data:
            data = data[os.write(self.write_fd, data) :]

    def take_all(self) -> None:
        """Empty the pipe (only while no worker can claim)."""
        while True:
            try:
                if not os.read(self.read_fd, 4096 * TOKEN):
                    return
            except BlockingIOError:
                return

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            if fd >= 0:
                os.close(fd)
        self.read_fd = self.write_fd = -1

    def __reduce__(self) -> tuple[Any, ...]:
        # Only meaningful while a child process is being started: the read end is duplicated into it.
        return (_rebuild_pipe, (reduction.DupFd(self.read_fd),))


def _rebuild_pipe(dup: Any) -> UnitPipe:
    return UnitPipe(dup.detach())


class UnitRing:
    """The parent's side: which units the next claims get, and lending or copying a batch of them."""

    def __init__(self, pipe: UnitPipe, buffers: Buffers, num_workers: int) -> None:
        spec = buffers.spec
        self.pipe = pipe
        self.buffers = buffers
        self.num_workers = num_workers
        self.units = spec.ring_units
        self.unit_rows = spec.unit_rows
        self.arrays = buffers.ring
        # per leaf: address of row 0, bytes per row, dtype, shape of a row
        self._leaves = [(a.ctypes.data, a.strides[0], a.dtype, a.shape[1:]) for a in self.arrays]
        self.max_lent = self.units - num_workers  # so that every worker in flight finds a free unit
        self._mapping: Any = np.frombuffer(buffers.segment.buffer, dtype=np.uint8)
        self._queue: deque[int] = deque()  # the units in the pipe, in the order workers will claim them
        self._lent: set[int] = set()
        self.rebuild()

    def use(self, workers_per_batch: int) -> None:
        """Use only the units batches of ``workers_per_batch`` need (only while no worker can claim).

        The fewer units the workers cycle through, the more of them are still in cache when written.
        """
        self.units = min(self.buffers.spec.ring_units, ring_units(self.num_workers, workers_per_batch))
        self.max_lent = self.units - self.num_workers
        self.rebuild()

    def next_units(self, n: int) -> np.ndarray:
        """The units the next ``n`` claims get (or got), in claim order."""
        return np.fromiter(islice(self._queue, n), dtype=np.int64, count=n)

    def owners(self, units: np.ndarray) -> np.ndarray | None:
        """The workers that wrote ``units``, once each has finished its command; else None.

        A worker names itself in its unit after its status and every result but ``done_seq``.
        """
        owners = self.buffers.unit_worker[units]
        return None if -1 in owners.tolist() else owners

    def take(self, n: int) -> list[np.ndarray]:
        """The observations (one array per leaf) of the next ``n`` units, which leave the queue.

        Lent when they are adjacent and the caller holds few enough; else copied, and the units
        are free again at once.
        """
        popleft = self._queue.popleft
        units = [popleft() for _ in range(n)]
        first, r = units[0], self.unit_rows
        if units != list(range(first, first + n)) or len(self._lent) + n > self.max_lent:
            index = np.concatenate([np.arange(u * r, (u + 1) * r) for u in units])
            arrays = [a[index] for a in self.arrays]
            self._free(units)
            return arrays
        regions = [(base + first * r * row, dtype, (n * r, *shape)) for base, row, dtype, shape in self._leaves]
        self._lent.update(units)
        return lend_arrays(regions, self._mapping, lambda: self._free(units, lent=True))

    def discard(self, n: int) -> None:
        """Free the next ``n`` units unread (their commands were drained)."""
        self._free([self._queue.popleft() for _ in range(n)])

    def rebuild(self) -> None:
        """Refill the pipe with every unit not lent, in ring order (only while no worker can claim).

        Batches dropped out of order, or drained, leave the queue out of ring order, so that later
        batches would not be adjacent; rebuilding when idle puts it back.
        """
        self.pipe.take_all()
        self._queue.clear()
        free = [u for u in range(self.units) if u not in self._lent]
        self._give(free)

    def _free(self, units: list[int], lent: bool = False) -> None:
        if self.pipe.write_fd < 0:  # the vec env is closed: nothing to give back
            return
        if lent:
            self._lent.difference_update(units)
        self._give(units)

    def _give(self, units: list[int]) -> None:
        unit_worker = self.buffers.unit_worker
        for u in units:  # before a worker can claim them again
            unit_worker[u] = -1
        self._queue.extend(units)
        self.pipe.give(units)

    def close(self) -> None:
        """Drop the ring's hold on the mapping (its views too); lent arrays keep theirs."""
        self._mapping = None
        self.arrays = []
