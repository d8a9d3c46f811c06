"""The ``shared-data`` workload: memory and start-up of envs that each hold one large read-only table.

``python -m vecshm.bench -w shared-data`` (or ``python -m vecshm.bench.shared_data``). Each env holds
a table of ``--table-mib`` MiB (float64, 8 columns) and steps through its rows. For each system, in
a fresh Python process of its own, interleaved round by round: the table is made, then the vec env
of ``-n`` envs is built and reset, timed (the start-up: what it takes to get the data to the
workers, not what an env does with it); then every env reads all of its table (as an env that
normalizes its data would), and the proportional set size (PSS) of that process and every process
under it is summed: each page counts once in all, split among the processes that map it. The
systems: vecshm's ``ShmVecEnv`` with the table shared (:func:`vecshm.share`, the private
table dropped once shared), the same with a tiny table (the start-up to match), vecshm without
``share`` (each forkserver worker unpickles its copy), SB3's ``SubprocVecEnv`` (forkserver, its
default), and Gymnasium's ``AsyncVectorEnv`` (its default: fork on Linux before Python 3.14, whose
workers share the parent's pages until something writes them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["TableEnv", "SYSTEMS", "main", "measure_here"]

COLUMNS = 8


class TableEnv(gym.Env):
    """An env over a table of ``COLUMNS`` float64 columns, observing one row per step (less the
    columns' means, once :meth:`read_all` has read them)."""

    def __init__(self, table: np.ndarray) -> None:
        self.table = table
        self.mean = np.zeros(COLUMNS)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (COLUMNS,), np.float64)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = int(self.np_random.integers(0, len(self.table) - 1000))
        return self.table[self.t] - self.mean, {}

    def read_all(self) -> None:
        """Read every row (the columns' means): its pages are then in this process's PSS."""
        self.mean = np.asarray(self.table.mean(axis=0))

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return self.table[self.t] - self.mean, 0.0, False, self.t % 1000 == 0, {}


# name: (vec env, whether the table is shared, whether it is tiny)
SYSTEMS: dict[str, tuple[str, bool, bool]] = {
    "vecshm ShmVecEnv + vecshm.share": ("vecshm", True, False),
    "vecshm ShmVecEnv + vecshm.share, 1 MiB table": ("vecshm", True, True),
    "vecshm ShmVecEnv (a copy per worker)": ("vecshm", False, False),
    "SB3 SubprocVecEnv": ("sb3", False, False),
    "Gymnasium AsyncVectorEnv (default: fork)": ("gymnasium", False, False),
}


def measure_here(system: str, table_mib: int, n_envs: int) -> dict[str, float]:
    """One measurement, in this process (which must be fresh): what :func:`main` runs in each."""
    import functools
    import time

    import psutil

    import vecshm

    kind, shared, tiny = SYSTEMS[system]
    rows = (1 if tiny else table_mib) * 2**20 // (8 * COLUMNS)
    table = np.random.default_rng(0).random((rows, COLUMNS))
    share_seconds = 0.0
    if shared:
        started = time.perf_counter()
        table = vecshm.share(table)  # (the private table goes with the name)
        share_seconds = time.perf_counter() - started
    fns: list[Any] = [functools.partial(TableEnv, table) for _ in range(n_envs)]
    started = time.perf_counter()
    if kind == "vecshm":
        venv: Any = vecshm.ShmVecEnv(fns)
    elif kind == "sb3":
        from stable_baselines3.common.vec_env import SubprocVecEnv

        venv = SubprocVecEnv(fns)
    else:
        venv = gym.vector.AsyncVectorEnv(fns)
    venv.reset()
    startup = time.perf_counter() - started
    venv.call("read_all") if kind == "gymnasium" else venv.env_method("read_all")
    me = psutil.Process()
    pss = 0
    for process in [me, *me.children(recursive=True)]:
        try:
            pss += process.memory_full_info().pss
        except psutil.Error:
            pass
    venv.close()
    return {"startup_s": startup, "pss_mib": pss / 2**20, "share_s": share_seconds}


def _run_one(system: str, table_mib: int, n_envs: int) -> dict[str, float]:
    code = textwrap.dedent(
        f"""
        import json
        from vecshm.bench.shared_data import measure_here
        if __name__ == "__main__":
            print(json.dumps(measure_here({system!r}, {table_mib}, {n_envs})))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{system}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vecshm.bench.shared_data", description=__doc__.split("\n")[0])
    parser.add_argument("--table-mib", type=int, default=512, help="each env's table, in MiB")
    parser.add_argument("-n", "--n-envs", type=int, default=8)
    parser.add_argument("-r", "--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("-s", "--systems", nargs="+", default=None, help="names (substrings match)")
    parser.add_argument("-o", "--output", default="bench-results", help="directory for shared-data.{md,json}")
    args = parser.parse_args(argv)
    names = [n for n in SYSTEMS if args.systems is None or any(s in n for s in args.systems)]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        for name in names:
            print(f"  round {round_ + 1}/{args.rounds}: {name}", file=sys.stderr, flush=True)
            results[name].append(_run_one(name, args.table_mib, args.n_envs))
    text = report(results, args.table_mib, args.n_envs, args.rounds)
    print(text)
    os.makedirs(args.output, exist_ok=True)
    with open(os.path.join(args.output, "shared-data.md"), "w") as handle:
        handle.write(text)
    with open(os.path.join(args.output, "shared-data.json"), "w") as handle:
        json.dump({"table_mib": args.table_mib, "n_envs": args.n_envs, "results": results}, handle, indent=1)
    return 0


def report(results: dict[str, list[dict[str, float]]], table_mib: int, n_envs: int, rounds: int) -> str:
    lines = [
        f"### shared-data: {n_envs} envs, each holding a {table_mib} MiB table ({rounds} interleaved rounds)",
        "",
        "| system | start-up s (median) | min | max | memory, PSS of every process (MiB) | x the table | share() s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, runs in results.items():
        startup = [run["startup_s"] for run in runs]
        pss = statistics.median(run["pss_mib"] for run in runs)
        times = "(1 MiB table)" if SYSTEMS[name][2] else f"{pss / table_mib:.2f}x"
        lines.append(
            f"| {name} | {statistics.median(startup):.2f} | {min(startup):.2f} | {max(startup):.2f} | {pss:,.0f} | "
            f"{times} | {statistics.median(run['share_s'] for run in runs):.2f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
