"""Which process/env arrangement and batch mode absorbs slow envs best: a probe for many-core machines.

Steps a bench workload (default ``pong``: ``ALE/Pong-v5``, the bench's random action cycle)
through ShmVectorEnv in sync and async mode with 1, 2 or the default number of envs per worker
process, and EnvPool in both modes, in interleaved rounds, and prints env-steps/s per
arrangement. The bench (``python -m vecshm.bench``) measures vecshm's defaults against its peers;
this script measures the knobs behind those defaults::

    python benchmarks/manycore_probe.py 64 --rounds 2 --seconds 3
    python benchmarks/manycore_probe.py 64 -w frames --only shm
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from vecshm.bench.workloads import get_workload


def _shm(workload: str, n_envs: int, batch: int | None, per_worker: int | None, **options: Any) -> tuple[Any, Callable]:
    from vecshm import ShmVectorEnv

    workload = get_workload(workload)
    env = ShmVectorEnv(workload.factories(n_envs), batch_size=batch, envs_per_worker=per_worker, **options)
    actions = workload.actions(n_envs)
    if batch is None:
        env.reset(seed=0)
        return env, lambda k: env.step(actions[k % len(actions)])
    env.async_reset(seed=0)

    def step(k: int) -> Any:
        result = env.recv()
        env.send(actions[k % len(actions)][:batch], result[-1])
        return result

    return env, step


def _envpool(workload: str, n_envs: int, batch: int | None) -> tuple[Any, Callable]:
    from vecshm.bench.systems import _envpool_make

    workload = get_workload(workload)
    env = _envpool_make(workload, n_envs, batch)
    actions = workload.actions(n_envs)
    if batch is None:
        env.reset()
        return env, lambda k: env.step(actions[k % len(actions)])
    env.async_reset()

    def step(k: int) -> Any:
        result = env.recv()
        env.send(actions[k % len(actions)][:batch], result[4]["env_id"])
        return result

    return env, step


def arrangements(w: str, n: int) -> dict[str, Callable[[], tuple[Any, Callable]]]:
    half = n // 2
    return {
        "shm sync epw=default": lambda: _shm(w, n, None, None),
        "shm sync epw=1": lambda: _shm(w, n, None, 1),
        "shm sync epw=2": lambda: _shm(w, n, None, 2),
        "shm sync epw=1 spin=0": lambda: _shm(w, n, None, 1, spin=0.0),
        f"shm async b={half} epw=default": lambda: _shm(w, n, half, max(1, n // 16)),
        f"shm async b={half} epw=1": lambda: _shm(w, n, half, 1),
        f"shm async b={half} epw=2": lambda: _shm(w, n, half, 2),
        "envpool sync": lambda: _envpool(w, n, None),
        f"envpool async b={half}": lambda: _envpool(w, n, half),
    }


def measure(build: Callable[[], tuple[Any, Callable]], seconds: float) -> float:
    env, step = build()
    try:
        per_call = None
        for k in range(300):  # warm-up
            out = step(k)
        per_call = len(out[1])
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            step(calls)
            calls += 1
        return calls * per_call / (time.perf_counter() - start)
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("n_envs", type=int, nargs="?", default=64)
    parser.add_argument("-w", "--workload", default="pong")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--only", nargs="*", help="substrings of the arrangements to run")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    every = arrangements(args.workload, args.n_envs)
    cases = {k: v for k, v in every.items() if not args.only or any(s in k for s in args.only)}
    results: dict[str, list[float]] = {k: [] for k in cases}
    for r in range(args.rounds):
        for name, build in cases.items():
            try:
                rate = measure(build, args.seconds)
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
