"""One copy of large read-only data for every worker: :func:`share`.

Under forkserver and spawn each worker process gets its own copy of whatever its env factory holds:
the data is pickled into every worker (and unpickled there, one after another at start-up), or
every worker loads it again. A 2 GiB table and 16 workers are 32 GiB. :func:`share` copies the
arrays once into a segment of their own, and returns them as read-only views of it
(:class:`SharedArray`) that pickle as a handle, not as their bytes:

- **The segment** is a sealed ``memfd`` (nameless, read-only once written; the portable
  transport's: a named ``multiprocessing.shared_memory`` block), as the vec env's own segment
  (:mod:`vecshm.shared.memory`), so nothing is left behind whatever kills the parent.
- **Into a worker.** The pool pickles the env factories inside :func:`collecting`, which notes the
  segments their handles name; each worker process is handed those segments in its start-up spec
  (:class:`ShareGrant`: the descriptor travels as the doorbells' do), and registers them
  (:func:`enter_worker`) before it unpickles its factories. There a handle maps the segment once,
  and every array that names it is a view of that one mapping. A handle unpickled anywhere else (a
  plain ``multiprocessing.Process``, another program, a Ray actor, or after the segment was freed)
  finds no segment it may map, and says so.
- **Lifetime.** A segment lives while any of its arrays lives in the parent, or an open vec env
  holds it (:func:`hold` / :func:`release`: its workers, and those a restart starts, map it); then
  its descriptor is closed, and the memory goes with the last mapping.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import secrets
import threading
import weakref
from collections.abc import Iterator
from multiprocessing import reduction
from typing import Any

import numpy as np

from vecshm.shared.memory import ALIGNMENT, NamedSegment
from vecshm.shared.transport import choose_transport

__all__ = [
    "SharedArray",
    "ShareGrant",
    "SharedDataError",
    "collecting",
    "enter_worker",
    "hold",
    "note",
    "release",
    "share",
]

WHAT_SHARES = "a NumPy array (any dtype but object), or a dict, list or tuple of them, nested as you like"


class SharedDataError(RuntimeError):
    """A shared array's handle was unpickled where its segment cannot be mapped."""


# -- the arrays -----------------------------------------------------------------------------------


class SharedArray(np.ndarray):
    """A read-only view of a segment made by :func:`share` (or a slice of one): an ``ndarray`` in
    every way, but pickled as a handle to its segment rather than as its bytes. What is computed
    from it (``table * 2``, ``table.sum()``) is a plain ``ndarray``, pickled by value as usual."""

    token: str | None = None  # the segment's

    def __array_finalize__(self, obj: Any) -> None:
        self.token = getattr(obj, "token", None)

    def __array_wrap__(self, array: Any, context: Any = None, return_scalar: bool = False) -> Any:
        plain = array.view(np.ndarray)
        return np.ndarray.__array_wrap__(plain, plain, context, return_scalar)

    def __reduce_ex__(self, protocol: Any) -> Any:
        handle = self.handle()
        if handle is None:  # a copy, not memory of the segment: its bytes, as any array's
            return np.asarray(self).__reduce_ex__(protocol)
        collector = getattr(_collecting, "tokens", None)
        if collector is not None:
            collector.add(handle[0])
        return (_rebuild, handle)

    def __deepcopy__(self, memo: Any) -> np.ndarray:
        return np.array(self)  # a private, writable copy, as deepcopy promises

    def handle(self) -> tuple[Any, ...] | None:
        """``(token, owner, offset, shape, strides, dtype)`` locating this view in its segment in
        this process, or None where its memory is not the segment's (a copy)."""
        whole = _mapping_here(self.token)
        if whole is None:
            return None
        base = _address(whole)
        low, high = _byte_bounds(self)
        if self.size and not (base <= low and high <= base + whole.nbytes):
            return None
        owner = _BLOCKS[self.token].owner if self.token in _BLOCKS else _GRANTS[self.token].owner  # type: ignore[index]
        return (self.token, owner, _address(self) - base, self.shape, self.strides, self.dtype)


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def _byte_bounds(array: np.ndarray) -> tuple[int, int]:
    try:
        from numpy.lib.array_utils import byte_bounds  # NumPy 2
    except ImportError:  # pragma: no cover - NumPy 1
        byte_bounds = np.byte_bounds  # type: ignore[attr-defined]
    low, high = byte_bounds(array)
    return int(low), int(high)


