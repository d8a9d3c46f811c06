"""Core pinning: workers run where the plan says, bad core lists fail early, thread pools are capped."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import psutil
import pytest
from faulty_envs import healthy

from vecshm import ShmVecEnv, ShmVectorEnv, topology
from vecshm.shared.affinity import THREAD_LIMIT_VARS, plan_worker_cores, usable_cores

CORES = usable_cores()


def worker_affinities(venv) -> list[list[int]]:
    return [sorted(psutil.Process(p.pid).cpu_affinity()) for p in venv.processes]


def test_explicit_cores_are_applied_round_robin(no_leaks):
    plan = [[CORES[-1]], [CORES[0]]]
    with ShmVecEnv([healthy] * 6, envs_per_worker=2, cpu_affinity=plan) as venv:
        assert worker_affinities(venv) == [[CORES[-1]], [CORES[0]], [CORES[-1]]]
        assert venv.runtime.worker_cores == [[CORES[-1]], [CORES[0]], [CORES[-1]]]
        venv.reset()
        venv.step(np.zeros(6, dtype=np.int64))


def test_auto_plan_matches_what_workers_get(no_leaks):
    with ShmVectorEnv([healthy] * 4, envs_per_worker=2, cpu_affinity="auto") as envs:
        plan = plan_worker_cores("auto", 2)
        assert worker_affinities(envs) == plan
    if len(CORES) == 2:  # the CI machine: the parent's core is kept free only with spare cores
        assert plan_worker_cores("auto", 1) == [[CORES[1]]]
        assert plan_worker_cores("auto", 2) == [[CORES[0]], [CORES[1]]]
        assert plan_worker_cores("auto", 3) == [[CORES[0]], [CORES[1]], [CORES[0]]]


def test_pin_parent_pins_the_caller_after_the_workers_start(no_leaks):
    before = os.sched_getaffinity(0)
    try:
        with ShmVecEnv([healthy] * 2, envs_per_worker=1, pin_parent=[CORES[0]], start_method="fork") as venv:
            assert os.sched_getaffinity(0) == {CORES[0]}
            assert all(len(cores) == len(before) for cores in worker_affinities(venv))
    finally:
        os.sched_setaffinity(0, before)


PINNED_LEARNER = """
import sys, torch
sys.path.insert(0, {tests!r})
from faulty_envs import healthy
from vecshm import ShmVecEnv

if __name__ == "__main__":
    before = torch.get_num_threads()
    with ShmVecEnv([healthy], pin_parent=[{core}], limit_threads={limit}):
        print(before, torch.get_num_threads())
"""


@pytest.mark.slow
@pytest.mark.skipif(len(CORES) < 2, reason="PyTorch's pool has one thread on one core")
@pytest.mark.parametrize("limit", [True, False])
def test_pin_parent_caps_a_loaded_pytorch_pool_at_the_pinned_cores(limit, tmp_path):
    """PyTorch sized its pool for every core when it loaded; pinned to one, the learner runs one thread."""
    script = tmp_path / "learner.py"
    script.write_text(PINNED_LEARNER.format(tests=os.path.dirname(__file__), core=CORES[0], limit=limit))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    before, after = map(int, result.stdout.split())
    assert before > 1
    assert after == (1 if limit else before)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cpu_affinity": [max(CORES) + 100]}, "outside this process's allowed set"),
        ({"cpu_affinity": [[CORES[0], -1]]}, "outside"),
        ({"cpu_affinity": []}, "empty"),
        ({"cpu_affinity": "fastest"}, "'auto'"),
        ({"pin_parent": [max(CORES) + 1]}, "pin_parent"),
    ],
)
def test_bad_core_lists_fail_before_anything_starts(kwargs, message, no_leaks):
    before = psutil.Process().children(recursive=True)
    with pytest.raises(ValueError, match=message):
        ShmVecEnv([healthy] * 2, **kwargs)
    assert len(psutil.Process().children(recursive=True)) <= len(before)


def test_workers_cap_native_thread_pools_unless_told_not_to():
    with ShmVecEnv([healthy] * 2) as venv:
        assert venv.env_method("getenv", THREAD_LIMIT_VARS[0]) == ["1", "1"]
    with ShmVecEnv([healthy] * 2, limit_threads=False, start_method="spawn") as venv:
        assert venv.env_method("getenv", "OMP_NUM_THREADS") == [os.environ.get("OMP_NUM_THREADS")] * 2


def test_topology_reports_the_allowed_set_and_a_plan():
    info = topology(8)
    assert info.allowed == CORES and info.num_workers == min(8, len(CORES))
    assert sum(info.envs_per_worker) == 8 and len(info.auto_plan) == info.num_workers
    text = str(info)
    assert "allowed for this process" in text and "worker 0: cores" in text
