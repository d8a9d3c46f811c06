"""``make_vec``: ``gymnasium.make_vec``'s signature and behaviour, with :class:`ShmVectorEnv` as its async mode."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
from gymnasium import error
from gymnasium.envs.registration import EnvSpec, VectorizeMode

from vecshm.vector.shm_vector_env import ShmVectorEnv

__all__ = ["make_vec"]


def _make_env(spec: EnvSpec, wrappers: Sequence[Callable[[gym.Env], gym.Env]], kwargs: dict[str, Any]) -> gym.Env:
    env = gym.make(spec, **kwargs)
    for wrapper in wrappers:
        env = wrapper(env)
    return env


def _find_spec(env_id: str) -> EnvSpec:
    if env_id.startswith("ALE/"):  # ale-py registers its ids only when asked to
        import ale_py

        gym.register_envs(ale_py)
    return gym.spec(env_id)


def _mode(mode: VectorizeMode | str) -> VectorizeMode | None:
    try:
        return VectorizeMode(mode)
    except ValueError:
        return None


def make_vec(
    id: str | EnvSpec,  # noqa: A002  (gymnasium.make_vec's name)
    num_envs: int = 1,
    vectorization_mode: VectorizeMode | str | None = None,
    vector_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Callable[[gym.Env], gym.Env]] | None = None,
    **kwargs: Any,
) -> gym.vector.VectorEnv:
    """``gymnasium.make_vec``, with a :class:`ShmVectorEnv` where it would build an ``AsyncVectorEnv``.

    ``num_envs`` copies of ``gym.make(id, **kwargs)``, each wrapped by ``wrappers`` in order;
    ``vector_kwargs`` go to :class:`ShmVectorEnv` (``autoreset_mode``, ``envs_per_worker``,
    ``batch_size``, ...). ``vectorization_mode`` None (the default here) or ``"async"`` gives a
    ``ShmVectorEnv``. ``"sync"`` and ``"vector_entry_point"`` are what you asked for, so they are
    left to ``gymnasium.make_vec``. As there, ``id`` may be an ``EnvSpec``, and the result's
    ``spec`` records how it was made: ``make_vec(envs.spec)`` makes another like it.

    >>> from vecshm import make_vec
    >>> envs = make_vec("CartPole-v1", num_envs=4, vector_kwargs={"envs_per_worker": 2})
    >>> envs.reset(seed=0)[0].shape
    (4, 4)
    >>> envs.close()
    """
    if isinstance(id, EnvSpec):
        env_spec = id
    elif isinstance(id, str):
        env_spec = _find_spec(id)
    else:
        raise error.Error(f"Invalid id type: {type(id)}. Expected `str` or `EnvSpec`")
    env_spec = copy.deepcopy(env_spec)
    env_kwargs = env_spec.kwargs  # what a spec made by make_vec recorded, as gymnasium.make_vec reads it
    env_spec.kwargs = {}
    num_envs = env_kwargs.pop("num_envs", num_envs)
    vectorization_mode = env_kwargs.pop("vectorization_mode", vectorization_mode)
    vector_kwargs = dict(env_kwargs.pop("vector_kwargs", vector_kwargs) or {})
    wrappers = env_kwargs.pop("wrappers", wrappers)
    if wrappers is None:
        wrappers = []  # the spec records them as given (a tuple stays a tuple), as gymnasium.make_vec's does
    env_kwargs.update(kwargs)
    if vectorization_mode is not None and _mode(vectorization_mode) is not VectorizeMode.ASYNC:
        return gym.make_vec(id, num_envs, vectorization_mode, vector_kwargs, wrappers, **kwargs)  # or its error
    if env_spec.entry_point is None:
        raise error.Error(
            f"Cannot create vectorized environment for {env_spec.id} because it doesn't have an entry point defined."
        )
    factory = functools.partial(_make_env, env_spec, tuple(wrappers), env_kwargs)
    envs = ShmVectorEnv([factory for _ in range(num_envs)], **vector_kwargs)
    made = copy.deepcopy(env_spec)
    made.kwargs = dict(env_kwargs)
    if num_envs != 1:
        made.kwargs["num_envs"] = num_envs
    made.kwargs["vectorization_mode"] = VectorizeMode.ASYNC.value
    if vector_kwargs:
        made.kwargs["vector_kwargs"] = vector_kwargs
    if wrappers:
        made.kwargs["wrappers"] = wrappers
    envs.unwrapped.spec = made
    return envs
