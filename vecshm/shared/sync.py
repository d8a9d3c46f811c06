"""Wake-ups between processes, and waits that never wait blind.

A :class:`Doorbell` is a Linux ``eventfd``: a counter in the kernel that one side increments and
the other reads (and clears) in one system call, and that ``poll`` can watch together with worker
process sentinels. Like a memfd it has no name, so nothing is left behind when a process dies.
Elsewhere (see :mod:`vecshm.shared.transport`) a :class:`SocketDoorbell` does the same with a socket
pair, which ``select`` and ``multiprocessing.connection.wait`` watch on every platform.
The doorbell only wakes; the truth (which command, which worker finished) lives in the shared
control words, written before the bell rings.

A ring is a system call, and most are not needed: in a tight loop the other side is spinning on
the control words, not sleeping on its bell. So a side about to sleep first raises its *asleep*
word, and the other side rings only where that word is up. The classic lost wake-up (the sleeper
raises its word and checks the control words while the waker writes them and reads the word, and
each reads the other's old value) is ruled out by a :func:`fence` on both sides, between the write
and the read. Python has no fence of its own; a lock's acquire and release are locked instructions,
which on x86-64 order every earlier write before every later read. Elsewhere (ARM's locks order
less) :data:`SLEEPERS_ONLY` is false, and every command rings, as before.
"""

from __future__ import annotations

import math
import os
import platform
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from multiprocessing import connection, reduction
from typing import Any, Protocol

from vecshm.shared.transport import Transport

__all__ = [
    "Bell",
    "Doorbell",
    "SocketDoorbell",
    "new_doorbell",
    "DoneWatch",
    "Spinner",
    "spin_for",
    "yield_core",
    "fence",
    "wake_sleepers",
    "SLEEPERS_ONLY",
]

# lets a runnable process on this core have it
yield_core: Callable[[], None] = getattr(os, "sched_yield", lambda: time.sleep(0))

# x86's total store order: words written in order are read in order (so spinning on them is
# safe), and a locked instruction orders every earlier write before every later read
TSO_ARCHES = ("x86_64", "AMD64", "i686", "i386")
# whether a waker may skip the bells of sides that are not asleep (see the module's docstring)
SLEEPERS_ONLY = platform.machine() in TSO_ARCHES

_fence_acquire: Callable[..., bool]
_fence_release: Callable[[], None]


def _new_fence_lock() -> None:
    """A fresh lock for :func:`fence` (also in a forked child: the parent's may have been held by
    another thread at the fork, and would be held in the child for good)."""
    global _fence_acquire, _fence_release
    lock = threading.Lock()
    _fence_acquire, _fence_release = lock.acquire, lock.release


_new_fence_lock()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_fence_lock)


def fence() -> None:
    """Order this process's earlier writes to shared memory before its later reads (on x86-64: a
    lock's acquire and release are locked instructions, full barriers; 0.1 us, against 0.4-0.75 us
    for a ring)."""
    _fence_acquire()
    _fence_release()


class Bell(Protocol):
    """What a waker needs of a doorbell."""

    def wake(self) -> None: ...


def wake_sleepers(owners: Iterable[int], bells: Sequence[Bell], words: Sequence[int], asleep: Any) -> None:
    """This process's writes made, wake the bell of each of ``owners`` that sleeps on it: owner
    ``k``'s bell is ``bells[k]`` and its asleep word ``asleep[words[k]]`` (``asleep``: the segment's
    array of them). One still spinning finds the writes without the system call."""
    if not SLEEPERS_ONLY:
        for k in owners:
            bells[k].wake()
        return
    fence()  # the writes made before the asleep words are read
    up = asleep.tolist()
    for k in owners:
        if up[words[k]]:
            bells[k].wake()


class _Bell:
    """What both doorbells share: a wait built on ``take`` and something ``select`` can watch."""

    waitable: Any

    def take(self) -> int:
        raise NotImplementedError

    def wait(self, timeout: float | None) -> int:
        """Take the rings, waiting up to ``timeout`` seconds for at least one."""
        rings = self.take()
        if rings:
            return rings
        select.select([self.waitable], [], [], timeout)
        return self.take()


class Doorbell(_Bell):
    """A counting wake-up: ``ring`` from any process, ``wait`` in the owner."""

    def __init__(self, fd: int | None = None) -> None:
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) if fd is None else fd

    @property
    def waitable(self) -> int:
        return self.fd

    def wake(self) -> None:
        os.eventfd_write(self.fd, 1)

    def take(self) -> int:
        """How many rings arrived since the last take (0 if none); never blocks."""
        try:
            return os.eventfd_read(self.fd)
        except BlockingIOError:
            return 0

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __reduce__(self) -> tuple[Any, ...]:
        # Only meaningful while a child process is being started (spawn/forkserver): the
        # descriptor is duplicated into the child.
        return (_rebuild_doorbell, (reduction.DupFd(self.fd),))


def _rebuild_doorbell(dup: Any) -> Doorbell:
    return Doorbell(dup.detach())


