"""``make_vec_env``: SB3's helper, defaulting to nothing but vecshm's classes."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from vecshm.monitor import Monitor
from vecshm.vec_env.base import VecEnv
from vecshm.vec_env.dummy import DummyVecEnv

__all__ = ["make_vec_env"]


def make_vec_env(
    env_id: str | Callable[..., gym.Env],
    n_envs: int = 1,
    seed: int | None = None,
    start_index: int = 0,
    monitor_dir: str | None = None,
    wrapper_class: Callable[[gym.Env], gym.Env] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    vec_env_cls: type[VecEnv] | Callable[..., VecEnv] | None = None,
    vec_env_kwargs: dict[str, Any] | None = None,
    monitor_kwargs: dict[str, Any] | None = None,
    wrapper_kwargs: dict[str, Any] | None = None,
) -> VecEnv:
    """Create ``n_envs`` monitored envs in a vec env, as ``stable_baselines3.common.env_util.make_vec_env``.

    >>> from vecshm import ShmVecEnv, make_vec_env
    >>> venv = make_vec_env("CartPole-v1", n_envs=2, seed=0, vec_env_cls=ShmVecEnv)
    >>> venv.reset().shape
    (2, 4)
    >>> venv.close()
    """
    env_kwargs = env_kwargs or {}
    vec_env_kwargs = vec_env_kwargs or {}
    monitor_kwargs = monitor_kwargs or {}
    wrapper_kwargs = wrapper_kwargs or {}

    def make_env(rank: int) -> Callable[[], gym.Env]:
        def _init() -> gym.Env:
            if isinstance(env_id, str):
                kwargs = {"render_mode": "rgb_array", **env_kwargs}
                try:
                    env = gym.make(env_id, **kwargs)
                except TypeError:
                    env = gym.make(env_id, **env_kwargs)
            else:
                env = env_id(**env_kwargs)
            if seed is not None:
                env.action_space.seed(seed + rank)  # the env itself is seeded at the first reset
            monitor_path = os.path.join(monitor_dir, str(rank)) if monitor_dir is not None else None
            if monitor_dir is not None:
                os.makedirs(monitor_dir, exist_ok=True)
            env = Monitor(env, filename=monitor_path, **monitor_kwargs)
            if wrapper_class is not None:
                env = wrapper_class(env, **wrapper_kwargs)
            return env

        return _init

    vec_env = (vec_env_cls or DummyVecEnv)([make_env(i + start_index) for i in range(n_envs)], **vec_env_kwargs)
    vec_env.seed(seed)
    return vec_env
