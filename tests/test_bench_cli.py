"""The benchmark CLI runs a tiny configuration end to end and writes valid reports (no timing checks)."""

from __future__ import annotations

import json

import pytest

from vecshm.bench.cli import main
from vecshm.bench.systems import get_systems


def test_tiny_benchmark_writes_markdown_and_json(tmp_path, capsys):
    code = main(
        [
            "-w",
            "vector",
            "-n",
            "2",
            "-r",
            "2",
            "--seconds",
            "0.05",
            "-s",
            "ShmVecEnv",
            "SyncVectorEnv",
            "SB3 SubprocVecEnv",
            "EnvPool",
            "-o",
            str(tmp_path),
            "-q",
        ]
    )
    assert code == 0
    report = json.loads((tmp_path / "results.json").read_text())
    case = report["cases"][0]
    assert case["workload"] == "vector" and case["n_envs"] == 2
    assert len(case["rounds"]["vecshm ShmVecEnv"]) == 2
    assert all(rate > 0 for rates in case["rounds"].values() for rate in rates)
    assert "ideal (independent processes)" in case["rounds"]
    assert "EnvPool" in case["skipped"]
    assert report["machine"]["usable_cores"] >= 1
    assert "semaphore round-trip" in " ".join(report["floor"])
    table = (tmp_path / "results.md").read_text()
    assert "| vecshm ShmVecEnv |" in table and "skipped" in table
    assert table in capsys.readouterr().out


def test_unknown_names_are_clear_errors():
    with pytest.raises(ValueError, match="unknown system"):
        get_systems(["NoSuchVecEnv"])
    with pytest.raises(SystemExit):
        main(["-w", "no-such-workload"])
