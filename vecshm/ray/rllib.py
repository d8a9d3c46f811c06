"""RLlib env runners vectorized with ``ShmVectorEnv``: one name to register, RLlib's own config otherwise.

RLlib builds each env runner's envs with ``gymnasium.make_vec``; in ``"vector_entry_point"`` mode it
calls the registered creator with ``num_envs`` in its config and takes the vector env it returns
as is. :func:`register_env` registers such a creator, returning a ``ShmVectorEnv`` of ``num_envs``
copies of the env, with as many worker processes as the runner has CPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym

from vecshm.ray.actor import host_options
from vecshm.vector.shm_vector_env import ShmVectorEnv

__all__ = ["register_env", "VectorEnvCreator"]

EnvSource = str | Callable[[dict], gym.Env]


def make_one(env: EnvSource, env_config: dict) -> gym.Env:
    """One env: ``gym.make(env, **env_config)`` for an env id, else ``env(env_config)`` (RLlib's creator form)."""
    return gym.make(env, **env_config) if isinstance(env, str) else env(env_config)


class VectorEnvCreator:
    """RLlib's env creator: a ``ShmVectorEnv`` when RLlib passes ``num_envs``, else one env (other modes)."""

    def __init__(self, env: EnvSource, vector_options: dict[str, Any]) -> None:
        self.env = env
        self.vector_options = vector_options

    def __call__(self, config: dict) -> gym.Env | gym.vector.VectorEnv:
        env_config = dict(config)
        num_envs = env_config.pop("num_envs", None)
        if num_envs is None:
            return make_one(self.env, env_config)
        factory = partial(make_one, self.env, env_config)
        return ShmVectorEnv([factory] * num_envs, **host_options(num_envs, self.vector_options))


def register_env(name: str, env: EnvSource, **vector_options: Any) -> str:
    """Register ``name`` with Ray Tune's registry so RLlib's env runners vectorize ``env`` with ``ShmVectorEnv``.

    :param name: the name to give ``AlgorithmConfig.environment``
    :param env: a Gymnasium env id (built with ``gym.make(env, **env_config)``) or a creator taking
        RLlib's ``env_config``, as ``ray.tune.registry.register_env`` takes
    :param vector_options: ``ShmVectorEnv`` keywords (``envs_per_worker``, ``step_timeout``, ...)
    :return: ``name``

    Use it with ``.env_runners(num_envs_per_env_runner=N, gym_env_vectorize_mode="vector_entry_point")``::

        from vecshm.ray import register_env
        from ray.rllib.algorithms.ppo import PPOConfig

        register_env("vecshm-cartpole", "CartPole-v1")
        config = (
            PPOConfig()
            .environment("vecshm-cartpole")
            .env_runners(num_env_runners=2, num_envs_per_env_runner=8, gym_env_vectorize_mode="vector_entry_point")
        )
    """
    from ray.tune.registry import register_env as register_with_tune

    register_with_tune(name, VectorEnvCreator(env, vector_options))
    return name
