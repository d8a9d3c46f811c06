"""The parent's own CPU per step cycle: what a vec env costs the process that drives it.

On 2 cores, three processes (the parent, two workers) share the machine, and a cycle's wall time
mixes the parent's work with waiting and preemption. Here the parent is pinned to core 0 and every
worker to core 1, so nothing preempts the parent, and the time spent outside its waits for the
workers (which its ``observer`` is told of) is its own work per cycle: actions checked and
written, the command words, the doorbells, and the results shaped for the caller. A synchronous
cycle steps every env; an async one (``send`` after ``recv``) a batch of half of them. Median and
min of 7 repeats of 5,000 cycles::

    python benchmarks/lab/parent_cost.py sb3 async
    python benchmarks/lab/parent_cost.py gym sync
    python benchmarks/lab/parent_cost.py gym async --env vecshm/Frames-v0 --batch 3 --envs-per-worker 2

Run it alternately against two checkouts (select the tree with ``PYTHONPATH``, see
``ab_paired.py``) for a before/after of the parent's hot path.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import gymnasium as gym
import numpy as np

import vecshm.envs  # noqa: F401  (registers the vecshm/... ids)
from vecshm import ShmVecEnv, ShmVectorEnv

N_ENVS = 8
REPEATS, CYCLES = 7, 5000


def main(
    facade: str,
    mode: str,
    env_id: str = "vecshm/Frames-v0",
    batch_size: int = N_ENVS // 2,
    per_worker: int | None = None,
    repeats: int = REPEATS,
    cycles: int = CYCLES,
) -> tuple[float, float]:
    """Median and min of the parent's microseconds per cycle outside the wait (async: batches of
    ``batch_size``; ``per_worker``: envs per worker, default vecshm's choice)."""
    batch = batch_size if mode == "async" else None
    cls = ShmVecEnv if facade == "sb3" else ShmVectorEnv
    fns = [lambda: gym.make(env_id) for _ in range(N_ENVS)]
    venv: Any = cls(fns, batch_size=batch, envs_per_worker=per_worker, cpu_affinity=[[1]], pin_parent=[0])
    waited = [0.0]

    class Waits:  # the vec env's observer (vecshm.parent.core.waiting.WaitObserver): adds up its waits
        def wait_started(self) -> None: ...

        def slept(self, seconds: float) -> None: ...

        def wait_ended(self, seconds: float) -> None:
            waited[0] += seconds

    venv.observer = Waits()
    try:
        actions = np.zeros(batch or N_ENVS, dtype=np.int64)
        if batch:
            venv.async_reset()
            step = lambda: venv.send(actions, venv.recv()[-1])  # noqa: E731
        else:
            venv.reset()
            step = lambda: venv.step(actions)  # noqa: E731
        for _ in range(min(2000, cycles)):  # warm-up: caches, spinners, allocator
            step()
        costs = []
        for _ in range(repeats):
            waited[0] = 0.0
            started = time.perf_counter_ns()
            for _ in range(cycles):
                step()
            costs.append((time.perf_counter_ns() - started - waited[0] * 1e9) / cycles / 1000)
        return statistics.median(costs), min(costs)
    finally:
        venv.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("facade", choices=["sb3", "gym"])
    parser.add_argument("mode", choices=["sync", "async"])
    parser.add_argument("--env", default="vecshm/Frames-v0")
    parser.add_argument("--batch", type=int, default=N_ENVS // 2)
    parser.add_argument("--envs-per-worker", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--cycles", type=int, default=CYCLES)
    args = parser.parse_args()
    median, least = main(
        args.facade, args.mode, args.env, args.batch, args.envs_per_worker, args.repeats, args.cycles
    )  # fmt: skip
    print(f"{args.facade} {args.mode}: parent {median:.1f} us per cycle outside the wait (min {least:.1f})")
