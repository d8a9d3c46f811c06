"""Where async batches land: a ring of output units that workers claim in the order they finish.

An async ``recv()`` returns the first workers to finish. For their observations to come back
without a copy, as a synchronous batch's do (see :mod:`vecshm.parent.handback.results`), they must lie side by side
in the order the workers finished. So a worker that has stepped its envs claims the next free
*unit* (one row per env it hosts) and writes its observations there.

Claims go through a kernel pipe that holds the free units' numbers. Reading one number is atomic
among processes, there is no lock a dying worker could hold, and numbers come out in the order the
parent wrote them. The parent writes them in ring order and so knows which units the next claims
get: a batch is the next rows in that order, lent as one array per observation leaf that gives
them back when the caller drops it. A batch need not be whole units (``batch_size`` need not be a
multiple of ``envs_per_worker``): one may end inside a unit, whose other rows start the next batch,
and a unit goes back once all its rows were taken and no lent batch views it. The parent lends at
most ``units - workers`` units at once, so a worker always finds a free one (a unit partly taken
belongs to a worker that cannot run again before the caller has all its envs back); beyond that,
or when a batch's units are not adjacent, the batch is copied out.
"""

from __future__ import annotations

import os
from array import array
from collections import deque
from itertools import islice
from typing import Any

import numpy as np

from vecshm.parent.handback.results import DEFAULT_LENDABLE_SLOTS, lend_arrays
from vecshm.shared.buffers import Buffers, BufferSpec
from vecshm.shared.layout import leaves, one_array
from vecshm.shared.protocol import AutoReset
from vecshm.shared.units import TOKEN, UnitPipe

__all__ = ["UnitRing", "ring_units", "segment_spec", "LENDABLE_BATCHES"]

LENDABLE_BATCHES = 2  # batches a caller may hold before further ones are copied out


def ring_units(num_lanes: int, units_per_batch: int | None = None, keep_latest: bool = False) -> int:
    """Units a ring needs: one in flight per lane, ``LENDABLE_BATCHES`` batches lent (by
    default batches of every worker: the segment is laid out before the batch size is known), and
    under the restart policy (``keep_latest``) one per lane that keeps its latest results."""
    return num_lanes * (2 if keep_latest else 1) + LENDABLE_BATCHES * (units_per_batch or num_lanes)


def segment_spec(plan: Any, observation_space: Any, action_space: Any, options: Any) -> BufferSpec:
    """The segment of a vec env of ``plan``: its observation slots (slot 0 and the lendable ones),
    and a ring for async batches where one pays (units of at least ``options.lend_min_bytes``;
    :meth:`vecshm.parent.plan.VecEnvPlan.ring_unit_rows`;
    the ring's units need non-blocking pipes, so no ring where ``os.set_blocking`` is missing); and
    final rows where the episode's last step resets the env and an observation is one array (the
    only final observations a row holds exactly: :meth:`vecshm.worker.runner.EnvRunner._write_final_obs`)."""
    obs_leaves = leaves(observation_space)
    env_bytes = sum(leaf.nbytes for leaf in obs_leaves if not leaf.dynamic)
    can_lend = hasattr(os, "set_blocking")
    unit_rows = plan.ring_unit_rows(env_bytes, options.lend_min_bytes) if can_lend else 0
    return BufferSpec(
        observation_space,
        action_space,
        plan.num_envs,
        plan.num_lanes,
        options.info_bytes,
        obs_slots=1 + DEFAULT_LENDABLE_SLOTS,
        ring_units=ring_units(plan.num_lanes, keep_latest=options.restarts) if unit_rows else 0,
        unit_rows=unit_rows,
        final_rows=one_array(obs_leaves) and options.autoreset is AutoReset.SAME_STEP,
    )


def units_spanned(batch_size: int, unit_rows: int) -> int:
    """The most units a batch of ``batch_size`` rows spans: whole units, or from any row of one on."""
    if batch_size % unit_rows == 0:
        return batch_size // unit_rows
    return (batch_size + 2 * unit_rows - 2) // unit_rows


