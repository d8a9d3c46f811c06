"""How often the parent sleeps and wakes during async batches, and what a wake that finds too few
envs finished costs it: the case for (or against) coalescing the workers' doorbells.

Each lane wakes the parent's doorbell when it finishes a command. A parent asleep in ``recv()``
wakes at each ring, checks whether the batch is full, and sleeps again when it is not: a batch
that spans ``u`` workers can wake it up to ``u`` times. Coalescing would let only the worker that
completes the batch ring. This counts, per ``recv``, the parent's waits, its sleeps, and its
*futile* wakes (a sleep followed by another in the same wait), and times the parent's own work
between a futile wake and its next sleep (the kernel's part of a wake-up is not in that time)::

    python benchmarks/lab/parent_wakeups.py pong 8 --batch 4 --envs-per-worker 1 4
    python benchmarks/lab/parent_wakeups.py pong 64 --batch 32 --envs-per-worker 4   # the 16-core case
"""

from __future__ import annotations

import argparse
import time

from vecshm import ShmVectorEnv
from vecshm.bench.workloads import get_workload

WARM_UP_RECVS = 200  # spinners, caches and the ring settle before counting


class WakeCounts:
    """Waits, sleeps and futile wakes of the parent: a vec env's ``observer`` (see
    :class:`vecshm.parent.core.waiting.WaitObserver`)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Start counting from zero."""
        self.waits = self.sleeps = self.futile = 0
        self.futile_seconds = 0.0
        self._woke: float | None = None  # when the last sleep of the current wait ended

    def wait_started(self) -> None:
        self.waits += 1
        self._woke = None

    def slept(self, seconds: float) -> None:
        now = time.perf_counter()
        if self._woke is not None:  # slept before in this wait: that wake found the batch short
            self.futile += 1
            self.futile_seconds += (now - seconds) - self._woke
        self.sleeps += 1
        self._woke = now

    def wait_ended(self, seconds: float) -> None:
        self._woke = None


def measure(workload: str, n: int, batch: int, per_worker: int | None, seconds: float) -> str:
    wl = get_workload(workload)
    actions = wl.actions(n)
    envs = ShmVectorEnv(wl.factories(n), batch_size=batch, envs_per_worker=per_worker)
    envs.observer = counts = WakeCounts()
    try:

        def cycle(k: int) -> int:
            """One recv and the send after it; the envs stepped."""
            *_, env_ids = envs.recv()
            envs.send(actions[k % len(actions)][: len(env_ids)], env_ids)
            return len(env_ids)

        envs.async_reset(seed=0)
        for k in range(WARM_UP_RECVS):
            cycle(k)
        counts.reset()
        steps = counted = 0
        started, cpu = time.perf_counter(), time.process_time()
        while time.perf_counter() - started < seconds:
            steps += cycle(counted)
            counted += 1
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        workers = len(envs.processes)
    finally:
        envs.close()
    futile_us = counts.futile_seconds / max(1, counts.futile) * 1e6
    return (
        f"{workload}, {n} envs on {workers} workers, batch {batch}: {steps / wall:,.0f} env-steps/s; per recv: "
        f"waits {counts.waits / counted:.2f}, sleeps {counts.sleeps / counted:.2f}, futile wakes "
        f"{counts.futile / counted:.2f} ({futile_us:.1f} us of parent work each); "
        f"parent CPU {cpu / counted * 1e6:.0f} us"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", help="a bench workload (pong, frames, ...)")
    parser.add_argument("n", type=int, help="envs")
    parser.add_argument("--batch", type=int, required=True, help="envs per async batch")
    parser.add_argument("--envs-per-worker", type=int, nargs="+", default=[None], help="one run per value")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    for per_worker in args.envs_per_worker:
        print(measure(args.workload, args.n, args.batch, per_worker, args.seconds), flush=True)


if __name__ == "__main__":
    main()
