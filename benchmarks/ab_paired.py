"""A paired A/B of two checkouts: each keeps one warm vec env, and they take turns stepping.

``ab_step_rate.py`` alternates whole processes, each timing a fresh vec env for 2 s. On a shared
VM the host's speed drifts by 20-50% within minutes (2026-12-07: one configuration read 39-92K
env-steps/s over six runs), so medians of separate runs need many rounds to tell 5% apart. Here
both trees run at once, one process each (``ab_step_rate.py --serve``, with ``PYTHONPATH`` set to
the tree: see ``ab_step_rate.py`` on selecting a tree), each with its vec env opened and warmed up
once. The driver asks them in turn, A B B A A B ..., to step for ``--seconds`` while the other
waits (its workers fall asleep within their spin budget, a few milliseconds, and cost nothing
after), and takes the ratio of each adjacent pair. A drift slower than a round affects both
sides alike, so the median of the pairs' ratios is steady where the rates are not::

    git worktree add ../old <commit>
    python benchmarks/ab_paired.py ../old . vecshm/Frames-v0 sb3 --rounds 20

prints each side's median rate and the median of the after/before ratios, with their spread.
``--after-facade`` gives the after side another facade: the same tree twice, ``sb3`` against
``sb3+stats``, measures what an option costs.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent


def start(tree: str, env_id: str, facade: str, n_envs: int) -> subprocess.Popen[str]:
    """A serving ``ab_step_rate.py`` process on ``tree``, once its vec env is ready."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    command = [sys.executable, str(HERE / "ab_step_rate.py"), "--serve", env_id, facade, str(n_envs)]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    line = process.stdout.readline()
    if line.strip() != "ready":
        process.kill()
        raise RuntimeError(f"{tree}: the vec env did not start ({line!r}); run ab_step_rate.py on it to see why")
    return process


def ask(process: subprocess.Popen[str], seconds: float) -> float:
    """The serving process's rate over ``seconds``."""
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(f"{seconds}\n")
    process.stdin.flush()
    return float(process.stdout.readline())


def paired(
    before: str, after: str, env_id: str, facades: tuple[str, str], rounds: int, seconds: float, n_envs: int
) -> dict[str, Any]:
    """Each side's rates and the after/before ratio of each round (the order swapped every round);
    ``facades``: the before side's and the after side's."""
    sides = {"before": start(before, env_id, facades[0], n_envs)}
    try:
        sides["after"] = start(after, env_id, facades[1], n_envs)
        rates: dict[str, list[float]] = {"before": [], "after": []}
        for r in range(rounds):
            for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
                rates[name].append(ask(sides[name], seconds))
        ratios = [a / b for a, b in zip(rates["after"], rates["before"])]
        return {"rates": rates, "ratios": ratios}
    finally:
        for process in sides.values():
            if process.stdin is not None:
                process.stdin.close()
            process.wait(timeout=60)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", help="the checkout to compare against (its root: the folder holding vecshm/)")
    parser.add_argument("after", help="the checkout measured")
    parser.add_argument("env_id", help="a Gymnasium id, or ale-infos (ab_step_rate.py)")
    parser.add_argument("facade", help="sb3, gym, sb3-async, gym-async, ... (ab_step_rate.py)")
    parser.add_argument("--after-facade", help="the after side's facade, if not the same (e.g. sb3+stats)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=0.5, help="each side's turn")
    parser.add_argument("--envs", type=int, default=8)
    args = parser.parse_args(argv)
    facades = (args.facade, args.after_facade or args.facade)
    result = paired(args.before, args.after, args.env_id, facades, args.rounds, args.seconds, args.envs)
    rates, ratios = result["rates"], sorted(result["ratios"])
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    print(
        f"{args.env_id} {' -> '.join(dict.fromkeys(facades))}: before {statistics.median(rates['before']):,.0f}/s, "
        f"after {statistics.median(rates['after']):,.0f}/s; after/before {statistics.median(ratios):.3f} "
        f"(quartiles {quartiles[0]:.3f}-{quartiles[-1]:.3f}, {len(ratios)} pairs)"
    )


if __name__ == "__main__":
    main()
