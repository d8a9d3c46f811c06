"""What a system costs in CPU: the parent's time and that of every process the system started.

Throughput alone hides cost: a vectorizer whose workers (or parent) spin can win env-steps/s while
taking the cores a learner would use. So every measurement also reads the CPU time, user and
system, of the benchmark's own process (all its threads) and of the processes the system started
(found as the descendants that appeared while it was built: workers, a forkserver, Ray's
processes), and reports it per 1,000 env-steps. Processes other systems started are left out,
though they share the machine: in interleaved rounds they are idle while this one runs, because
after each measurement the bench waits for the measured system to go idle (:meth:`CpuMeter.settle`)
and counts what it spent meanwhile as its own. (PufferLib's workers spin for half a second after
their last step: measured right after them, vecshm's first row lost a third of its rate.)
"""

from __future__ import annotations

import time

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

    def settle(self, interval: float = 0.05, idle_share: float = 0.05, limit: float = 2.0) -> float:
        """Wait until the processes measured use under ``idle_share`` of one core over ``interval``
        seconds (their spinners stopped), at most ``limit`` seconds; the seconds waited."""
        waited, last = 0.0, self.seconds()
        while waited < limit:
            time.sleep(interval)
            waited += interval
            now = self.seconds()
            if now - last < idle_share * interval:
                break
            last = now
        return waited