class UnitRing:
    """The parent's side: which units the next claims get, and lending or copying a batch of them."""

    def __init__(self, pipe: UnitPipe, buffers: Buffers, num_lanes: int, keep_latest: bool = False) -> None:
        spec = buffers.spec
        self.pipe = pipe
        self.buffers = buffers
        self.num_lanes = num_lanes
        self.units = spec.ring_units
        self.unit_rows = spec.unit_rows
        self.arrays = buffers.ring
        # per leaf: address of row 0, bytes per row, dtype, shape of a row
        self._leaves = [(a.ctypes.data, a.strides[0], a.dtype, a.shape[1:]) for a in self.arrays]
        # Under the restart policy each lane's latest collected unit is kept (``latest``, ``_held``)
        # until its next one is collected: a restart ends the lost episodes on those observations.
        self.keep_latest = keep_latest
        self.latest = [-1] * num_lanes
        self._held = [False] * spec.ring_units
        self._reserved = num_lanes * (2 if keep_latest else 1)  # units the workers may hold
        self.max_lent = self.units - self._reserved  # so that every worker in flight finds a free unit
        self._mapping: Any = buffers.mapping
        # the units in the pipe, in the order workers will claim them (first: one partly taken)
        self._queue: deque[int] = deque()
        self._leases = [0] * spec.ring_units  # per unit: the lent batches viewing it
        self._lent_units = 0  # units some lent batch views
        self.offset = 0  # rows of the queue's first unit already taken (a batch ended inside it)
        self.rebuild()

    def use(self, units_per_batch: int) -> None:
        """Use only the units batches spanning ``units_per_batch`` need (only while no worker can claim).

        The fewer units the workers cycle through, the more of them are still in cache when written.
        """
        self.units = min(self.buffers.spec.ring_units, ring_units(self.num_lanes, units_per_batch, self.keep_latest))
        self.max_lent = self.units - self._reserved
        self.rebuild()

    def next_units(self, n: int) -> np.ndarray:
        """The next ``n`` units in claim order: one partly taken first, then those the next claims get (or got)."""
        return np.fromiter(islice(self._queue, n), dtype=np.int64, count=n)

    def units_for(self, rows: int) -> int:
        """How many units the next ``rows`` rows span (from the one partly taken, if any)."""
        return -(-(self.offset + rows) // self.unit_rows)

    def owners(self, units: np.ndarray) -> np.ndarray | None:
        """The workers that wrote ``units``, once each has finished its command; else None.

        A worker names itself in its unit after its status and every result but ``done_seq``.
        """
        owners = self.buffers.unit_lane[units]
        return None if -1 in owners.tolist() else owners

    def take(self, rows: int) -> list[np.ndarray]:
        """The observations (one array per leaf) of the next ``rows`` rows, whose units leave the
        queue once all their rows are taken.

        Lent when their units are adjacent and the caller holds few enough; else copied. A unit is
        free again once all its rows were taken and no lent batch views it.
        """
        r, first, queue, leases = self.unit_rows, self.offset, self._queue, self._leases
        count = -(-(first + rows) // r)
        self.offset = (first + rows) % r
        taken = count - 1 if self.offset else count  # units all of whose rows are now taken
        popleft = queue.popleft
        units = [popleft() for _ in range(taken)]
        if taken < count:
            units.append(queue[0])  # the batch ends inside this one: it stays first in the queue
        # whole units (batches of whole workers), the common case: all new, since queued units are never lent
        whole = not first and taken == count
        newly = count if whole else sum(1 for u in units if not leases[u])
        if self._lent_units + newly <= self.max_lent and (
            count == 1 or units == list(range(units[0], units[0] + count))
        ):
            for u in units:
                leases[u] += 1
            self._lent_units += newly
            start = units[0] * r + first
            regions = [
                (base + start * row, dtype, (rows, *shape), rows * row) for base, row, dtype, shape in self._leaves
            ]
            release = self._release_whole if whole else self._release
            return lend_arrays(regions, self._mapping, lambda: release(units))
        if count == 1:
            arrays = [a[units[0] * r + first : units[0] * r + first + rows].copy() for a in self.arrays]
        else:
            index = np.concatenate([np.arange(u * r, (u + 1) * r) for u in units])[first : first + rows]
            arrays = [a[index] for a in self.arrays]
        self._free([u for u in units[:taken] if not leases[u] and not self._held[u]])
        return arrays

    def discard(self, n: int) -> None:
        """Free, unread, the unit partly taken (if any) and the next ``n`` (their commands were drained)."""
        if self.offset:
            n, self.offset = n + 1, 0
        units = [self._queue.popleft() for _ in range(n)]
        self._free([u for u in units if not self._leases[u] and not self._held[u]])

    def _release_whole(self, units: list[int]) -> None:
        """A lent batch of whole units was dropped: no other batch views them, and none waits."""
        leases = self._leases
        for u in units:
            leases[u] = 0
        self._lent_units -= len(units)
        self._free([u for u in units if not self._held[u]] if self.keep_latest else units)

    def _release(self, units: list[int]) -> None:
        """A lent batch over ``units`` was dropped: free those no batch views and none of whose rows wait."""
        leases = self._leases
        for u in units:
            leases[u] -= 1
        unviewed = [u for u in units if not leases[u]]
        self._lent_units -= len(unviewed)
        if self.keep_latest:
            unviewed = [u for u in unviewed if not self._held[u]]
        if self.offset and self._queue:  # a unit whose other rows wait stays out of the pipe
            waiting = self._queue[0]
            unviewed = [u for u in unviewed if u != waiting]
        self._free(unviewed)

    def rebuild(self) -> None:
        """Refill the pipe with every unit not lent, in ring order (only while no worker can claim).

        Batches dropped out of order, or drained, leave the queue out of ring order, so that later
        batches would not be adjacent; rebuilding when idle puts it back.
        """
        _take_all(self.pipe)
        self._queue.clear()
        self.offset = 0
        free = [u for u in range(self.units) if not self._leases[u] and not self._held[u]]
        self._give(free)

    def collected(self, units: np.ndarray, lanes: np.ndarray) -> None:
        """``lanes`` wrote ``units`` (under ``keep_latest``): each one's latest results are kept
        there now, and the unit that kept its previous ones is free once no lent batch views it."""
        latest, held, leases = self.latest, self._held, self._leases
        freed = []
        for u, lane in zip(units.tolist(), lanes.tolist()):
            old, latest[lane], held[u] = latest[lane], u, True
            if old >= 0 and old != u:
                held[old] = False
                if not leases[old]:  # (its rows were all taken: the lane has run again since)
                    freed.append(old)
        self._free(freed)

    def recover_claims(self) -> None:
        """Give back first the units claimed but never written (their worker died in between), so
        that the next claims fill them in ring order (only while no live worker can claim)."""
        free = _take_all(self.pipe)
        in_pipe, owners = set(free), self.buffers.unit_lane
        lost = [u for u in self._queue if u not in in_pipe and owners[u] == -1]
        _give(self.pipe, lost + free)

    def _free(self, units: list[int]) -> None:
        if self.pipe.write_fd < 0 or not units:  # the vec env is closed: nothing to give back
            return
        self._give(units)

    def _give(self, units: list[int]) -> None:
        unit_lane = self.buffers.unit_lane
        for u in units:  # before a worker can claim them again
            unit_lane[u] = -1
        self._queue.extend(units)
        _give(self.pipe, units)

    def close(self) -> None:
        """Drop the ring's hold on the mapping (its views too); lent arrays keep theirs."""
        self._mapping = None
        self.arrays = []


def _give(pipe: UnitPipe, units: list[int]) -> None:
    """Append ``units`` to the free ones in ``pipe``, in this order (nothing once it is closed)."""
    if pipe.write_fd < 0:
        return
    data = array("I", units).tobytes()  # native order: read back on this machine
    while data:
        data = data[os.write(pipe.write_fd, data) :]


def _take_all(pipe: UnitPipe) -> list[int]:
    """Empty ``pipe`` (only while no worker can claim); the units it held, in order."""
    data = b""
    while True:
        try:
            chunk = os.read(pipe.read_fd, 4096 * TOKEN)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    return array("I", data).tolist()
