"""A progress display on standard error for the long commands (the bench, ``vecshm.tune``): a bar
with the time left on a terminal (through rich, where installed), else one counted line per update,
which a log or CI output keeps."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["Progress"]


class Progress:
    """Progress towards ``total``: each :meth:`update` advances by one, or sets how much is ``done``."""

    def __init__(self, total: float, quiet: bool = False) -> None:
        self.total = total
        self.done = 0.0
        self.quiet = quiet
        self.bar: Any = None
        if quiet or not sys.stderr.isatty():
            return
        try:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
        except ImportError:
            return
        self.bar = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), transient=True
        )
        self.task = self.bar.add_task("starting", total=total)
        self.bar.start()

    def update(self, text: str, done: float | None = None) -> None:
        self.done = self.done + 1 if done is None else done
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, description=text)
        else:
            print(f"  [{self.done:g}/{self.total:g}] {text}", file=sys.stderr, flush=True)

    def at(self, text: str, fraction: float) -> None:
        """:meth:`update` to ``fraction`` of the total (what ``vecshm.tune`` reports)."""
        self.update(text, round(self.total * fraction))

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """The bar is taken down however the work ends, so that an error prints below it."""
        self.stop()
