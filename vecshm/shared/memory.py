"""One anonymous shared-memory segment per vec env, shared with workers by file descriptor.

Why not a named ``multiprocessing.shared_memory.SharedMemory``: a name in ``/dev/shm`` outlives a
parent killed with SIGKILL unless something unlinks it. A ``memfd`` has no name at all; the memory
lives exactly as long as some process holds the descriptor or a mapping, so nothing can leak,
whatever kills whom. Workers receive the descriptor over their control socket (SCM_RIGHTS), which
works for fork, forkserver and spawn alike. Where ``memfd_create`` is missing, an unlinked
temporary file in a RAM-backed directory gives the same lifetime rules.
"""

from __future__ import annotations

import errno
import mmap
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np

__all__ = ["Field", "SegmentPlan", "Segment", "NamedSegment", "mapping_array"]

ALIGNMENT = 64  # one cache line: no two arrays share a line, so no false sharing between writers


@dataclass(frozen=True)
class Field:
    """A named array inside the segment."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


class SegmentPlan:
    """Offsets of named arrays, each aligned to a cache line; the same plan builds views anywhere."""

    def __init__(self, arrays: Iterable[tuple[str, tuple[int, ...], np.dtype]]) -> None:
        self.fields: dict[str, Field] = {}
        offset = 0
        for name, shape, dtype in arrays:
            if name in self.fields:
                raise ValueError(f"duplicate field {name!r} in segment plan")
            field = Field(name, tuple(shape), np.dtype(dtype), offset)
            self.fields[name] = field
            offset += -(-field.nbytes // ALIGNMENT) * ALIGNMENT
        self.size = max(offset, ALIGNMENT)

    def views(self, whole: np.ndarray) -> dict[str, np.ndarray]:
        """An array per field, each a view of ``whole``, the segment's bytes as one array
        (:func:`mapping_array`), so that each holds the mapping as that array does."""
        return {
            f.name: whole[f.offset : f.offset + f.nbytes].view(f.dtype).reshape(f.shape) for f in self.fields.values()
        }


def mapping_array(buffer: mmap.mmap | memoryview) -> np.ndarray:
    """The whole ``buffer`` as one uint8 array, which holds it exported.

    So the mapping cannot be closed while any array made from this one lives: observations
    returned with ``copy=False`` (views of the segment) and lent batches stay readable after
    ``close()``, as ``AsyncVectorEnv``'s do. ``np.ndarray(buffer=...)`` would not hold it:
    ``mmap.close()`` would unmap the memory under such an array, and reading it would crash the
    process.
    """
    return np.frombuffer(buffer, dtype=np.uint8)


def _anonymous_fd(size: int) -> int:
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("vecshm", os.MFD_CLOEXEC)
    else:  # pragma: no cover - non-Linux fallback
        directory = "/dev/shm" if os.path.isdir("/dev/shm") else None
        with tempfile.TemporaryFile(dir=directory) as handle:
            fd = os.dup(handle.fileno())
    os.ftruncate(fd, size)
    return fd


class Segment:
    """A mapping of the shared memory; the creator owns a descriptor to hand to workers."""

    def __init__(self, size: int, fd: int | None = None) -> None:
        self.size = size
        self.fd: int | None = _anonymous_fd(size) if fd is None else fd
        self.buffer: mmap.mmap | None = mmap.mmap(self.fd, size)

    @classmethod
    def attach(cls, fd: int, size: int) -> Segment:
        """Map a segment received from the creator, then drop the descriptor (the map keeps it alive)."""
        segment = cls(size, fd)
        segment.release_fd()
        return segment

    def release_fd(self) -> None:
        """Close the descriptor once every worker has its own mapping: no one else can join."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def close(self) -> None:
        self.release_fd()
        if self.buffer is None:
            return
        try:
            self.buffer.close()
        except BufferError:
            # Arrays handed out (lent slots, copy=False views) are still alive; they hold the
            # map, and it is unmapped when the last of them goes.
            pass
        self.buffer = None