def _rebuild(token: str, owner: int, offset: int, shape: tuple, strides: tuple, dtype: Any) -> SharedArray:
    """A handle, unpickled: the view it names, of this process's mapping of the segment."""
    whole = _mapping_here(token)
    if whole is None:
        if owner == os.getpid():
            raise SharedDataError(
                f"this array's shared segment (vecshm.share, {token}) was freed: nothing held it any more"
            )
        raise SharedDataError(
            f"this array was shared by process {owner} (vecshm.share); its segment can be mapped only there and in "
            f"the vecshm workers of its vec envs, not in this process ({os.getpid()}): a plain multiprocessing "
            "process, another program, or a Ray actor (vecshm.share is per machine) needs the data itself"
        )
    view = np.ndarray(shape, dtype, buffer=whole, offset=offset, strides=strides).view(SharedArray)
    view.token = token
    return view


# -- share() --------------------------------------------------------------------------------------


def share(data: Any) -> Any:
    """``data``, its arrays copied into one shared, read-only segment: the same structure, each array
    a read-only :class:`SharedArray` view. Inside an env factory (a closure, a ``functools.partial``,
    an env's constructor argument), it travels to vecshm's workers as a handle and is mapped there,
    not copied; sharing the same arrays again gives the same segment.

    ``data``: :data:`WHAT_SHARES`. Anything else is a ``TypeError``.
    """
    leaves: list[np.ndarray] = []
    template = _flatten(data, leaves, "data")
    tokens = {getattr(leaf, "token", None) for leaf in leaves}
    if leaves and len(tokens) == 1 and all(isinstance(leaf, SharedArray) and leaf.handle() for leaf in leaves):
        return data  # shared already: the same segment
    key = tuple(id(leaf) for leaf in leaves)
    cached = _CACHE.get(key)
    if cached is not None:
        refs, token, offsets = cached
        block = _BLOCKS.get(token)
        if block is not None and all(ref() is leaf for ref, leaf in zip(refs, leaves)):
            return _unflatten(template, iter(block.views(leaves, offsets)))
    offsets, size = [], 0
    for leaf in leaves:
        offsets.append(size)
        size += -(-leaf.nbytes // ALIGNMENT) * ALIGNMENT
    block = _Block(max(size, ALIGNMENT), leaves, offsets)
    _CACHE[key] = ([weakref.ref(leaf) for leaf in leaves], block.token, offsets)
    return _unflatten(template, iter(block.views(leaves, offsets)))


def _flatten(data: Any, leaves: list[np.ndarray], where: str) -> Any:
    """``data``'s structure, its arrays replaced by their places in ``leaves``."""
    if isinstance(data, np.ndarray):
        if data.dtype.hasobject:
            raise TypeError(
                f"vecshm.share cannot share {where}: an array of dtype {data.dtype} holds Python objects, "
                f"not bytes; it shares {WHAT_SHARES}"
            )
        leaves.append(data)
        return len(leaves) - 1
    if isinstance(data, dict):
        return {key: _flatten(value, leaves, f"{where}[{key!r}]") for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        items = [_flatten(value, leaves, f"{where}[{i}]") for i, value in enumerate(data)]
        return items if isinstance(data, list) else (type(data)(*items) if hasattr(data, "_fields") else tuple(items))
    raise TypeError(
        f"vecshm.share cannot share {where} ({type(data).__name__}); it shares {WHAT_SHARES}. "
        "A pandas DataFrame: share its columns as arrays and build the frame in the env (docs/usage.md)"
    )


def _unflatten(template: Any, views: Iterator[SharedArray]) -> Any:
    if isinstance(template, int):
        return next(views)
    if isinstance(template, dict):
        return {key: _unflatten(value, views) for key, value in template.items()}
    items = [_unflatten(value, views) for value in template]
    if isinstance(template, list):
        return items
    return type(template)(*items) if hasattr(template, "_fields") else tuple(items)


# -- the segments: owned in the parent, granted to workers ----------------------------------------


class _Block:
    """A segment in the process that made it: its descriptor (or name), its read-only mapping while
    any of its arrays lives, and how many vec envs hold it."""

    def __init__(self, size: int, leaves: list[np.ndarray], offsets: list[int]) -> None:
        self.token = secrets.token_hex(8)
        self.size = size
        self.owner = os.getpid()
        self.holders = 0
        self.fd: int | None = None
        self.named: NamedSegment | None = None
        if choose_transport().native:
            self.fd = _sealed_memfd(size, leaves, offsets)
        else:
            self.named = NamedSegment(size)
            _write(self.named.buffer, leaves, offsets)
        self._whole: weakref.ref[np.ndarray] | None = None
        _BLOCKS[self.token] = self

    def mapping(self) -> np.ndarray:
        """The segment's bytes as one read-only array (mapped again if every view of it is gone)."""
        whole = self._whole() if self._whole is not None else None
        if whole is None:
            if self.named is not None:
                whole = np.frombuffer(self.named.buffer, dtype=np.uint8)  # type: ignore[arg-type]
                whole.flags.writeable = False
            else:
                whole = _map(self.fd, None, self.size)
            self._whole = weakref.ref(whole)
            weakref.finalize(whole, _mapping_gone, self.token)
        return whole

    def views(self, leaves: list[np.ndarray], offsets: list[int]) -> list[SharedArray]:
        whole = self.mapping()
        views = []
        for leaf, offset in zip(leaves, offsets):
            view = np.ndarray(leaf.shape, leaf.dtype, buffer=whole, offset=offset).view(SharedArray)
            view.token = self.token
            views.append(view)
        return views

    def grant(self) -> ShareGrant:
        return ShareGrant(self.token, self.size, self.owner, self.fd, self.named.name if self.named else None)

    def mapped(self) -> bool:
        return self._whole is not None and self._whole() is not None

    def free(self) -> None:
        del _BLOCKS[self.token]
        for key in [key for key, (_, token, _) in _CACHE.items() if token == self.token]:
            del _CACHE[key]
        if self.fd is not None:
            os.close(self.fd)
        if self.named is not None:
            self.named.close()


def _sealed_memfd(size: int, leaves: list[np.ndarray], offsets: list[int]) -> int:
    """A memfd holding ``leaves`` at ``offsets``, sealed: nothing can write it again, or resize it."""
    fd = os.memfd_create("vecshm-share", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        try:  # the pages now: too little memory is a clear error here, not a SIGBUS in a worker later
            os.posix_fallocate(fd, 0, size)
        except OSError as error:
            if error.errno in (errno.ENOSPC, errno.ENOMEM):
                raise MemoryError(f"vecshm.share: no room for {size / 2**20:.1f} MiB of shared memory") from error
        with mmap.mmap(fd, size) as writable:
            _write(writable, leaves, offsets)
        import fcntl

        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write(buffer: Any, leaves: list[np.ndarray], offsets: list[int]) -> None:
    for leaf, offset in zip(leaves, offsets):
        np.ndarray(leaf.shape, leaf.dtype, buffer=buffer, offset=offset)[...] = leaf
    # (each view above is gone by now: a mapping with arrays on it could not be closed)


def _map(fd: int | None, name: str | None, size: int) -> np.ndarray:
    """The segment's bytes, read-only, from its descriptor or its name."""
    if fd is not None:
        return np.frombuffer(mmap.mmap(fd, size, prot=mmap.PROT_READ), dtype=np.uint8)
    block = NamedSegment.attach(name, size)  # type: ignore[arg-type]
    _ATTACHED.append(block)  # (a worker's, for its life: its buffer is the mapping)
    whole = np.frombuffer(block.buffer, dtype=np.uint8)  # type: ignore[arg-type]
    whole.flags.writeable = False
    return whole


def _mapping_gone(token: str) -> None:
    """The last array of a segment's mapping went: free the segment, unless a vec env holds it."""
    block = _BLOCKS.get(token)
    if block is not None and block.holders == 0 and not block.mapped():
        block.free()


class ShareGrant:
    """What a worker process needs to map one segment: travels in its start-up spec, the descriptor
    duplicated into it as multiprocessing starts it (or the block's name)."""

    def __init__(self, token: str, size: int, owner: int, fd: int | None, name: str | None) -> None:
        self.token, self.size, self.owner, self.fd, self.name = token, size, owner, fd, name

    def __reduce__(self) -> tuple[Any, ...]:
        fd = reduction.DupFd(self.fd) if self.fd is not None else None
        return (_granted, (self.token, self.size, self.owner, fd, self.name))


def _granted(token: str, size: int, owner: int, dup: Any, name: str | None) -> ShareGrant:
    return ShareGrant(token, size, owner, dup.detach() if dup is not None else None, name)


def hold(tokens: set[str]) -> list[ShareGrant]:
    """Keep the segments ``tokens`` names alive for a vec env (until :func:`release`), and what its
    workers need to map them."""
    grants = []
    for token in sorted(tokens):
        block = _BLOCKS.get(token)
        if block is not None:  # (a token of another process's segment: its handle will say so)
            block.holders += 1
            grants.append(block.grant())
    return grants


def release(grants: list[ShareGrant]) -> None:
    """A vec env that held these segments closed: free each that nothing else holds."""
    for grant in grants:
        block = _BLOCKS.get(grant.token)
        if block is not None and block.owner == os.getpid():
            block.holders -= 1
            if block.holders == 0 and not block.mapped():
                block.free()


def enter_worker(grants: list[ShareGrant]) -> None:
    """In a worker process, before its factories are unpickled: the segments it may map."""
    for grant in grants:
        _GRANTS[grant.token] = grant


def _mapping_here(token: str | None) -> np.ndarray | None:
    """This process's mapping of segment ``token``: the maker's, or a worker's granted one."""
    if token in _GRANTS:
        if token not in _WORKER_MAPPINGS:
            grant = _GRANTS[token]
            _WORKER_MAPPINGS[token] = _map(grant.fd, grant.name, grant.size)
            if grant.fd is not None and grant.owner != os.getpid():
                os.close(grant.fd)  # (the mapping keeps the memory)
                grant.fd = None
        return _WORKER_MAPPINGS[token]
    block = _BLOCKS.get(token) if token is not None else None
    if block is not None and block.owner == os.getpid():
        return block.mapping()
    return None


@contextlib.contextmanager
def collecting() -> Iterator[set[str]]:
    """The tokens of the segments whose arrays are pickled inside this block (in this thread)."""
    outer = getattr(_collecting, "tokens", None)
    tokens: set[str] = set()
    _collecting.tokens = tokens
    try:
        yield tokens
    finally:
        _collecting.tokens = outer
        if outer is not None:
            outer |= tokens


def note(tokens: Any) -> None:
    """Add ``tokens`` to the segments being collected (what an object pickled already, for its own
    pickle, names)."""
    collector = getattr(_collecting, "tokens", None)
    if collector is not None:
        collector.update(tokens)


_BLOCKS: dict[str, _Block] = {}  # the segments this process made, while they live
_GRANTS: dict[str, ShareGrant] = {}  # in a worker: the segments it may map
_WORKER_MAPPINGS: dict[str, np.ndarray] = {}  # ... and their mappings, made at the first handle
_ATTACHED: list[NamedSegment] = []  # in a worker: the named blocks it attached
_CACHE: dict[tuple[int, ...], tuple[list[weakref.ref], str, list[int]]] = {}  # arrays shared before
_collecting = threading.local()
