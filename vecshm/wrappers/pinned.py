"""Page-locked output arrays for wrappers above a vec env with ``pin_memory=True``.

SB3's pixel recipe puts ``VecTransposeImage`` (and often ``VecFrameStack``) between the vec env and
the learner. Each builds its observations anew in ordinary memory, so the learner's copy to the GPU
(``obs_as_tensor``) would lose the registered segment's speed one wrapper up. vecshm's versions of
those wrappers write into page-locked arrays instead when the vec env below is pinned.

Wrappers hand out new arrays on every step (earlier ones are never modified), so the pinned arrays
are pooled and one is reused only once nothing refers to it any more: the pool's own reference is
then the only one (a caller's view of an array holds a reference too).

The arrays come from torch's pinned host memory, unless the vec env below hands out its own: a vec
env with a ``page_locked(shape, dtype)`` method (one that manages pinned memory itself, or a test's
stand-in on a machine without CUDA) is asked instead.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["Allocate", "PinnedArrays", "below_is_pinned", "page_locked", "page_locker"]

Allocate = Callable[[tuple[int, ...], np.dtype], np.ndarray]  # a new page-locked array of a shape and dtype

POOL_SIZE = 8  # arrays kept per shape; SB3 holds two batches at once (``_last_obs`` and the new one)


def below_is_pinned(venv: Any) -> bool:
    """Whether the vec env under ``venv``'s wrappers registered its segment (``pin_memory=True``)."""
    return bool(getattr(getattr(venv, "unwrapped", venv), "pin_memory", False))


def page_locker(venv: Any) -> Allocate | None:
    """What allocates the page-locked arrays of wrappers above ``venv``: None where the vec env
    below is not pinned; its own ``page_locked`` where it has one; else :func:`page_locked`."""
    if not below_is_pinned(venv):
        return None
    allocate: Allocate = getattr(getattr(venv, "unwrapped", venv), "page_locked", page_locked)
    return allocate


def page_locked(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A new page-locked array (torch's pinned host memory)."""
    import torch

    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).numpy().view(dtype).reshape(shape)


class PinnedArrays:
    """Arrays of one shape and dtype, page-locked, each reused once nothing else refers to it."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, allocate: Allocate = page_locked) -> None:
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self._allocate = allocate
        self._pool: list[np.ndarray] = []

    def take(self) -> np.ndarray:
        """A page-locked array nobody holds (its contents are stale: write all of it)."""
        for array in self._pool:
            if sys.getrefcount(array) == 3:  # the pool's list, this loop's name, getrefcount's argument
                return array
        array = self._allocate(self.shape, self.dtype)
        if len(self._pool) < POOL_SIZE:
            self._pool.append(array)
        return array
