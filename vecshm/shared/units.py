"""The free units of the async ring (see :mod:`vecshm.parent.handback.ring`), as parent and workers share them.

A worker that has stepped its envs for an async command claims the next free unit by reading its
number from a kernel pipe: one read is atomic among processes, there is no lock a dying worker
could hold, and numbers come out in the order the parent wrote them. Only the pipe and the claim
live here, as a worker needs them; the parent's side (writing free units, taking them all back) is
the ring's own (:mod:`vecshm.parent.handback.ring`).
"""

from __future__ import annotations

import os
import sys
from multiprocessing import reduction
from typing import Any

__all__ = ["UnitPipe", "CLAIM", "TOKEN"]

CLAIM = -1  # a worker's obs_slot word: claim a unit of the ring instead of writing a fixed slot
TOKEN = 4  # bytes per unit number in the pipe (a uint32 in native order)


class UnitPipe:
    """The free units' numbers in a pipe: ``claim`` in any worker; the parent writes them.

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
