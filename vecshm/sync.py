"""Wake-ups between processes, and waits that never wait blind.

A :class:`Doorbell` is a Linux ``eventfd``: a counter in the kernel that one side increments and
the other reads (and clears) in one system call, and that ``poll`` can watch together with worker
process sentinels. Like a memfd it has no name, so nothing is left behind when a process dies.
The doorbell only wakes; the truth (which command, which worker finished) lives in the shared
control words, written before the bell rings.
"""

from __future__ import annotations

import os
import select
import time
from multiprocessing import reduction
from typing import Any

__all__ = ["Doorbell", "spin_until"]


class Doorbell:
    """A counting wake-up: ``ring`` from any process, ``wait`` in the owner."""

    def __init__(self, fd: int | None = None) -> None:
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) if fd is None else fd

    def ring(self) -> None:
        os.eventfd_write(self.fd, 1)

    def take(self) -> int:
        """How many rings arrived since the last take (0 if none); never blocks."""
        try:
            return os.eventfd_read(self.fd)
        except BlockingIOError:
            return 0

    def wait(self, timeout: float | None) -> int:
        """Take the rings, waiting up to ``timeout`` seconds for at least one."""
        rings = self.take()
        if rings:
            return rings
        select.select([self.fd], [], [], timeout)
        return self.take()

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


def spin_until(predicate: Any, seconds: float) -> bool:
    """Busy-check ``predicate`` for at most ``seconds``; True as soon as it holds."""
    if seconds <= 0:
        return False
    deadline = time.perf_counter() + seconds
    while True:
        if predicate():
            return True
        if time.perf_counter() >= deadline:
            return False
