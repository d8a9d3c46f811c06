"""Benchmark workloads: env factories and the fixed action sequence every system is fed."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from vecshm.user_env import make_named_env

__all__ = ["Workload", "WORKLOADS", "get_workload", "make_env", "step_time", "user_workload"]


@dataclass(frozen=True)
class Workload:
    """A named env and how to build it; ``atari`` workloads need ale-py.

    ``cpu_bound``: the env does real work per step, so independent processes stepping it measure
    what the cores can do (the "ideal"). For zero-compute envs that figure only measures a loop
    around a no-op, and no vectorizer's share of it means anything.
    """

    name: str
    description: str
    env_id: str
    kwargs: tuple[tuple[str, object], ...] = ()
    atari: bool = False
    cpu_bound: bool = False
    default_n: int = 8  # envs, unless -n says otherwise
    baseline: str = "SB3 SubprocVecEnv"  # what the table's ratios divide by
    user: bool = False  # the user's own env (--env): a Python env, which EnvPool cannot run

    def factory(self) -> Callable[[], gym.Env]:
        return functools.partial(make_env, self.env_id, dict(self.kwargs))

    def factories(self, n_envs: int) -> list[Callable[[], gym.Env]]:
        return [self.factory() for _ in range(n_envs)]

    def available(self) -> str | None:
        """None when the workload can run here, else why not."""
        if not self.atari:
            return None
        try:
            import ale_py  # noqa: F401
        except ImportError:
            return "ale-py is not installed (pip install 'vecshm[atari]')"
        return None

    def ideal_steps(self, n_local: int) -> Callable[[int], int]:
        """The ideal's loop body in one process: step one env on the ``k``-th action of the cycle
        (resetting it when its episode ends); each call returns the env-steps it did (1). One env
        per process whatever ``n_local``: a CPU-bound env's rate does not depend on it."""
        env = self.factory()()
        env.reset(seed=0)
        single = [a[0] for a in self.actions(1)]

        def step(k: int) -> int:
            _, _, terminated, truncated, _ = env.step(single[k % len(single)])
            if terminated or truncated:
                env.reset()
            return 1

        return step

    def actions(self, n_envs: int, count: int = 64, seed: int = 0) -> list[np.ndarray]:
        """A fixed cycle of action batches, the same for every system."""
        env = self.factory()()
        space = env.action_space
        env.close()
        space.seed(seed)
        return [np.stack([np.asarray(space.sample()) for _ in range(n_envs)]) for _ in range(count)]


def make_env(env_id: str, kwargs: dict) -> gym.Env:
    """The env every system builds: vecshm's ids registered first (a spawned worker has not
    imported vecshm), then the name as :func:`vecshm.user_env.make_named_env` reads it."""
    import vecshm.envs  # noqa: F401

    return make_named_env(env_id, kwargs)


# A user's env whose step takes at least this long in one process does real work: the bench measures
# the ideal for it (independent processes). A cheaper step is mostly the loop around it.
CPU_BOUND_SECONDS = 50e-6


def user_workload(env: str, kwargs: dict[str, Any], seconds: float = 0.5) -> Workload:
    """The workload of the user's env (``--env``), its step timed here first: CPU-bound (with an
    ideal) when a step takes :data:`CPU_BOUND_SECONDS` or more."""
    workload = Workload(env, "", env, tuple(kwargs.items()), user=True)
    step, _ = step_time(workload.ideal_steps(1), seconds)
    description = f"your env, {step * 1e6:,.0f} us per step in one process"
    return dataclasses.replace(workload, description=description, cpu_bound=step >= CPU_BOUND_SECONDS)


def step_time(step: Callable[[int], Any], seconds: float) -> tuple[float, float]:
    """One call of ``step`` (``step(k)`` for k = 0, 1, ...: an env's step, its resets included)
    over about ``seconds`` and 10 calls at least: its mean time, and the spread (the standard
    deviation over the mean)."""
    times: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds or len(times) < 10:
        began = time.perf_counter()
        step(len(times))
        times.append(time.perf_counter() - began)
    mean = float(np.mean(times))
    return mean, float(np.std(times) / mean) if mean > 0 else 0.0


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload("frames", "zero-compute env, 210x160x3 uint8 frames (pure overhead)", "vecshm/Frames-v0"),
        Workload("dict", "Dict obs: 84x84x3 uint8 image + float32 vector", "vecshm/DictImage-v0"),
        Workload(
            "busy200",
            "CPU-bound: burns 200 us per step, small obs",
            "vecshm/Busy-v0",
            (("step_us", 200.0),),
            cpu_bound=True,
        ),
        Workload(
            "variable",
            "CPU-bound with variable cost: 0-400 us per step, uniformly at random",
            "vecshm/Busy-v0",
            (("step_us", 0.0), ("max_step_us", 400.0)),
            cpu_bound=True,
        ),
        Workload("vector", "small float32 vector obs, CartPole-sized", "vecshm/VectorObs-v0"),
        Workload("pong", "ALE/Pong-v5 through ale-py", "ALE/Pong-v5", atari=True, cpu_bound=True),
        Workload("breakout", "ALE/Breakout-v5 through ale-py", "ALE/Breakout-v5", atari=True, cpu_bound=True),
    ]
}


def get_workload(name: str, table: dict[str, Any] | None = None) -> Any:
    """The workload ``name`` in ``table`` (default: the single-agent ones)."""
    table = WORKLOADS if table is None else table
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; choose from {', '.join(table)}") from None
