"""How often the parent sleeps and wakes during async batches, and what a wake that finds too few
envs finished costs it: the case for (or against) coalescing the workers' doorbells.

Each worker rings the parent's doorbell when it finishes a command. A parent asleep in ``recv()``
wakes at each ring, checks whether the batch is full, and sleeps again when it is not: a batch
that spans ``u`` workers can wake it up to ``u`` times. Coalescing would let only the worker that
completes the batch ring. This counts, per ``recv``, the parent's waits, its sleeps, and its
*futile* wakes (a sleep followed by another in the same wait), and times the parent's own work
between a futile wake and its next sleep (the kernel's part of a wake-up is not in that time)::

    python benchmarks/parent_wakeups.py pong 8 --batch 4 --envs-per-worker 1 4
    python benchmarks/parent_wakeups.py pong 64 --batch 32 --envs-per-worker 4   # the 16-core case
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from vecshm import ShmVectorEnv, sync
from vecshm.bench.workloads import get_workload
from vecshm.engine import Engine

WARM_UP_RECVS = 200  # spinners, caches and the ring settle before counting


class WakeCounts:
    """Waits, sleeps and futile wakes of the parent, counted by wrapping the engine's wait."""

    def __init__(self) -> None:
        self.reset()
        self._woke: float | None = None  # when the last sleep of the current wait ended

    def reset(self) -> None:
        """Start counting from zero (the wrapped waits keep counting into this object)."""
        self.waits = self.sleeps = self.futile = 0
        self.futile_seconds = 0.0

    def wrap_wait(self, wait: Callable[..., Any]) -> Callable[..., Any]:
        def counted(engine: Engine, *args: Any) -> Any:
            self.waits += 1
            self._woke = None
            try:
                return wait(engine, *args)
            finally:
                self._woke = None

        return counted

    def wrap_sleep(self, sleep: Callable[..., Any]) -> Callable[..., Any]:
        def counted(watch: sync.DoneWatch, timeout: float | None) -> Any:
            started = time.perf_counter()
            if self._woke is not None:  # slept before in this wait: that wake found the batch short
                self.futile += 1
                self.futile_seconds += started - self._woke
            try:
                return sleep(watch, timeout)
            finally:
                self.sleeps += 1
                self._woke = time.perf_counter()

        return counted


@contextmanager
def counting() -> Iterator[WakeCounts]:
    counts = WakeCounts()
    wait, sleep = Engine._wait, sync.DoneWatch.wait
    Engine._wait = counts.wrap_wait(wait)  # type: ignore[method-assign]
    sync.DoneWatch.wait = counts.wrap_sleep(sleep)  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        Engine._wait, sync.DoneWatch.wait = wait, sleep  # type: ignore[method-assign]


def measure(workload: str, n: int, batch: int, per_worker: int | None, seconds: float) -> str:
    wl = get_workload(workload)
    actions = wl.actions(n)
    with counting() as counts:
        envs = ShmVectorEnv(wl.factories(n), batch_size=batch, envs_per_worker=per_worker)
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
