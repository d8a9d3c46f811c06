"""Where a whole batch's observations land, and for how long they are lent to the caller.

A command's observations go to slot 0 (views the next command overwrites: ``copy=False``), or to a
lendable slot, whose arrays :meth:`ObservationSlots.lend` hands out: the slot belongs to them until
the last of them (and everything viewing them) is garbage collected. Async batches lend the ring's
units the same way (:mod:`vecshm.parent.handback.ring`, through :func:`lend_arrays`), and a copy to a
device holds what it reads until its event passed (:mod:`vecshm.parent.handback.delivery`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vecshm.shared.buffers import Buffers

__all__ = ["ObservationSlots", "DEFAULT_LENDABLE_SLOTS", "LEND_MIN_BYTES", "lend_arrays", "Region"]

# -- lent observations -----------------------------------------------------------------------------
#
# Observation batches handed to the caller without a copy, yet never overwritten behind its back.
#
# A whole-batch step or reset writes its observations into a free *slot* of the shared segment. The
# arrays the caller gets are views of that slot that own it: the slot goes back to the free list
# only when the last array, slice, or tensor made from them is garbage collected. So every result
# is a fresh array, as with a copy, but the parent never touches the bytes the workers wrote (on
# other cores, that copy-out costs more than the step itself for large frames). Should a caller
# hold on to every lendable slot, the next command uses slot 0 and the result is copied out.

# SB3 keeps two batches alive at once (``_last_obs`` and the new one); the rest is headroom. Slots
# nobody has used cost no memory: the segment's pages are allocated on first write.
DEFAULT_LENDABLE_SLOTS = 6
# Lending costs a few microseconds; for batches smaller than this a plain copy is cheaper.
LEND_MIN_BYTES = 64 * 1024


class _Grant:
    """Calls ``release`` once, when the last lease holding it is gone."""

    __slots__ = ("_release",)

    def __init__(self, release: Callable[[], None]) -> None:
        self._release = release

    def __del__(self) -> None:
        self._release()


class _Lease:
    """Keeps a grant (and the mapping under it) alive while any array viewing its bytes lives."""

    __slots__ = ("__array_interface__", "_grant", "_mapping")

    def __init__(self, address: int, dtype: np.dtype, shape: tuple[int, ...], grant: _Grant, mapping: object) -> None:
        self.__array_interface__ = {
            "shape": shape,
            "typestr": dtype.str,
            "data": (address, False),
            "version": 3,
        }
        self._grant = grant
        self._mapping = mapping  # an array exported from the mmap: the mapping cannot be closed under us


Region = tuple[int, np.dtype, tuple[int, ...]]  # address, dtype, shape of a C-contiguous array


def lend_arrays(regions: list[Region], mapping: object, release: Callable[[], None]) -> list[np.ndarray]:
    """Arrays over ``regions`` of ``mapping``, made as they will be returned (no view or reshape
    after: a microsecond a batch); ``release()`` runs once every array, and everything viewing
    one, has been garbage collected."""
    grant = _Grant(release)
    return [np.asarray(_Lease(address, dtype, shape, grant, mapping)) for address, dtype, shape in regions]


class ObservationSlots:
    """The free list of lendable slots (1 .. n) and the arrays that own a lent slot."""

    def __init__(self, buffers: Buffers) -> None:
        spec = buffers.spec
        plan = spec.plan()
        self._mapping: np.ndarray | None = buffers.mapping  # None once closed
        base = buffers.mapping.ctypes.data
        first = spec.slot_fields(plan, 0)
        if not first:  # every observation leaf is dynamic (pickled): nothing to lend
            self._leaves, self._addresses, self._free = [], [], []
            return
        start = first[0].offset
        self._leaves = [(f.offset - start, f.dtype, f.shape) for f in first]  # the same in every slot
        span = first[-1].offset + first[-1].nbytes - start  # bytes of one batch, all leaves
        self._addresses = [base + spec.slot_fields(plan, slot)[0].offset for slot in range(spec.obs_slots)]
        lendable = range(spec.obs_slots - 1, 0, -1) if span >= LEND_MIN_BYTES else ()
        self._free = list(lendable)  # pop() takes the lowest: fewest pages touched

    def acquire(self) -> int:
        """A free lendable slot, or 0 when every one is still held by the caller (or batches are too small)."""
        return self._free.pop() if self._free else 0

    def lend(self, slot: int) -> list[np.ndarray]:
        """Arrays (one per observation leaf) viewing ``slot``, which now belongs to them."""
        base = self._addresses[slot]
        regions = [(base + start, dtype, shape) for start, dtype, shape in self._leaves]
        return lend_arrays(regions, self._mapping, lambda: self._free.append(slot))

    def release(self, slot: int) -> None:
        """Give back a slot that was acquired but never lent (the command failed)."""
        if slot:
            self._free.append(slot)

    def close(self) -> None:
        """Drop the engine's own hold on the mapping; lent arrays keep theirs."""
        self._mapping = None
