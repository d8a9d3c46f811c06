"""``vecshm-bench`` / ``python -m vecshm.bench``: vecshm against the vectorizers users would pick instead.

With no arguments it answers "how much faster, for envs like mine?" in about two minutes on a
2-core machine: 8 envs of a zero-compute pixel env (210x160x3 frames: pure overhead) and of
``ALE/Pong-v5`` (a real CPU-bound env, when ale-py is installed), vecshm's sync and async modes
against what a user would pick instead (SB3's SubprocVecEnv and DummyVecEnv, Gymnasium's
AsyncVectorEnv and SyncVectorEnv, EnvPool when installed), in interleaved rounds. The table gives
each system's ratio to SubprocVecEnv, and, for CPU-bound envs only, its share of the measured
ideal; the PNG draws the ratios per workload.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from vecshm.bench.device import cuda_unavailable, device_systems
from vecshm.bench.floor import memcpy_seconds, semaphore_round_trip
from vecshm.bench.multiagent import ALL_WORKLOADS, MULTIAGENT_SYSTEMS, MultiAgentWorkload, user_agent_workload
from vecshm.bench.report import machine_info, markdown, plot, to_json
from vecshm.bench.runner import Case, run_case
from vecshm.bench.systems import SYSTEMS, USER_ENV_SYSTEMS, System, get_systems
from vecshm.bench.workloads import get_workload, user_workload
from vecshm.progress import Progress
from vecshm.user_env import command_parser, is_parallel_env, make_named_env

__all__ = ["main", "build_parser"]

DEFAULT_WORKLOADS = ["frames", "pong"]
DESCRIPTION = (
    "Measure vecshm against SB3 SubprocVecEnv/DummyVecEnv, Gymnasium Async/SyncVectorEnv and EnvPool, in interleaved "
    "rounds on the same workload; --env: on your own env, on every system that can run it, with the ideal where a "
    "step does real work."
)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("vecshm-bench", DESCRIPTION, env="--env")
    parser.add_argument(
        "-w",
        "--workload",
        nargs="+",
        default=DEFAULT_WORKLOADS,
        choices=[*ALL_WORKLOADS, "shared-data"],
        help="none by default with --env; shared-data: memory and start-up of envs holding one large table "
        "(vecshm.bench.shared_data)",
    )
    parser.add_argument(
        "-n",
        "--n-envs",
        nargs="+",
        type=int,
        default=None,
        help="sweep, e.g. 1 2 4 8 16 32 64 (default: 8 envs; the multi-agent workloads: pistonball 4 copies, "
        "simple_spread 8)",
    )
    parser.add_argument(
        "-s",
        "--systems",
        nargs="+",
        default=None,
        help=f"'all', or names (substrings match) among: {'; '.join(SYSTEMS)}; for the multi-agent workloads: "
        f"{'; '.join(MULTIAGENT_SYSTEMS)}",
    )
    parser.add_argument("-r", "--rounds", type=int, default=5, help="interleaved rounds per case")
    parser.add_argument("--seconds", type=float, default=1.0, help="measurement time per system per round")
    parser.add_argument(
        "--no-ideal",
        action="store_true",
        help="skip the independent-processes ideal (measured for CPU-bound envs only)",
    )
    parser.add_argument("--no-floor", action="store_true", help="skip the memcpy and round-trip floor figures")
    parser.add_argument("-o", "--output", default="bench-results", help="directory for results.{md,json,png}")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    parser.add_argument(
        "--device",
        default=None,
        help="measure the hand-off too: every row ends each step with its observations on this torch "
        "device, e.g. cuda (vecshm.bench.device; prints a skip line where it is missing)",
    )
    return parser


def _measurements(workloads: list[Any], n_envs: list[int] | None, systems: list[System], names: Any, args: Any) -> int:
    """How many times a run calls its progress display: once per case, then each system's build and
    rounds, and the ideal's."""
    total = 0 if args.no_floor else 1
    for workload in workloads:
        for n in n_envs or [workload.default_n]:
            running = [s for s in systems_for(workload, systems, names) if s.available_for(workload, n) is None]
            total += 1 + (len(running) + (workload.cpu_bound and not args.no_ideal)) * (1 + args.rounds)
    return total


