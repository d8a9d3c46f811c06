"""Which process/env arrangement and batch mode absorbs slow envs best: a probe for many-core machines.

Steps a bench workload (default ``pong``: ``ALE/Pong-v5``, the bench's random action cycle)
through ShmVectorEnv in sync and async mode with 1, 2 or the default number of envs per worker
process, and EnvPool in both modes, in interleaved rounds, and prints env-steps/s per
arrangement. The bench (``python -m vecshm.bench``) measures vecshm's defaults against its peers;
this script measures the knobs behind those defaults::

    python benchmarks/lab/manycore_probe.py 64 --rounds 2 --seconds 3
    python benchmarks/lab/manycore_probe.py 64 -w frames --only shm
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable

from vecshm.bench.runner import measure_rate
from vecshm.bench.systems import Stepper, envpool_async, envpool_sync, shm_async, shm_vector
from vecshm.bench.workloads import Workload, get_workload

WARM_UP_STEPS = 300


def arrangements(n: int) -> dict[str, Callable[[Workload, int], Stepper]]:
    """The bench's own builders (``vecshm.bench.systems``), with the knobs turned."""
    half = n // 2
    return {
        "shm sync epw=default": shm_vector(),
        "shm sync epw=1": shm_vector(envs_per_worker=1),
        "shm sync epw=2": shm_vector(envs_per_worker=2),
        "shm sync epw=1 spin=0": shm_vector(envs_per_worker=1, spin=0.0),
        f"shm async b={half} epw=default": shm_async(),
        f"shm async b={half} epw=1": shm_async(1),
        f"shm async b={half} epw=2": shm_async(2),
        "envpool sync": envpool_sync,
        f"envpool async b={half}": envpool_async,
    }


def measure(build: Callable[[Workload, int], Stepper], workload: Workload, n_envs: int, seconds: float) -> float:
    """Env-steps/s of one freshly built vec env (built per round: 64 Atari envs per system would not all fit)."""
    stepper = build(workload, n_envs)
    try:
        actions = workload.actions(n_envs)
        stepper.reset()
        for k in range(WARM_UP_STEPS):
            stepper.step(actions[k % len(actions)])
        return measure_rate(stepper, actions, n_envs, seconds)
    finally:
        stepper.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("n_envs", type=int, nargs="?", default=64)
    parser.add_argument("-w", "--workload", default="pong")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--only", nargs="*", help="substrings of the arrangements to run")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    workload = get_workload(args.workload)
    every = arrangements(args.n_envs)
    cases = {k: v for k, v in every.items() if not args.only or any(s in k for s in args.only)}
    results: dict[str, list[float]] = {k: [] for k in cases}
    for r in range(args.rounds):
        for name, build in cases.items():
            try:
                rate = measure(build, workload, args.n_envs, args.seconds)
            except Exception as exc:  # a missing peer must not end the probe
                print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            results[name].append(rate)
            print(f"round {r} {name}: {rate:,.0f}/s", flush=True)
    print(f"\n{args.n_envs} envs, median env-steps/s over {args.rounds} rounds:")
    for name, rates in results.items():
        if rates:
            print(f"  {name:34s} {statistics.median(rates):>10,.0f}   {[round(x) for x in rates]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"n_envs": args.n_envs, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
