"""Where should a synchronous vec env's workers run on a small machine? Three placements of the
default plan's workers, measured in one process, rounds alternated:

- ``unpinned``: the default; the scheduler moves the parent and the workers as it likes;
- ``one per core``: worker ``w`` pinned to core ``w`` (what ``cpu_affinity="auto"`` does when there
  are as many workers as cores); the parent stays unpinned;
- ``packed``: every worker on the last core, the others left to the parent.

The workers are moved between rounds with ``os.sched_setaffinity`` (a short warm-up follows each
move); the vec env and its envs stay the same, so the rounds differ only in placement::

    python benchmarks/lab/sync_placements.py [frames|pong] [rounds] [seconds]

Results: docs/benchmarks.md, "Wake-ups and the shared core" (the placements table).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

from vecshm import ShmVecEnv
from vecshm.bench.workloads import WORKLOADS

N_ENVS = 8


def rate(env: ShmVecEnv, actions: np.ndarray, seconds: float) -> float:
    """Env-steps per second of synchronous steps over about ``seconds``."""
    steps = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        for _ in range(50):
            env.step(actions)
        steps += 50
        if time.perf_counter() > end:
            return steps * N_ENVS / (time.perf_counter() - start)


def placements(num_workers: int) -> dict[str, list[set[int]]]:
    """Each placement's allowed cores for every worker."""
    cores = sorted(os.sched_getaffinity(0))
    return {
        "unpinned": [set(cores)] * num_workers,
        "one per core": [{cores[w % len(cores)]} for w in range(num_workers)],
        "packed": [{cores[-1]}] * num_workers,
    }


def main() -> None:
    workload = sys.argv[1] if len(sys.argv) > 1 else "frames"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    with ShmVecEnv(WORKLOADS[workload].factories(N_ENVS)) as env:
        env.reset()
        actions = np.zeros(N_ENVS, dtype=np.int64)
        pids = [process.pid for process in env.processes]
        chosen = placements(len(pids))
        rates: dict[str, list[float]] = {name: [] for name in chosen}
        for _ in range(rounds):
            for name, allowed in chosen.items():
                for pid, cores in zip(pids, allowed):
                    os.sched_setaffinity(pid, cores)
                rate(env, actions, 0.1)
                rates[name].append(rate(env, actions, seconds))
    print(f"{workload}, {N_ENVS} envs, {len(pids)} workers, {rounds} rounds of {seconds} s: env-steps/s")
    for name, values in rates.items():
        print(f"{name:14s} median {statistics.median(values):10,.0f}  range {min(values):,.0f}-{max(values):,.0f}")


if __name__ == "__main__":
    main()