def floor_figures(frame_bytes: int) -> dict[str, str]:
    figures = {f"memcpy of one batch ({frame_bytes / 2**20:.2f} MiB)": f"{memcpy_seconds(frame_bytes) * 1e6:.1f} us"}
    for same_core in (True, False):
        trip = semaphore_round_trip(same_core)
        label = f"semaphore round-trip between two processes, {'same core' if same_core else 'across cores'}"
        figures[label] = "n/a (one core)" if trip is None else f"{trip * 1e6:.1f} us"
    return figures


def systems_for(workload: Any, single_agent: list[System], names: list[str] | None) -> list[System]:
    """The systems measured on ``workload``: ``single_agent`` (chosen already), or for a multi-agent
    one, those ``names`` choose among the multi-agent systems (all the defaults where none match)."""
    if not isinstance(workload, MultiAgentWorkload):
        return single_agent
    try:
        return get_systems(names, MULTIAGENT_SYSTEMS)
    except ValueError:
        return get_systems(None, MULTIAGENT_SYSTEMS)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.env and args.workload is DEFAULT_WORKLOADS:  # (argparse's default itself: no -w given)
        args.workload = []
    if "shared-data" in args.workload:  # memory and start-up, not steps per second: a bench of its own
        from vecshm.bench import shared_data

        passed = ["-r", str(args.rounds), "-o", args.output, *(["-n", str(args.n_envs[0])] if args.n_envs else [])]
        shared_data.main(passed + (["-s", *args.systems] if args.systems else []))
        args.workload = [name for name in args.workload if name != "shared-data"]
        if not args.workload and not args.env:
            return 0
    if args.device is not None:
        reason = cuda_unavailable(args.device)
        if reason:
            print(f"skipping --device {args.device}: {reason}")
            return 0
        systems = get_systems(args.systems, device_systems(args.device))
        args.no_ideal = True  # the ideal has no copy to a device: not a bound here
        print(f"--device {args.device}: every row ends each step with its observations on {args.device}")
    else:
        systems = get_systems(args.systems or (USER_ENV_SYSTEMS if args.env else None))
    workloads = [get_workload(name, ALL_WORKLOADS) for name in args.workload]
    if args.env:
        print(f"timing {args.env} in this process first", file=sys.stderr)
        kwargs = args.env_kwargs
        probe = make_named_env(args.env, kwargs)
        agents = is_parallel_env(probe)
        probe.close()
        workloads.append((user_agent_workload if agents else user_workload)(args.env, kwargs))
    display = Progress(_measurements(workloads, args.n_envs, systems, args.systems, args), args.quiet)
    update, stop = display.update, display.stop
    cases: list[Case] = []
    info = machine_info()
    floor = None
    try:
        for workload in workloads:
            name = workload.name
            reason = workload.available()
            if reason:
                print(f"skipping workload {name}: {reason}", file=sys.stderr)
                continue
            for n_envs in args.n_envs or [workload.default_n]:
                update(f"{name}, {n_envs} envs")
                prefix = f"{name} x{n_envs} | "
                cases.append(
                    run_case(
                        workload,
                        n_envs,
                        systems_for(workload, systems, args.systems),
                        args.rounds,
                        args.seconds,
                        ideal=workload.cpu_bound and not args.no_ideal,
                        progress=lambda text, p=prefix: update(p + text),
                    )
                )
        if not args.no_floor:
            update("floor figures")
            floor = floor_figures(max(args.n_envs or [8]) * 210 * 160 * 3)
    finally:
        stop()
    text = markdown(cases, info, floor)
    print(text)
    os.makedirs(args.output, exist_ok=True)
    with open(os.path.join(args.output, "results.md"), "w") as handle:
        handle.write(text)
    with open(os.path.join(args.output, "results.json"), "w") as handle:
        handle.write(to_json(cases, info, floor, sys.argv if argv is None else argv))
    png = plot(cases, os.path.join(args.output, "results.png"))
    print(f"wrote {args.output}/results.md, results.json" + (", results.png" if png else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
