"""Env-steps/s of one vec env on a built-in workload: the A/B check for hot-path changes.

Run it alternately against two checkouts. Select the tree with ``PYTHONPATH``: the editable
install would otherwise win (a script's own folder, not the current directory, comes first on
``sys.path``), and both runs would measure the same code::

    git worktree add ../old <commit>
    for i in 1 2 3 4 5 6; do for tree in ../old .; do
        PYTHONPATH=$tree python benchmarks/ab_step_rate.py vecshm/Frames-v0 sb3; done; done

and compare the medians. The workers are forked, so they run the tree the parent imported: under
forkserver they import vecshm afresh, and with an editable install that is the editable tree
whatever ``PYTHONPATH`` says (a change to the segment's layout made the old tree's workers fail to
map the new tree's segment; a change inside the workers alone would have been measured on both
sides). ``sb3`` steps a ``ShmVecEnv``, ``gym`` a ``ShmVectorEnv``; ``sb3-async``
and ``gym-async`` run the same classes in async batches of half the envs (``send``/``recv``), and
``sb3-async-all``/``gym-async-all`` in async batches of every env (what a synchronous step would
cost through the async path); ``subproc`` steps SB3's ``SubprocVecEnv`` (forked, as vecshm here),
the peer to alternate with; ``AB_SECONDS`` sets the measured time (2 s); a facade ending in
``+restart`` runs under ``on_worker_failure="restart"``, one ending in ``+stats`` with
``stats=True`` (both: ``sb3+restart+stats``); 8 envs (or the third argument), 2 s. The id ``ale-infos`` is a
zero-compute env defined here (so any checkout runs it) whose infos are ALE's: ``lives``,
``episode_frame_number`` and ``frame_number`` on every step.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

import vecshm.envs  # noqa: F401  (registers the vecshm/... ids)
from vecshm import ShmVecEnv, ShmVectorEnv

N_ENVS = 8
SECONDS = float(os.environ.get("AB_SECONDS", 2.0))  # per run


class AleInfoEnv(gym.Env):
    """No compute, a 4-float observation, and the three scalar infos ALE returns on every step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.t = self.frames = 0
        self.obs = np.zeros(4, np.float32)

    def _info(self) -> dict:
        return {"lives": 3, "episode_frame_number": 4 * self.t, "frame_number": self.frames}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.obs, self._info()

    def step(self, action):
        self.t += 1
        self.frames += 4
        return self.obs, 0.0, False, self.t >= 1000, self._info()


def open_stepper(env_id: str, facade: str, n_envs: int = N_ENVS) -> tuple[Any, Callable[[], None], int]:
    """The vec env for ``facade`` on ``n_envs`` of ``env_id``, warmed up; a function that takes one
    step (or one async batch, received and sent back); and the env-steps that step is."""
    if env_id.startswith("ALE/"):
        import ale_py

        gym.register_envs(ale_py)
    facade, *policies = facade.split("+")
    failure = "restart" if "restart" in policies else "raise"
    # (a checkout from before stats=True takes no such keyword)
    counting = {"stats": True} if "stats" in policies else {}
    make = AleInfoEnv if env_id == "ale-infos" else (lambda: gym.make(env_id))
    fns = [make for _ in range(n_envs)]
    mode = facade.partition("-")[2]  # "", "async" or "async-all"
    batch = {"async": n_envs // 2, "async-all": n_envs}.get(mode)
    if facade == "subproc":
        from stable_baselines3.common.vec_env import SubprocVecEnv

        venv = SubprocVecEnv(fns, start_method="fork")
    elif facade.startswith("sb3"):
        venv = ShmVecEnv(fns, batch_size=batch, start_method="fork", on_worker_failure=failure, **counting)
    else:
        venv = ShmVectorEnv(fns, batch_size=batch, context="fork", on_worker_failure=failure, **counting)
    try:
        space = venv.action_space if facade.startswith(("sb3", "subproc")) else venv.single_action_space
        space.seed(0)
        actions = np.stack([space.sample() for _ in range(batch or n_envs)])
        if batch is None:
            venv.reset()
            step = lambda: venv.step(actions)  # noqa: E731
        else:
            venv.async_reset()

            def step() -> None:
                venv.send(actions, venv.recv()[-1])

            step()  # the first batch of resets back, and its envs sent
        for _ in range(2000):  # warm-up: caches, spinners, allocator
            step()
    except BaseException:
        venv.close()
        raise
    return venv, step, batch or n_envs


def rate(step: Callable[[], None], per_step: int, seconds: float) -> float:
    """Env-steps/s of ``step`` (``per_step`` env-steps each) over about ``seconds``."""
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(200):
            step()
        steps += 200
    return steps * per_step / (time.perf_counter() - start)


def main(env_id: str, facade: str, n_envs: int = N_ENVS) -> float:
    venv, step, per_step = open_stepper(env_id, facade, n_envs)
    try:
        return rate(step, per_step, SECONDS)
    finally:
        venv.close()


def serve(env_id: str, facade: str, n_envs: int = N_ENVS) -> None:
    """For ``ab_paired.py``: the vec env opened once, then a line ``ready``, and for each line
    ``SECONDS`` read from stdin the rate over that long, until stdin closes."""
    venv, step, per_step = open_stepper(env_id, facade, n_envs)
    try:
        print("ready", flush=True)
        for line in sys.stdin:
            print(f"{rate(step, per_step, float(line)):.0f}", flush=True)
    finally:
        venv.close()


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3], *map(int, sys.argv[4:5]))
    else:
        print(f"{main(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:4])):.0f}")
