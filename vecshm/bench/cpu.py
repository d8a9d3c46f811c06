"""What a system costs in CPU: the parent's time and that of every process the system started.

Throughput alone hides cost: a vectorizer whose workers (or parent) spin can win env-steps/s while
taking the cores a learner would use. So every measurement also reads the CPU time, user and
system, of the benchmark's own process (all its threads) and of the processes the system started
(found as the descendants that appeared while it was built: workers, a forkserver, Ray's
processes), and reports it per 1,000 env-steps. Processes other systems started are left out,
though they share the machine: in interleaved rounds they are idle while this one runs.
"""

from __future__ import annotations

import psutil

__all__ = ["CpuMeter", "descendants"]


def descendants() -> set[int]:
    """The pids of every process this one started, and theirs, now."""
    return {child.pid for child in psutil.Process().children(recursive=True)}


class CpuMeter:
    """CPU seconds spent so far by this process and by ``pids`` (a process that has ended counts
    what it spent until last read)."""

    def __init__(self, pids: set[int]) -> None:
        self._me = psutil.Process()
        self._processes: list[psutil.Process] = []
        for pid in pids:
            try:
                self._processes.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        self._last = {process.pid: 0.0 for process in self._processes}

    def seconds(self) -> float:
        """User and system CPU seconds, this process and the system's, since they started."""
        times = self._me.cpu_times()
        total = times.user + times.system
        for process in self._processes:
            try:
                times = process.cpu_times()
                self._last[process.pid] = times.user + times.system
            except psutil.Error:  # ended (or not ours to read): what it had spent when last read
                pass
            total += self._last[process.pid]
        return total