class SocketDoorbell(_Bell):
    """The portable doorbell: one byte per ring on a socket pair (pickled into children by multiprocessing)."""

    def __init__(self) -> None:
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)

    @property
    def waitable(self) -> socket.socket:
        return self._reader  # connection.wait takes a socket (not its number) on Windows

    def wake(self) -> None:
        try:
            self._writer.send(b"\x01")
        except (BlockingIOError, InterruptedError):
            pass  # the buffer is full of wake-ups the owner has not taken yet: it will wake anyway

    def take(self) -> int:
        rings = 0
        while True:
            try:
                chunk = self._reader.recv(4096)
            except (BlockingIOError, InterruptedError):
                return rings
            if not chunk:
                return rings
            rings += len(chunk)

    def close(self) -> None:
        self._reader.close()
        self._writer.close()


def new_doorbell(transport: Transport) -> Doorbell | SocketDoorbell:
    return Doorbell() if transport.native else SocketDoorbell()


class DoneWatch:
    """The parent's blocking wait: until the done bell rings or a watched worker process ends.

    ``wait`` returns the sentinels of processes that ended. Native: one ``poll`` object kept
    across waits; portable: ``multiprocessing.connection.wait``, which works on every platform.
    """

    def __init__(self, transport: Transport, bell: Doorbell | SocketDoorbell, sentinels: list[int]) -> None:
        self._bell = bell
        self._sentinels = set(sentinels)
        self._poll = select.poll() if transport.native else None
        if self._poll is not None:
            self._poll.register(bell.waitable, select.POLLIN)
            for sentinel in sentinels:
                self._poll.register(sentinel, select.POLLIN)

    def add(self, sentinel: int) -> None:
        self._sentinels.add(sentinel)
        if self._poll is not None:
            self._poll.register(sentinel, select.POLLIN)

    def remove(self, sentinel: int) -> None:
        self._sentinels.discard(sentinel)
        if self._poll is not None:
            self._poll.unregister(sentinel)

    def wait(self, timeout: float | None) -> list[int]:
        """Block up to ``timeout`` seconds (None: no limit); the ended processes' sentinels."""
        if self._poll is not None:
            timeout_ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
            ready: list[Any] = [fd for fd, _ in self._poll.poll(timeout_ms)]
        else:
            ready = connection.wait([self._bell.waitable, *self._sentinels], timeout)
        return [fd for fd in ready if fd in self._sentinels]


class Spinner:
    """Adaptive, polite busy-wait in front of a blocking wait.

    Spins only while it pays: while recent waits were typically within ``max_seconds`` (their
    moving average), it spins for about their high end (the average plus three times their
    average deviation), at most ``max_seconds``; when they were longer, it does not spin at all.
    Covering the high end matters: a wait that outlasts the spin sleeps, and the wake-up then costs
    the waker a system call and often its core, which lengthens the next waits (an async batch of
    zero-compute frames, 2 cores: waits of 35-180 us, and a budget of 1.5x their average, about
    110 us, slept on 25-45% of them). A caller that knows spinning costs no one (a core of its
    own, a tight loop) passes a ``floor``, so that an outlier beyond the high end costs no wake-up
    either. Each spin iteration yields the core (``sched_yield``), so a spinning process never
    starves a runnable one on the same core, unless the caller says it has a core of its own
    (``polite=False``, see :func:`spin_for`).
    """

    def __init__(self, max_seconds: float) -> None:
        self.max_seconds = max_seconds
        self.average = 0.0
        self.deviation = 0.0

    def record(self, waited: float) -> None:
        self.deviation = 0.8 * self.deviation + 0.2 * abs(waited - self.average)
        self.average = 0.8 * self.average + 0.2 * waited

    def budget(self, limit: float | None = None, floor: float = 0.0) -> float:
        """Seconds to spin next time: the high end of recent waits, at least ``floor``, at most
        ``limit`` (default: the max); 0 when they typically took longer than that."""
        limit = self.max_seconds if limit is None else min(limit, self.max_seconds)
        if self.average > limit:
            return 0.0
        return min(limit, max(floor, self.average + 3.0 * self.deviation))

    def spin(
        self, predicate: Callable[[], bool], limit: float | None = None, floor: float = 0.0, polite: bool = True
    ) -> bool:
        """Busy-check ``predicate`` within the current budget; True as soon as it holds."""
        budget = self.budget(limit, floor) if self.max_seconds > 0 else 0.0
        return spin_for(predicate, budget, polite)


def spin_for(predicate: Callable[[], bool], budget: float, polite: bool = True) -> bool:
    """Busy-check ``predicate`` for at most ``budget`` seconds, yielding the core after each check
    (``polite``) to a process that shares it. A process with a core of its own (a vec env with
    fewer worker processes than cores: each of them, and the parent while it runs no other thread)
    passes ``polite=False``: no one of its own takes the yield, and the system call cost a step of
    8 frames envs 2.4% on 2 cores (``step_timeline.py sb3 8``, a lab script since removed: 45.1
    against 44.0 us). The budget still bounds the spin."""
    if budget <= 0:
        return False
    deadline = time.perf_counter() + budget
    while True:
        if predicate():
            return True
        if time.perf_counter() >= deadline:
            return False
        if polite:
            yield_core()
