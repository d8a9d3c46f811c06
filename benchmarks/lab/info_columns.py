"""What typed info columns save the parent: the time to turn a batch's infos into what the caller gets.

Steps vec envs whose infos are ALE's (``lives``, ``episode_frame_number``, ``frame_number``: Python
ints) once, then times reading that step's infos again and again from the shared arena: SB3's list
of dicts (``ShmVecEnv``) and Gymnasium's dict of arrays (``ShmVectorEnv``). The same infos are read
with the columns on, and pickled (columns turned off in the workers), in alternating rounds::

    python benchmarks/lab/info_columns.py --envs 8 64 --rounds 3

Workers start with ``fork`` so that turning the columns off reaches them.
"""

from __future__ import annotations

import argparse
import timeit
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import vecshm.shared.info_columns
from vecshm import ShmVecEnv, ShmVectorEnv
from vecshm.parent.core.run import VecRun
from vecshm.parent.handback.results import Batch
from vecshm.vector.infos import vector_infos


class AleInfoEnv(gym.Env):
    """No compute; ALE's info on every step."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0, 255, (4,), np.uint8)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def _info(self) -> dict[str, int]:
        return {"lives": 3, "episode_frame_number": 4 * self.t, "frame_number": 4 * self.t + 100}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        self.t = 0
        return np.zeros(4, np.uint8), self._info()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return np.zeros(4, np.uint8), 0.0, False, False, self._info()


def last_step(run: VecRun, n: int) -> Batch:
    """A reset, then one step of every env, through the vec env's public ``run``: that step's
    results (a :class:`~vecshm.parent.handback.results.Batch` in slot 0), to read again and again."""
    run.start_reset([{}] * n, lend=False)
    run.finish()
    run.start_step(np.zeros(n, np.int64), lend=False)
    return run.finish()


def read_time_us(facade: str, n: int, columns: bool, number: int = 2000) -> float:
    """Best of 7 of the mean time to read one step's infos for ``n`` envs, in microseconds."""
    write = vecshm.shared.info_columns.ColumnWriter.write
    if not columns:  # (before the workers fork: they inherit it)
        vecshm.shared.info_columns.ColumnWriter.write = lambda self, info, arena, env_index: None
    fns = [AleInfoEnv for _ in range(n)]
    per_worker = max(1, n // 2)
    venv: Any = None
    try:
        if facade == "sb3":
            venv = ShmVecEnv(fns, start_method="fork", envs_per_worker=per_worker)
            batch = last_step(venv.run, n)
            read = batch.infos
        else:
            venv = ShmVectorEnv(fns, context="fork", envs_per_worker=per_worker)
            batch, ids = last_step(venv.run, n), np.arange(n)
            read = lambda: vector_infos(batch.info_parts(ids), n, ids, None)  # noqa: E731
        return min(timeit.repeat(read, number=number, repeat=7)) / number * 1e6
    finally:
        vecshm.shared.info_columns.ColumnWriter.write = write
        if venv is not None:
            venv.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{'facade':8s} {'envs':>5s} {'pickled us':>11s} {'columns us':>11s} {'ratio':>6s}")
    for facade in ("sb3", "gym"):
        for n in args.envs:
            pickled, columns = [], []
            for _ in range(args.rounds):
                pickled.append(read_time_us(facade, n, columns=False))
                columns.append(read_time_us(facade, n, columns=True))
            a, b = float(np.median(pickled)), float(np.median(columns))
            print(f"{facade:8s} {n:5d} {a:11.1f} {b:11.1f} {a / b:5.1f}x", flush=True)


if __name__ == "__main__":
    main()
