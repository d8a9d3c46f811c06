"""Env-steps/s of one vec env on a built-in workload: the A/B check for hot-path changes.

Run it alternately against two checkouts. Select the tree with ``PYTHONPATH``: the editable
install would otherwise win (a script's own folder, not the current directory, comes first on
``sys.path``), and both runs would measure the same code::

    git worktree add ../old <commit>
    for i in 1 2 3 4 5 6; do for tree in ../old .; do
        PYTHONPATH=$tree python benchmarks/ab_step_rate.py vecshm/Frames-v0 sb3; done; done

and compare the medians. ``sb3`` steps a ``ShmVecEnv``, ``gym`` a ``ShmVectorEnv``; 8 envs, 2 s.
"""

from __future__ import annotations

import sys
import time

import gymnasium as gym
import numpy as np

import vecshm.envs  # noqa: F401  (registers the vecshm/... ids)
from vecshm import ShmVecEnv, ShmVectorEnv

N_ENVS = 8
SECONDS = 2.0


def main(env_id: str, facade: str) -> float:
    fns = [lambda: gym.make(env_id) for _ in range(N_ENVS)]
    venv = ShmVecEnv(fns) if facade == "sb3" else ShmVectorEnv(fns)
    try:
        venv.reset()
        space = venv.action_space if facade == "sb3" else venv.single_action_space
        space.seed(0)
        actions = np.stack([space.sample() for _ in range(N_ENVS)])
        for _ in range(2000):  # warm-up: caches, spinners, allocator
            venv.step(actions)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < SECONDS:
            for _ in range(200):
                venv.step(actions)
            steps += 200
        return steps * N_ENVS / (time.perf_counter() - start)
    finally:
        venv.close()


if __name__ == "__main__":
    print(f"{main(sys.argv[1], sys.argv[2]):.0f}")
