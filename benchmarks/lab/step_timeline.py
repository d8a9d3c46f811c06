"""Where one synchronous step's time goes: the parent's send, each worker's wake-up and work, the
parent's noticing and its receive, as medians over thousands of steps.

Timestamps come from ``time.perf_counter`` (one clock for every process on Linux), taken around
vecshm's internal calls, which this script wraps: ``Engine.start_step`` (the command sent, the
doorbells rung), the worker loop's ``_wait_for_commands`` (a command seen), ``EnvRunner._publish``
(a worker done) and ``Waiter.collect`` (the parent has the results). The workers are forked, so
they run the wrapped code. The wrappers add about a microsecond to each segment they bound.

    python benchmarks/lab/step_timeline.py [sb3|gym] [envs_per_worker] [steps]

Frames (210x160x3), 8 envs. A segment's median, per worker:

- ``send``: from ``step()`` to the doorbells rung (the actions checked and written, the words);
- ``wake``: from the doorbells to the worker seeing its command (negative: it saw the command
  while the parent was still ringing);
- ``work``: the worker's envs stepped and their results written;
- ``notice``: from the worker's publish to the parent holding its results (the parent's spin,
  then its collection);
- ``receive``: from there to ``step()`` returning (the batch and the facade's results).
"""

from __future__ import annotations

import glob
import os
import sys
import tempfile
import time

import numpy as np

import vecshm.worker.main as worker_main
from vecshm import ShmVecEnv, ShmVectorEnv
from vecshm.bench.workloads import WORKLOADS
from vecshm.parent.core.engine import Engine
from vecshm.parent.core.waiting import Waiter
from vecshm.worker.runner import EnvRunner

clock = time.perf_counter
FOLDER = tempfile.mkdtemp(prefix="vecshm-timeline-")
seen: list[float] = []  # in each worker: when it saw a command
published: list[float] = []  # ... and when it published one
sent: list[float] = []  # in the parent: the doorbells rung
collected: list[float] = []  # ... and the results collected


def wrap(owner: object, name: str, before: list[float] | None, after: list[float] | None) -> None:
    original = getattr(owner, name)

    def timed(*args, **kwargs):  # type: ignore[no-untyped-def]
        if before is not None:
            before.append(clock())
        result = original(*args, **kwargs)
        if after is not None:
            after.append(clock())
        return result

    setattr(owner, name, timed)


def serve_then_save(original):  # type: ignore[no-untyped-def]
    def serve(*args):  # type: ignore[no-untyped-def]
        try:
            return original(*args)
        finally:  # each publish, with the command it answered (the last one seen before it)
            at, done = np.array(seen), np.array(published)
            np.save(f"{FOLDER}/{os.getpid()}.npy", np.array([at[np.searchsorted(at, done) - 1], done]))

    return serve


wrap(worker_main, "_wait_for_commands", None, seen)
wrap(EnvRunner, "_publish", published, None)
worker_main._serve = serve_then_save(worker_main._serve)
wrap(Engine, "start_step", None, sent)
wrap(Waiter, "collect", None, collected)


def main() -> None:
    facade = sys.argv[1] if len(sys.argv) > 1 else "sb3"
    per_worker = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 6000
    fns = WORKLOADS["frames"].factories(8)
    if facade == "sb3":
        env = ShmVecEnv(fns, envs_per_worker=per_worker, start_method="fork")
        env.reset()
    else:
        env = ShmVectorEnv(fns, envs_per_worker=per_worker, context="fork")
        env.reset(seed=0)
    actions = np.zeros(8, dtype=np.int64)
    started, returned = [], []
    for _ in range(steps):
        started.append(clock())
        env.step(actions)
        returned.append(clock())
    env.close()
    skip = steps // 3  # warm-up
    us = lambda x: f"{1e6 * np.median(x):6.1f}"  # noqa: E731
    a, f = np.array(started)[skip:], np.array(returned)[skip:]
    b, e = np.array(sent[-steps:])[skip:], np.array(collected[-steps:])[skip:]
    print(f"{facade}, {per_worker} envs per worker: step {us(f - a)} us (send {us(b - a)}, receive {us(f - e)})")
    for k, path in enumerate(sorted(glob.glob(f"{FOLDER}/*.npy"))):
        c, d = (column[-steps:][skip:] for column in np.load(path))
        print(f"  worker process {k}: wake {us(c - b)}  work {us(d - c)}  notice {us(e - d)}")
        os.remove(path)
    os.rmdir(FOLDER)


if __name__ == "__main__":
    main()
