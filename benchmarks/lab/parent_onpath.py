"""The parent's share of a synchronous step that the workers wait on, in a real loop.

With one worker process on its own core, the parent's work splits in two. What it does between
finding the results and ringing the next command's bells (collecting, the batch, the facade's
results, the caller's loop, the actions and the command words) holds the worker up: it is *on the
step's path*. What it does after the bells and before the results are found (the ticket, the slot
it lends, its wait's bookkeeping) runs while the worker steps, and costs the step nothing.

This script wraps ``Waiter.wait`` (its return: results found) and ``ControlWords._wake`` (its
return: the bells rung) with timestamps, and reports the medians of both gaps over ``steps``
steps of 8 frames envs in one worker process. The two wrappers add about 0.3 us to the first::

    python benchmarks/lab/parent_onpath.py [sb3|gym] [steps]

``ring -> found`` is the rest of the step: the worker's wake-up, its work, its publish and the
parent's noticing it.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import numpy as np

import vecshm.parent.control as control
import vecshm.parent.core.waiting as waiting
from vecshm import ShmVecEnv, ShmVectorEnv
from vecshm.bench.workloads import WORKLOADS

clock = time.perf_counter_ns
marks: list[tuple[str, int]] = []


def _wrap(cls: type, name: str, tag: str) -> None:
    original = getattr(cls, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        marks.append((tag, clock()))
        return result

    setattr(cls, name, wrapped)


def main() -> None:
    facade = sys.argv[1] if len(sys.argv) > 1 else "sb3"
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    _wrap(waiting.Waiter, "wait", "found")
    _wrap(control.ControlWords, "_wake", "rung")
    cls = ShmVecEnv if facade == "sb3" else ShmVectorEnv
    actions = np.zeros(8, dtype=np.int64)
    with cls(WORKLOADS["frames"].factories(8), envs_per_worker=8) as env:
        env.reset()
        for _ in range(3000):
            env.step(actions)
        marks.clear()
        started = time.perf_counter()
        for _ in range(steps):
            env.step(actions)
        seconds = time.perf_counter() - started
    on_path = [(b - a) / 1e3 for (ta, a), (tb, b) in zip(marks, marks[1:]) if ta == "found" and tb == "rung"]
    rest = [(b - a) / 1e3 for (ta, a), (tb, b) in zip(marks, marks[1:]) if ta == "rung" and tb == "found"]
    print(
        f"{facade}: step {seconds / steps * 1e6:.1f} us (mean), "
        f"parent on the path {statistics.median(on_path):.2f} us, "
        f"ring -> found {statistics.median(rest):.2f} us (medians)"
    )


if __name__ == "__main__":
    main()
