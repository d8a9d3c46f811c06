"""Page-locked output arrays for wrappers above a vec env with ``pin_memory=True``.

SB3's pixel recipe puts ``VecTransposeImage`` (and often ``VecFrameStack``) between the vec env and
the learner. Each builds its observations anew in ordinary memory, so the learner's copy to the GPU
(``obs_as_tensor``) would lose the registered segment's speed one wrapper up. vecshm's versions of
those wrappers write into page-locked arrays instead when the vec env below is pinned.

Wrappers hand out new arrays on every step (earlier ones are never modified), so the pinned arrays
are pooled and one is reused only once nothing refers to it any more: the pool's own reference is
then the only one (a caller's view of an array holds a reference too).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["PinnedArrays", "below_is_pinned", "page_locked"]

POOL_SIZE = 8  # arrays kept per shape; SB3 holds two batches at once (``_last_obs`` and the new one)


def below_is_pinned(venv: Any) -> bool:
    """Whether the vec env under ``venv``'s wrappers registered its segment (``pin_memory=True``)."""
    return bool(getattr(getattr(venv, "unwrapped", venv), "pin_memory", False))


def page_locked(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A new page-locked array (torch's pinned host memory)."""
    import torch

    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).numpy().view(dtype).reshape(shape)


class PinnedArrays:
    """Arrays of one shape and dtype, page-locked, each reused once nothing else refers to it."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self._pool: list[np.ndarray] = []

    def take(self) -> np.ndarray:
        """A page-locked array nobody holds (its contents are stale: write all of it)."""
        for array in self._pool:
            if sys.getrefcount(array) == 3:  # the pool's list, this loop's name, getrefcount's argument
                return array
        array = page_locked(self.shape, self.dtype)
        if len(self._pool) < POOL_SIZE:
            self._pool.append(array)
        return array