class NamedSegment:
    """The portable segment: a ``multiprocessing.shared_memory`` block, found by workers by its name.

    Same interface as :class:`Segment`, with the name in place of the descriptor: ``release_fd``
    unlinks the name once every worker has mapped the block (nothing can join after that), and
    multiprocessing's resource tracker unlinks it should the creator die before.
    """

    def __init__(self, size: int, name: str | None = None) -> None:
        self.size = size
        if name is None:
            self._shm = _SharedMemory(create=True, size=size)
            try:
                _reserve(self._shm, size)
            except BaseException:
                self._shm.close()
                self._shm.unlink()
                raise
        else:
            self._shm = _attach_untracked(name)
        self.name: str | None = self._shm.name
        self._owner = name is None
        self.buffer: memoryview | None = self._shm.buf
        self.fd = None

    @classmethod
    def attach(cls, name: str, size: int) -> NamedSegment:
        """Map a segment the creator made; only the creator unlinks it."""
        return cls(size, name)

    def allocated_bytes(self) -> int:
        """Bytes the OS has allocated to the block (not merely reserved by its size)."""
        assert self._shm is not None, "a closed segment"
        return os.fstat(self._shm._fd).st_blocks * 512  # type: ignore[attr-defined]  # the block's descriptor

    def release_fd(self) -> None:
        if self._owner and self.name is not None:
            try:
                self._shm.unlink()
            except FileNotFoundError:
                pass
        self.name = None

    def close(self) -> None:
        self.release_fd()
        if self.buffer is None:
            return
        self.buffer = None
        shm, self._shm = self._shm, None  # type: ignore[assignment]  # closed: no use after this
        try:
            shm.close()
        except BufferError:
            # Arrays handed out still view the block: they keep the mapping (through the
            # memoryview they were made from), and it is unmapped when the last of them goes. The
            # block's own descriptor is not needed for that (the mapping holds a copy of it), but
            # ``SharedMemory.close`` stopped before closing it: close it here, and leave ``shm``
            # nothing to close again when it is collected.
            _drop_shared_memory(shm)


def _drop_shared_memory(shm: shared_memory.SharedMemory) -> None:
    """Close ``shm``'s descriptor and drop its memoryview and map, which arrays still export."""
    fd = getattr(shm, "_fd", -1)
    if fd >= 0:
        os.close(fd)
        shm._fd = -1  # type: ignore[attr-defined]
    shm._buf = shm._mmap = None  # type: ignore[attr-defined]


def _reserve(shm: shared_memory.SharedMemory, size: int) -> None:
    """Allocate the block's pages now, where the OS can (Linux). A ``/dev/shm`` smaller than the
    block (Docker's default is 64 MiB) accepts it all the same, then kills with SIGBUS whichever
    process first writes past the space it has; allocated up front, it is a clear error here."""
    fd = getattr(shm, "_fd", -1)
    if not hasattr(os, "posix_fallocate") or fd < 0:
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.ENOMEM):
            return  # a filesystem without fallocate: pages are allocated as they are written
        free = shutil.disk_usage("/dev/shm").free / 2**20 if os.path.isdir("/dev/shm") else float("nan")
        raise OSError(
            error.errno,
            f"the vec env's shared memory ({size / 2**20:.1f} MiB) does not fit in /dev/shm ({free:.1f} MiB free). "
            "Enlarge /dev/shm (docker run --shm-size=2g), or leave VECSHM_TRANSPORT unset: the native "
            "transport's memory does not live in /dev/shm",
        ) from error


class _SharedMemory(shared_memory.SharedMemory):
    def __del__(self) -> None:
        try:
            self.close()
        except (OSError, BufferError):
            pass  # lent arrays still view the block: the mapping goes with the last of them


def _attach_untracked(name: str) -> Any:
    """Attach without registering with the resource tracker, which the creator already did.

    Workers share the creator's tracker; a second registration followed by the worker's exit would
    unlink the block (and warn) behind the creator's back. Python 3.13 has ``track=False`` for this;
    before it, registration is skipped while attaching (the worker is single-threaded here).
    """
    from multiprocessing import resource_tracker

    try:
        return _SharedMemory(name=name, track=False)  # type: ignore[call-arg]
    except TypeError:
        pass
    register = resource_tracker.register
    resource_tracker.register = lambda name, rtype: None if rtype == "shared_memory" else register(name, rtype)
    try:
        return _SharedMemory(name=name)
    finally:
        resource_tracker.register = register
