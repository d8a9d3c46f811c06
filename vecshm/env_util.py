"""Helpers shared by the vec envs: wrapper checks."""

from __future__ import annotations

import gymnasium as gym

__all__ = ["unwrap_wrapper", "is_wrapped"]


def unwrap_wrapper(env: gym.Env, wrapper_class: type[gym.Wrapper]) -> gym.Wrapper | None:
    """The first wrapper of type ``wrapper_class`` around ``env``, or None."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, wrapper_class):
            return env
        env = env.env
    return None


def is_wrapped(env: gym.Env, wrapper_class: type[gym.Wrapper]) -> bool:
    return unwrap_wrapper(env, wrapper_class) is not None
