"""PettingZoo's SB3 tutorials for SuperSuit's vec envs run to their end with only their two
vectorizing calls switched to vecshm.pettingzoo (``tests/tutorials/``: the tutorials' calls as
PettingZoo publishes them, sizes shrunk), and leave nothing behind when they end, even the one that
never closes its vec env."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import shm_entries, shm_entries_left

pytest.importorskip("supersuit")
pytest.importorskip("pymunk")
pytest.importorskip("stable_baselines3")

pytestmark = pytest.mark.slow  # each trains a PPO in a script of its own

TUTORIALS = Path(__file__).parent / "tutorials"


@pytest.mark.timeout(280)
@pytest.mark.parametrize(
    "script, name",
    [("sb3_pistonball_vector.py", "pistonball_v6"), ("sb3_kaz_vector.py", "knights_archers_zombies_v11")],
)
def test_the_tutorial_runs_to_its_end_with_vecshm_s_two_calls(script, name, tmp_path):
    before = shm_entries()
    result = subprocess.run(
        [sys.executable, str(TUTORIALS / script)], cwd=tmp_path, capture_output=True, text=True, timeout=260
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Finished training on {name}." in result.stdout  # the line that read the metadata's name
    assert "Avg reward:" in result.stdout  # the evaluation, on the model it saved
    assert list(tmp_path.glob(f"{name}_*.zip"))
    assert shm_entries_left(before) == set()
