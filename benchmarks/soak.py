"""Soak and cycle check: flat memory over a long run, nothing growing over many create/close cycles.

    python benchmarks/soak.py [--env-steps 1000000] [--n-envs 64] [--cycles 200]

Prints RSS of the parent and of every worker after warm-up and at the end of the run, and the
parent's file descriptors, threads, child processes and /dev/shm entries before and after the
cycles. Numbers are reported, not asserted (the unit tests hold the leak checks).
"""

from __future__ import annotations

import argparse
import os
import time

import gymnasium as gym
import numpy as np
import psutil

from vecshm import ShmVecEnv


def make_env():
    return gym.make("vecshm/VectorObs-v0")


def rss_mib(pids: list[int]) -> list[float]:
    return [round(psutil.Process(pid).memory_info().rss / 2**20, 1) for pid in pids]


def soak(env_steps: int, n_envs: int) -> None:
    venv = ShmVecEnv([make_env] * n_envs)
    pids = [os.getpid()] + [p.pid for p in venv.processes]
    venv.reset()
    actions = np.zeros(n_envs, dtype=np.int64)
    for _ in range(2000):
        venv.step(actions)
    start_rss = rss_mib(pids)
    steps, start = 0, time.perf_counter()
    samples = []
    while steps < env_steps:
        venv.step(actions)
        steps += n_envs
        if steps % (n_envs * 2000) < n_envs:
            samples.append(rss_mib(pids)[0])
    elapsed = time.perf_counter() - start
    end_rss = rss_mib(pids)
    venv.close()
    print(
        f"soak: {steps:,} env-steps, {n_envs} envs on {len(os.sched_getaffinity(0))} cores, {elapsed:.1f} s "
        f"({steps / elapsed:,.0f} env-steps/s)"
    )
    print(f"  parent RSS MiB: start {start_rss[0]}, end {end_rss[0]}, samples min {min(samples)} max {max(samples)}")
    print(f"  worker RSS MiB: start {start_rss[1:]}, end {end_rss[1:]}")


def resources() -> dict[str, int]:
    me = psutil.Process()
    return {
        "fds": me.num_fds(),
        "threads": me.num_threads(),
        "children": len([c for c in me.children(recursive=True) if "forkserver" not in " ".join(c.cmdline())]),
        "dev_shm": len(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else 0,
    }


def cycles(count: int) -> None:
    ShmVecEnv([make_env] * 2).close()  # first use starts the forkserver
    before = resources()
    start = time.perf_counter()
    for _ in range(count):
        venv = ShmVecEnv([make_env] * 4)
        venv.reset()
        venv.step(np.zeros(4, dtype=np.int64))
        venv.close()
    after = resources()
    print(f"cycles: {count} create/step/close in {time.perf_counter() - start:.1f} s")
    print(f"  before {before}\n  after  {after}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-steps", type=int, default=1_000_000)
    parser.add_argument("--n-envs", type=int, default=64)
    parser.add_argument("--cycles", type=int, default=200)
    args = parser.parse_args()
    soak(args.env_steps, args.n_envs)
    cycles(args.cycles)


if __name__ == "__main__":
    main()
