"""``python -m vecshm``: the facts a bug report needs (paste them into the issue); ``--version`` alone."""

from __future__ import annotations

import argparse
import json
import sys


def build_parser() -> argparse.ArgumentParser:
    """The command's options (the docs site prints its help from here)."""
    parser = argparse.ArgumentParser(
        prog="python -m vecshm",
        description="Print what a vecshm bug report needs: versions, the transport, start methods, cores, packages.",
    )
    parser.add_argument("--version", action="store_true", help="print vecshm's version alone")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-cuda", action="store_true", help="do not import torch to ask about CUDA")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Print the report (or the version, or JSON); returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.version:
        from vecshm._version import __version__

        print(__version__)
        return 0
    from vecshm.about import facts, format_facts

    report = facts(cuda=not args.no_cuda)
    print(json.dumps(report, indent=2) if args.json else format_facts(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
