"""In-process vec env: the reference the engine is tested against, and a debugging fallback."""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from copy import deepcopy
from typing import Any

import gymnasium as gym
import numpy as np

from vecshm.parent.core.actions import is_per_env
from vecshm.sb3 import stands_for
from vecshm.shared.env_util import is_wrapped
from vecshm.shared.layout import assemble, flatten, leaves
from vecshm.vec_env.base import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn, stack_dynamic

__all__ = ["DummyVecEnv"]


def check_for_nested_spaces(obs_space: gym.spaces.Space) -> None:
    """SB3's ``DummyVecEnv`` refuses a Dict or Tuple inside a Dict or Tuple (its buffers and
    policies are one level deep), with this error; ``ShmVecEnv`` takes them, as ``SubprocVecEnv`` does."""
    if isinstance(obs_space, (gym.spaces.Dict, gym.spaces.Tuple)):
        sub_spaces = obs_space.spaces.values() if isinstance(obs_space, gym.spaces.Dict) else obs_space.spaces
        if any(isinstance(sub_space, (gym.spaces.Dict, gym.spaces.Tuple)) for sub_space in sub_spaces):
            raise NotImplementedError(
                "Nested observation spaces are not supported (Tuple/Dict space inside Tuple/Dict space)."
            )


@stands_for("DummyVecEnv")
class DummyVecEnv(VecEnv):
    """Steps each env in turn in this process, with SB3 ``DummyVecEnv`` semantics."""

    actions: np.ndarray

    def __init__(self, env_fns: list[Callable[[], gym.Env]]) -> None:
        self.envs = [fn() for fn in env_fns]
        if len({id(env.unwrapped) for env in self.envs}) != len(self.envs):
            raise ValueError(
                "You tried to create multiple environments, but the function to create them returned the same "
                "instance instead of creating different objects. You are probably using "
                "`make_vec_env(lambda: env)` or `DummyVecEnv([lambda: env] * n_envs)`. Replace `lambda: env` by "
                "a function that creates a new env at every call (using `gym.make()` for instance)."
            )
        env = self.envs[0]
        super().__init__(len(env_fns), env.observation_space, env.action_space)
        check_for_nested_spaces(env.observation_space)
        self._leaves = leaves(env.observation_space)
        self._single_leaf = not isinstance(env.observation_space, (gym.spaces.Dict, gym.spaces.Tuple))
        # SB3's keys and buffers: a Dict's keys, a Tuple's indices, or None (spaces are one level deep)
        self.keys = [leaf.path[0] if leaf.path else None for leaf in self._leaves]
        self.buf_obs = OrderedDict(
            (key, np.zeros((self.num_envs, *leaf.shape), leaf.dtype)) for key, leaf in zip(self.keys, self._leaves)
        )
        self.buf_dones = np.zeros((self.num_envs,), dtype=bool)
        self.buf_rews = np.zeros((self.num_envs,), dtype=np.float32)
        self.buf_infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        self.metadata = env.metadata

    def step_async(self, actions: np.ndarray) -> None:
        self.actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        for env_idx in range(self.num_envs):
            obs, self.buf_rews[env_idx], terminated, truncated, self.buf_infos[env_idx] = self.envs[env_idx].step(
                self._action(env_idx)
            )
            self.buf_dones[env_idx] = terminated or truncated
            self.buf_infos[env_idx]["TimeLimit.truncated"] = truncated and not terminated
            if self.buf_dones[env_idx]:
                self.buf_infos[env_idx]["terminal_observation"] = obs
                obs, self.reset_infos[env_idx] = self.envs[env_idx].reset()
            self._save_obs(env_idx, obs)
        return self._obs_from_buf(), np.copy(self.buf_rews), np.copy(self.buf_dones), deepcopy(self.buf_infos)

    def _action(self, env_idx: int) -> Any:
        structured = isinstance(self.action_space, (gym.spaces.Dict, gym.spaces.Tuple))
        if not structured or is_per_env(self.action_space, self.actions, self.num_envs):
            return self.actions[env_idx]  # a row of the batch, or one env's action as SB3 takes them
        return assemble(self.action_space, [a[env_idx] for a in flatten(self.action_space, self.actions)])

    def reset(self) -> VecEnvObs:
        for env_idx in range(self.num_envs):
            maybe_options = {"options": self._options[env_idx]} if self._options[env_idx] else {}
            obs, self.reset_infos[env_idx] = self.envs[env_idx].reset(seed=self._seeds[env_idx], **maybe_options)
            self._save_obs(env_idx, obs)
        self._reset_seeds()
        self._reset_options()
        return self._obs_from_buf()

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it is `rgb_array` to obtain images.",
                stacklevel=2,
            )
            return [None for _ in self.envs]
        return [env.render() for env in self.envs]  # type: ignore[misc]

    def _save_obs(self, env_idx: int, obs: Any) -> None:
        if self._single_leaf:
            self.buf_obs[None][env_idx] = obs
            return
        for buffer, value in zip(self.buf_obs.values(), flatten(self.observation_space, obs)):
            buffer[env_idx] = value

    def _obs_from_buf(self) -> VecEnvObs:
        batches = [
            stack_dynamic(leaf.space, list(buf)) if leaf.dynamic else np.copy(buf)
            for leaf, buf in zip(self._leaves, self.buf_obs.values())
        ]
        return batches[0] if self._single_leaf else assemble(self.observation_space, batches)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return [env.get_wrapper_attr(attr_name) for env in self._get_target_envs(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        for env in self._get_target_envs(indices):
            setattr(env, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        return [
            env.get_wrapper_attr(method_name)(*method_args, **method_kwargs) for env in self._get_target_envs(indices)
        ]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [is_wrapped(env, wrapper_class) for env in self._get_target_envs(indices)]

    def _get_target_envs(self, indices: VecEnvIndices) -> list[gym.Env]:
        return [self.envs[i] for i in self._get_indices(indices)]
