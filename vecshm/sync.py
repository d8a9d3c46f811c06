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
from collections.abc import Callable
from multiprocessing import reduction
from typing import Any

__all__ = ["Doorbell", "Spinner", "spin_for"]


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


class Spinner:
    """Adaptive, polite busy-wait in front of a blocking wait.

    Spins only while it pays: the budget follows a moving average of recent waits (1.5x it), and
    drops to zero when recent waits were longer than ``max_seconds``. Each spin iteration yields the
    core (``sched_yield``), so a spinning process never starves a runnable one on the same core.
    """

    def __init__(self, max_seconds: float) -> None:
        self.max_seconds = max_seconds
        self.average = 0.0

    def record(self, waited: float) -> None:
        self.average = 0.8 * self.average + 0.2 * waited

    def budget(self, limit: float | None = None) -> float:
        """Seconds to spin next time: 1.5x the recent average wait, or 0 past ``limit`` (default: the max)."""
        limit = self.max_seconds if limit is None else min(limit, self.max_seconds)
        budget = 1.5 * self.average
        return budget if budget <= limit else 0.0

    def spin(self, predicate: Callable[[], bool], limit: float | None = None) -> bool:
        """Busy-check ``predicate`` within the current budget; True as soon as it holds."""
        budget = self.budget(limit) if self.max_seconds > 0 else 0.0
        return spin_for(predicate, budget)


def spin_for(predicate: Callable[[], bool], budget: float) -> bool:
    """Busy-check ``predicate`` (yielding the core each time) for at most ``budget`` seconds."""
    if budget <= 0:
        return False
    deadline = time.perf_counter() + budget
    while True:
        if predicate():
            return True
        if time.perf_counter() >= deadline:
            return False
        os.sched_yield()
