"""What ``ShmVectorEnv(reset_ahead=True)`` hides: the step after an episode ended, with a learner.

Steps ``ALE/Pong-v5`` (the bench's random action cycle) synchronously, sleeping between steps to
stand in for a learner's forward pass on a GPU (the core idles meanwhile), and reports env-steps/s,
the mean ``step()`` time, and the median ``step()`` time of the steps right after an episode ended,
with ``reset_ahead`` off and on in alternating rounds::

    python benchmarks/lab/reset_ahead.py --learner-ms 10 --envs 8 --seconds 12 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time

from vecshm import ShmVectorEnv
from vecshm.bench.workloads import get_workload


def run(reset_ahead: bool, learner_ms: float, n: int, seconds: float) -> dict[str, float]:
    workload = get_workload("pong")
    actions = workload.actions(n)
    envs = ShmVectorEnv(workload.factories(n), reset_ahead=reset_ahead)
    try:
        envs.reset(seed=0)
        k, started, stepping, after_end, ended, episodes = 0, time.perf_counter(), 0.0, [], False, 0
        while time.perf_counter() - started < seconds:
            time.sleep(learner_ms / 1000)
            before = time.perf_counter()
            _, _, terminations, truncations, _ = envs.step(actions[k % len(actions)])
            took = time.perf_counter() - before
            if ended:
                after_end.append(took)
            done = terminations | truncations
            ended, episodes, stepping, k = bool(done.any()), episodes + int(done.sum()), stepping + took, k + 1
        return {
            "env_steps_per_s": k * n / (time.perf_counter() - started),
            "step_ms": stepping / k * 1e3,
            "after_end_ms": statistics.median(after_end) * 1e3 if after_end else float("nan"),
            "episodes": episodes,
        }
    finally:
        envs.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--learner-ms", type=float, default=10.0)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for _ in range(args.rounds):
        for ahead in (False, True):
            r = run(ahead, args.learner_ms, args.envs, args.seconds)
            print(
                f"reset_ahead={ahead!s:5}  {r['env_steps_per_s']:7.0f} env-steps/s  step() {r['step_ms']:.2f} ms  "
                f"after an episode ended {r['after_end_ms']:.2f} ms  ({r['episodes']} episodes ended)",
                flush=True,
            )


if __name__ == "__main__":
    main()
