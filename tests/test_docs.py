"""Every Python example in the README and docs/ runs as written."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # each example runs as a script of its own

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# An example that uses RLlib is marked rllib: make test runs those in .venv-rllib, on the Gymnasium
# that RLlib pins (the others need no RLlib and run in the first venv).
BLOCKS = [
    pytest.param(block, id=f"{path.name}:{i}", marks=pytest.mark.rllib if "ray.rllib" in block else ())
    for path in DOCS
    for i, block in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S))
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("code", BLOCKS)
def test_documented_example_runs(code, tmp_path):
    if "stable_baselines3" in code:
        pytest.importorskip("stable_baselines3")
    for module in ("pettingzoo", "supersuit", "mpe2"):
        if module in code:
            pytest.importorskip(module)
    if "ray.rllib" in code:  # RLlib pins its Gymnasium: make test runs these in .venv-rllib
        pytest.importorskip("ray.rllib.algorithms.ppo", exc_type=ImportError)
    elif "import ray" in code:
        pytest.importorskip("ray")
    # RAY_ADDRESS=local: a Ray example starts its own instance, even if a cluster runs on this machine
    env = {**os.environ, "RAY_ADDRESS": "local"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=280, env=env
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", sorted((ROOT / "examples").glob("*.py")), ids=lambda path: path.name)
def test_example_scripts_run(script, tmp_path):
    """The scripts in examples/ (the docs point to them) run, at their smallest sizes."""
    pytest.importorskip("stable_baselines3")
    for module in ("supersuit", "pymunk") if script.name == "pistonball_ppo.py" else ("ale_py",):
        pytest.importorskip(module)
    cpu = ["--device", "cpu", "--backend", "vecshm", "--n-envs", "4", "--batch", "2"]
    small = {
        "ppo_pinned_atari.py": ["--n-envs", "2", "--timesteps", "256"],
        "acting_loop.py": [*cpu, "--seconds", "0.5", "--rounds", "1"],
        "pistonball_ppo.py": [
            "--copies",
            "1",
            "--num-cpus",
            "1",
            "--timesteps",
            "8",
            "--n-steps",
            "4",
            "--batch-size",
            "40",
        ],
        "cleanrl_ppo_atari.py": [*cpu, "--num-steps", "8", "--total-timesteps", "96", "--update-epochs", "1"],
    }[script.name]
    result = subprocess.run(
        [sys.executable, str(script), *small], cwd=tmp_path, capture_output=True, text=True, timeout=280
    )
    assert result.returncode == 0, result.stderr
    # SB3's log after the first rollout; the throughput loops' rates
    assert any(word in result.stdout for word in ("total_timesteps", "env-steps/s", "steps/s")), result.stdout
