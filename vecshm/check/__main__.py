"""``python -m vecshm.check ENV``: is it safe to switch this env to vecshm? Exit status 0 if so, 1 if not."""

from __future__ import annotations

import argparse
import json
import sys

from vecshm.user_env import command_parser

__all__ = ["build_parser", "main"]

DESCRIPTION = (
    "Run ENV under vecshm and in this process with the same seeds and actions, compare every result bit for bit, "
    "and name what differs. Exit status 0: safe to switch; 1: not."
)


def build_parser() -> argparse.ArgumentParser:
    """The command's options (the docs print its help from here)."""
    parser = command_parser("python -m vecshm.check", DESCRIPTION)
    parser.add_argument("-n", "--num-envs", type=int, default=2, help="envs in each vec env")
    parser.add_argument("--steps", type=int, default=1000, help="steps in each run (enough for episodes to end)")
    parser.add_argument("--seed", type=int, default=0, help="the resets' seed and the actions' seed")
    parser.add_argument("--api", choices=("gymnasium", "sb3", "both"), default="both", help="the faces to compare")
    parser.add_argument("--start-methods", nargs="+", default=None, help="default: every one this platform has")
    parser.add_argument("--transports", nargs="+", default=None, help="default: native (where available), portable")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the check and print its report; returns the exit status."""
    args = build_parser().parse_args(argv)
    from vecshm.check import check

    def progress(line: str) -> None:
        print(f"vecshm.check: {line}", file=sys.stderr, flush=True)

    try:
        report = check(
            args.env,
            num_envs=args.num_envs,
            steps=args.steps,
            seed=args.seed,
            env_kwargs=args.env_kwargs,
            api=args.api,
            start_methods=args.start_methods,
            transports=args.transports,
            progress=None if args.quiet else progress,
        )
    except Exception as exc:  # the env fails in this process, without vecshm: nothing to compare with
        failure = f"{type(exc).__name__}: {exc}"
        print(f"vecshm.check: {args.env} fails in this process, without vecshm: {failure}", file=sys.stderr)
        return 1
    print(json.dumps(report.to_dict(), indent=2, default=repr) if args.json else report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
