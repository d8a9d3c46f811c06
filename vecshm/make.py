"""``make_vec``: ``gymnasium.make_vec``-style construction of a :class:`ShmVectorEnv`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from vecshm.vector_env import ShmVectorEnv

__all__ = ["make_vec"]


def _make_env(env_id: str, wrappers: Sequence[Callable[[gym.Env], gym.Env]], kwargs: dict[str, Any]) -> gym.Env:
    if env_id.startswith("ALE/"):  # ale-py registers its ids only when asked to (in every worker)
        import ale_py

        gym.register_envs(ale_py)
    env = gym.make(env_id, **kwargs)
    for wrapper in wrappers:
        env = wrapper(env)
    return env


def make_vec(
    id: str,  # noqa: A002  (gymnasium.make_vec's name)
    num_envs: int = 1,
    vector_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Callable[[gym.Env], gym.Env]] | None = None,
    **kwargs: Any,
) -> ShmVectorEnv:
    """``num_envs`` copies of ``gym.make(id, **kwargs)``, each wrapped by ``wrappers`` in order, on shared memory.

    ``vector_kwargs`` go to :class:`ShmVectorEnv` (``autoreset_mode``, ``envs_per_worker``,
    ``batch_size``, ...).

    >>> from vecshm import make_vec
    >>> envs = make_vec("CartPole-v1", num_envs=4, vector_kwargs={"envs_per_worker": 2})
    >>> envs.reset(seed=0)[0].shape
    (4, 4)
    >>> envs.close()
    """
    factory = functools.partial(_make_env, id, tuple(wrappers or ()), kwargs)
    return ShmVectorEnv([factory for _ in range(num_envs)], **(vector_kwargs or {}))
