"""A newcomer's first read stays short: the README's shape, and docs/benchmarks.md leading with results."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text().splitlines()


def test_the_readme_fits_in_120_lines_of_at_most_100_characters() -> None:
    assert len(README) <= 120
    assert [n for n, line in enumerate(README, 1) if len(line) > 100] == []


def test_the_readme_s_first_40_lines_say_what_it_is_how_to_install_the_two_commands_and_the_results() -> None:
    first = "\n".join(README[:40])
    assert "drop-in replacement" in first
    assert re.search(r"^pip install -e '\.\[[a-z0-9,]+\]'", first, flags=re.M)
    assert re.search(r"^make bench\b", first, flags=re.M) and re.search(r"^make test\b", first, flags=re.M)
    table = [line for line in README[:40] if line.startswith("| ") and re.search(r"\d{4}-\d{2}-\d{2}", line)]
    assert len(table) >= 4 and any("2 cores" in row for row in table) and any("16 cores" in row for row in table)


def test_every_command_the_headline_table_names_exists() -> None:
    text = "\n".join(README)
    for script in re.findall(r"`(benchmarks/[\w/.]+\.sh)", text):
        assert (ROOT / script).exists(), script


def test_docs_benchmarks_opens_with_a_results_table() -> None:
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    first_table = text.index("\n|")
    assert text.index("## Results") < first_table < text.index("## Method")
