"""``python -m vecshm.bench.tuned``: what ``vecshm.tune`` chooses, against the best of every plan it
could have chosen, measured in the same run.

For each workload, ``tune`` runs with its budget and the caller's loop; then every candidate plan
(and the busy-wait off on each, where a step is short enough for it to matter) is measured in
interleaved rounds, with tune's choice among them, and the table gives each plan's median and the
choice's share of the best. Workloads: ``frames`` (zero compute), ``pong`` (``ALE/Pong-v5``), and
``mix``, where one env of eight takes 10x as long per step as the others.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
from collections.abc import Callable

import gymnasium as gym

from vecshm.progress import Progress
from vecshm.shared.affinity import usable_cores
from vecshm.tune import Plan, tune
from vecshm.tune.measure import live_measurer
from vecshm.tune.plans import candidates
from vecshm.user_env import make_named_env

__all__ = ["WORKLOADS", "main"]


def _mix(n: int) -> list[Callable[[], gym.Env]]:
    """``n`` envs of 100 us per step, the last of 1 ms."""
    make = functools.partial(make_named_env, "vecshm.envs:BusyEnv")
    return [functools.partial(make, {"step_us": 1000.0 if i == n - 1 else 100.0}) for i in range(n)]


WORKLOADS: dict[str, Callable[[int], list[Callable[[], gym.Env]]]] = {
    "frames": lambda n: [functools.partial(make_named_env, "vecshm.envs:FrameEnv", {})] * n,
    "pong": lambda n: [functools.partial(make_named_env, "ALE/Pong-v5", {})] * n,
    "mix": _mix,
}


def sweep(
    factories: list[Callable[[], gym.Env]], chosen: Plan, rounds: int, seconds: float, loop: str
) -> dict[Plan, float]:
    """Every plan tune could choose, measured in interleaved rounds: the median env-steps/s of each."""
    cores, n = len(usable_cores()), len(factories)
    plans = candidates(n, cores, async_batches=loop == "send-recv")
    plans += [Plan(n, p.envs_per_worker, p.batch_size, spin=0) for p in plans]
    plans = list(dict.fromkeys([*plans, chosen]))
    measurer = live_measurer(factories, 0.0)
    rates: dict[Plan, list[float]] = {plan: [] for plan in plans}
    display = Progress(rounds * len(plans))
    try:
        for r in range(rounds):
            for plan in plans:
                display.update(f"round {r + 1}/{rounds}: {plan.label()}")
                rates[plan].append(measurer.rate(plan, seconds))
    finally:
        display.stop()
        measurer.close()
    return {plan: statistics.median(values) for plan, values in rates.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vecshm.bench.tuned", description=__doc__.split("\n\n")[0])
    parser.add_argument("-w", "--workload", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("-n", "--num-envs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0, help="tune's budget")
    parser.add_argument("-r", "--rounds", type=int, default=3, help="the sweep's interleaved rounds")
    parser.add_argument("--sweep-seconds", type=float, default=1.0, help="each plan's measurement per round")
    parser.add_argument("-o", "--output", default="bench-results/tuned")
    args = parser.parse_args(argv)
    lines, found = ["| workload | plan | env-steps/s | of the best |", "|---|---|---:|---:|"], []
    summary = ["| workload | tune's choice | its rate | the sweep's best | choice / best | tune's time |"]
    summary.append("|---|---|---:|---|---:|---:|")
    for name in args.workload:
        factories = WORKLOADS[name](args.num_envs)
        print(f"{name}: tune, {args.seconds:g} s", file=sys.stderr)
        display = Progress(100)
        try:
            tuned = tune(
                factories,
                seconds=args.seconds,
                progress=display.at,
            )
        finally:
            display.stop()
        chosen = Plan(len(factories), **tuned.options)
        print(f"{name}: the sweep", file=sys.stderr)
        rates = sweep(factories, chosen, args.rounds, args.sweep_seconds, "step")
        best = max(rates.values())
        for plan, rate in sorted(rates.items(), key=lambda item: -item[1]):
            mark = " (tune's choice)" if plan == chosen else ""
            lines.append(f"| {name} | {plan.label()}{mark} | {rate:,.0f} | {rate / best:.0%} |")
        best_plan = max(rates, key=lambda p: rates[p])
        summary.append(
            f"| {name} | {chosen.label()} | {rates[chosen]:,.0f} | {best_plan.label()} | "
            f"{rates[chosen] / best:.0%} | {tuned.seconds:.0f} s |"
        )
        found.append({"workload": name, "tuned": tuned.to_dict(), "sweep": {p.label(): r for p, r in rates.items()}})
    text = "\n".join([*summary, "", *lines, ""])
    print(text)
    os.makedirs(args.output, exist_ok=True)
    with open(os.path.join(args.output, "tuned.md"), "w") as handle:
        handle.write(text)
    with open(os.path.join(args.output, "tuned.json"), "w") as handle:
        json.dump({"command": sys.argv if argv is None else argv, "workloads": found}, handle, indent=2, default=repr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
