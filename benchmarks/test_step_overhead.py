"""pytest-benchmark view of one vec-step on the zero-compute pixel workload (run: make bench-pytest).

Speed is measured here, never asserted: compare the rows of one run (same machine, same load).
The interleaved, ratio-based comparison users read is ``python -m vecshm.bench``.
"""

from __future__ import annotations

import numpy as np
import pytest

from vecshm.bench.systems import get_systems
from vecshm.bench.workloads import get_workload

WORKLOAD = get_workload("frames")
SYSTEM_NAMES = [
    "vecshm ShmVecEnv",
    "vecshm ShmVecEnv copy=False",
    "SB3 SubprocVecEnv",
    "SB3 DummyVecEnv",
    "Gymnasium AsyncVectorEnv(shared_memory=True)",
]


@pytest.mark.parametrize("name", SYSTEM_NAMES)
def test_vec_step_8_frame_envs(benchmark, name):
    system = get_systems([name])[0]
    reason = system.available(WORKLOAD)
    if reason:
        pytest.skip(reason)
    stepper = system.build(WORKLOAD, 8)
    try:
        stepper.reset()
        actions = np.zeros(8, dtype=np.int64)
        benchmark.pedantic(stepper.step, args=(actions,), rounds=300, warmup_rounds=30)
    finally:
        stepper.close()
