"""Where the CPU goes in a stepping loop: the parent's and each worker's busy share of the wall time.

Steps a bench workload through ``ShmVectorEnv``, synchronously or as async batches
(``recv``/``send``), and reads every process's CPU time (user + system) before and after. A sum
near ``cores x 100%`` means the machine is saturated, and the parent's share says how much of it
the learner's side costs; a lower sum means processes wait on each other (the sync barrier)::

    python benchmarks/lab/where_time_goes.py frames 8 --batch 4
    python benchmarks/lab/where_time_goes.py pong 8 --batch 4
"""

from __future__ import annotations

import argparse
import time

import psutil

from vecshm import ShmVectorEnv
from vecshm.bench.workloads import get_workload


def measure(workload: str, n: int, batch: int | None, seconds: float) -> str:
    wl = get_workload(workload)
    actions = wl.actions(n)
    envs = ShmVectorEnv(wl.factories(n), batch_size=batch)
    try:
        processes = [psutil.Process()] + [psutil.Process(p.pid) for p in envs.processes]

        def loop(duration: float) -> float:
            k, started = 0, time.perf_counter()
            if batch is None:
                envs.reset(seed=0)
                while time.perf_counter() - started < duration:
                    envs.step(actions[k % len(actions)])
                    k += 1
                return k * n / (time.perf_counter() - started)
            envs.async_reset(seed=0)
            while time.perf_counter() - started < duration:
                *_, env_ids = envs.recv()
                envs.send(actions[k % len(actions)][: len(env_ids)], env_ids)
                k += len(env_ids)
            rate = k / (time.perf_counter() - started)
            while envs.in_flight:
                envs.recv()
            return rate

        loop(1.0)
        before, started = [sum(p.cpu_times()[:2]) for p in processes], time.perf_counter()
        rate = loop(seconds)
        wall = time.perf_counter() - started
        busy = [(sum(p.cpu_times()[:2]) - b) / wall * 100 for p, b in zip(processes, before)]
    finally:
        envs.close()
    mode = "sync" if batch is None else f"async batch {batch}"
    workers = " ".join(f"{x:.0f}%" for x in busy[1:])
    return (
        f"{workload}, {n} envs, {mode}: {rate:,.0f} env-steps/s; busy: parent {busy[0]:.0f}%, "
        f"workers {workers}; sum {sum(busy):.0f}% of {psutil.cpu_count() * 100}%"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workload")
    parser.add_argument("envs", type=int)
    parser.add_argument("--batch", type=int, default=None, help="also measure async batches of this size")
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    print(measure(args.workload, args.envs, None, args.seconds), flush=True)
    if args.batch:
        print(measure(args.workload, args.envs, args.batch, args.seconds), flush=True)


if __name__ == "__main__":
    main()
