"""MkDocs hook: a page's ``<!-- argparse-help: module:function -->`` becomes that parser's ``--help``.

So the CLI reference is the CLI's own text, never a copy that drifts (mkdocs.yml names this file).
"""

from __future__ import annotations

import importlib
import os
import re

PLACEHOLDER = re.compile(r"<!-- argparse-help: ([\w.]+):(\w+) -->")


def on_page_markdown(markdown: str, **kwargs: object) -> str:
    """Replace each placeholder with the help of the parser its function builds, as a code block."""

    def help_text(match: re.Match[str]) -> str:
        os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: the same width on every machine
        parser = getattr(importlib.import_module(match.group(1)), match.group(2))()
        return f"```text\n{parser.format_help().rstrip()}\n```"

    return PLACEHOLDER.sub(help_text, markdown)
