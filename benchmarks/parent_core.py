"""The parent's core during async batches (:mod:`vecshm.balance`): unpinned, balanced, reserved.

For each workload, async batches of half the envs (the bench's ``recv``/``send`` loop) with the
workers on every core (``cpu_affinity=[usable_cores()]``, which turns the balance off), with the
default balance, and with the workers always off the first core (``cpu_affinity=[cores[1:]]``),
and the synchronous mode beside them, interleaved; 1 s of warm-up, then ``--seconds`` per round.
The last column is the ratio the balance measured (the workers' busy time per remaining core
over the parent's; it gives the parent a core below ``RESERVE_BELOW``)::

    python benchmarks/parent_core.py                      # frames, dict, vector, busy 5/15/40 us
    python benchmarks/parent_core.py -w pong -n 8 -r 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

from vecshm import ShmVectorEnv
from vecshm.affinity import usable_cores
from vecshm.bench.workloads import Workload, get_workload

BUSY = {f"busy{us}": us for us in (5, 15, 40)}  # vecshm/Busy-v0 at this many us per step
ARRANGEMENTS = ("sync", "async unpinned", "async balanced (default)", "async parent's core reserved")


def workload_of(name: str) -> Workload:
    if name in BUSY:
        return Workload(name, f"{BUSY[name]} us per step", "vecshm/Busy-v0", (("step_us", float(BUSY[name])),))
    return get_workload(name)


def build(workload: Workload, n: int, arrangement: str) -> ShmVectorEnv:
    cores = usable_cores()
    placement: dict[str, Any] = {
        "async unpinned": {"cpu_affinity": [cores]},
        "async parent's core reserved": {"cpu_affinity": [cores[1:]]},
    }.get(arrangement, {})
    batch = None if arrangement == "sync" else n // 2
    return ShmVectorEnv(workload.factories(n), batch_size=batch, **placement)


def rate(env: ShmVectorEnv, actions: list[np.ndarray], seconds: float) -> float:
    """Env-steps/s over ``seconds`` of the loop (sync steps, or recv then send)."""
    n, k, steps, started = env.num_envs, 0, 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        if env._batches.batch_size == n:
            env.step(actions[k % len(actions)])
            steps += n
        else:
            ids = env.recv()[-1]
            env.send(actions[k % len(actions)][ids], ids)
            steps += len(ids)
        k += 1
    return steps / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-w", "--workloads", nargs="+", default=["frames", "dict", "vector", *BUSY])
    parser.add_argument("-n", "--envs", type=int, default=8)
    parser.add_argument("-r", "--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    print(f"{len(usable_cores())} usable cores, {args.envs} envs, async batches of {args.envs // 2}\n")
    print("| workload | " + " | ".join(ARRANGEMENTS) + " | balanced / unpinned | ratio measured |")
    print("|---|" + "---:|" * (len(ARRANGEMENTS) + 2))
    for name in args.workloads:
        workload = workload_of(name)
        actions = workload.actions(args.envs)
        envs = {a: build(workload, args.envs, a) for a in ARRANGEMENTS}
        rates: dict[str, list[float]] = {a: [] for a in ARRANGEMENTS}
        try:
            for a, env in envs.items():
                if a == "sync":
                    env.reset(seed=0)
                else:
                    env.async_reset(seed=0)
                rate(env, actions, 1.0)  # warm-up: caches, spinners, and the balance's first windows
            for _ in range(args.rounds):
                for a, env in envs.items():
                    rates[a].append(rate(env, actions, args.seconds))
            ratio = envs["async balanced (default)"]._engine.balance.ratio
        finally:
            for env in envs.values():
                env.close()
        medians = {a: statistics.median(r) for a, r in rates.items()}
        sync = medians["sync"]
        cells = [
            f"{medians[a]:,.0f}" + ("" if a == "sync" else f" ({medians[a] / sync:.2f}x sync)") for a in ARRANGEMENTS
        ]
        gain = medians["async balanced (default)"] / medians["async unpinned"]
        shown = "-" if ratio is None else f"{ratio:.1f}"
        print(f"| {name} | " + " | ".join(cells) + f" | {gain:.2f}x | {shown} |", flush=True)


if __name__ == "__main__":
    main()
