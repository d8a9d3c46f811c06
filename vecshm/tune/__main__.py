"""``python -m vecshm.tune ENV``: vecshm's settings for ENV on this machine, chosen by measuring them."""

from __future__ import annotations

import argparse
import json
import sys

from vecshm.user_env import command_parser

__all__ = ["build_parser", "main"]

DESCRIPTION = (
    "Measure vecshm's plans for ENV on this machine, in your loop and within a time budget; print what was measured, "
    "the chosen settings as a constructor line, why, and the speed-up over SubprocVecEnv and the in-process "
    "reference, measured in the same run."
)


def build_parser() -> argparse.ArgumentParser:
    """The command's options (the docs print its help from here)."""
    parser = command_parser("python -m vecshm.tune", DESCRIPTION)
    parser.add_argument("-n", "--num-envs", type=int, default=None, help="envs (default: 4 per usable core)")
    parser.add_argument("--seconds", type=float, default=60.0, help="the time budget")
    parser.add_argument(
        "--loop",
        choices=("step", "send-recv"),
        default="step",
        help="step: your loop steps whole batches (SB3, most Gymnasium loops); send-recv: it uses async batches",
    )
    parser.add_argument(
        "--caller-ms", type=float, default=0.0, help="your loop's own time per step in ms (a policy's forward pass)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Tune and print the result; returns the exit status."""
    args = build_parser().parse_args(argv)
    from vecshm.progress import Progress
    from vecshm.tune import tune

    with Progress(100, args.quiet) as display:
        tuned = tune(
            args.env,
            num_envs=args.num_envs,
            seconds=args.seconds,
            loop=args.loop,
            caller_seconds=args.caller_ms / 1e3,
            env_kwargs=args.env_kwargs,
            progress=display.at,
        )
    print(json.dumps(tuned.to_dict(), indent=2) if args.json else tuned)
    return 0


if __name__ == "__main__":
    sys.exit(main())
