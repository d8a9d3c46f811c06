"""Frame stacking over the channel axis, with SB3's ``StackedObservations`` interface."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Generic, TypeVar, cast

import numpy as np
from gymnasium import spaces

from vecshm.sb3 import stands_for
from vecshm.shared.errors import InvalidArgumentError
from vecshm.wrappers.image import is_image_space, is_image_space_channels_first
from vecshm.wrappers.pinned import Allocate, PinnedArrays

__all__ = ["StackedObservations"]

TObs = TypeVar("TObs", np.ndarray, dict[str, np.ndarray])


@stands_for("StackedObservations")
class StackedObservations(Generic[TObs]):
    """The last ``n_stack`` observations of each env, concatenated on the channel axis.

    Channels first or last is detected for image spaces (or set with ``channels_order``; per key
    for Dict spaces). Each update writes one new stacked array (shifted copy plus the new frame),
    so arrays handed out earlier are never modified; with ``pinned`` (what allocates page-locked
    arrays, where the vec env below has ``pin_memory``: see :mod:`vecshm.wrappers.pinned`) those
    arrays are page-locked, from a pool that reuses only unreferenced ones.
    """

    def __init__(
        self,
        num_envs: int,
        n_stack: int,
        observation_space: spaces.Box | spaces.Dict,
        channels_order: str | Mapping[str, str | None] | None = None,
        *,
        pinned: Allocate | None = None,
    ) -> None:
        if not isinstance(n_stack, (int, np.integer)) or n_stack < 1:
            raise InvalidArgumentError(f"n_stack must be a positive integer, got {n_stack!r}")
        self.n_stack = n_stack
        self.observation_space = observation_space
        if isinstance(observation_space, spaces.Dict):
            if not isinstance(channels_order, Mapping):
                channels_order = {key: channels_order for key in observation_space.spaces}
            unknown = set(channels_order) - set(observation_space.spaces)
            if unknown:
                raise InvalidArgumentError(
                    f"channels_order names keys {sorted(unknown)} that the Dict space does not have"
                )
            self.sub_stacked_observations = {
                key: StackedObservations(
                    num_envs, n_stack, cast(spaces.Box, subspace), channels_order.get(key), pinned=pinned
                )
                for key, subspace in observation_space.spaces.items()
            }
            self.stacked_observation_space: spaces.Space = spaces.Dict(
                {key: sub.stacked_observation_space for key, sub in self.sub_stacked_observations.items()}
            )
        elif isinstance(observation_space, spaces.Box):
            if isinstance(channels_order, Mapping):
                raise TypeError("When the observation space is Box, channels_order can't be a dict.")
            self.channels_first, self.stack_dimension, self.stacked_shape, self.repeat_axis = self.compute_stacking(
                n_stack, observation_space, channels_order
            )
            low = np.repeat(observation_space.low, n_stack, axis=self.repeat_axis)
            high = np.repeat(observation_space.high, n_stack, axis=self.repeat_axis)
            self.stacked_observation_space = spaces.Box(low=low, high=high, dtype=observation_space.dtype)
            self.stacked_obs = np.zeros((num_envs, *self.stacked_shape), dtype=observation_space.dtype)
            # page-locked stacks (``pinned``: the vec env below has pin_memory), for the copy to the GPU
            self._pinned = PinnedArrays(self.stacked_obs.shape, self.stacked_obs.dtype, pinned) if pinned else None
        else:
            raise TypeError(
                f"StackedObservations only supports Box and Dict as observation spaces. "
                f"{observation_space} was provided."
            )

    @staticmethod
    def compute_stacking(
        n_stack: int, observation_space: spaces.Box, channels_order: str | None = None
    ) -> tuple[bool, int, tuple[int, ...], int]:
        """``(channels_first, stack_dimension, stacked_shape, repeat_axis)`` for a Box space."""
        if channels_order is None:
            channels_first = is_image_space(observation_space) and is_image_space_channels_first(observation_space)
        elif channels_order in ("last", "first"):
            channels_first = channels_order == "first"
        else:
            raise InvalidArgumentError(
                f"`channels_order` must be one of following: 'last', 'first', got {channels_order!r}"
            )
        stack_dimension = 1 if channels_first else -1
        repeat_axis = 0 if channels_first else -1
        stacked_shape = list(observation_space.shape)
        stacked_shape[repeat_axis] *= n_stack
        return channels_first, stack_dimension, tuple(stacked_shape), repeat_axis

    def _newest(self, stack: np.ndarray, width: int) -> np.ndarray:
        """The slot of the newest frame (the last ``width`` channels)."""
        return stack[:, -width:, ...] if self.channels_first else stack[..., -width:]

    def reset(self, observation: TObs) -> TObs:
        """Clear the stacks and put the reset observation in the newest slot."""
        if isinstance(observation, dict):
            return {key: self.sub_stacked_observations[key].reset(obs) for key, obs in observation.items()}  # type: ignore[return-value]
        if self._pinned is None:
            self.stacked_obs = np.zeros_like(self.stacked_obs)
        else:
            self.stacked_obs = self._pinned.take()
            self.stacked_obs[...] = 0
        self._newest(self.stacked_obs, observation.shape[self.stack_dimension])[...] = observation
        return self.stacked_obs

    def update(
        self, observations: TObs, dones: np.ndarray, infos: list[dict[str, Any]]
    ) -> tuple[TObs, list[dict[str, Any]]]:
        """Push new observations; stack each ended episode's ``terminal_observation`` the same way."""
        if isinstance(observations, dict):
            return self._update_dict(observations, dones, infos)  # type: ignore[return-value]
        width = observations.shape[self.stack_dimension]
        old = self.stacked_obs
        new = np.empty_like(old) if self._pinned is None else self._pinned.take()
        if self.channels_first:
            new[:, :-width, ...] = old[:, width:, ...]
        else:
            new[..., :-width] = old[..., width:]
        for env_idx in np.flatnonzero(dones):
            if "terminal_observation" in infos[env_idx]:
                history = new[env_idx, :-width, ...] if self.channels_first else new[env_idx, ..., :-width]
                infos[env_idx]["terminal_observation"] = np.concatenate(
                    (history, infos[env_idx]["terminal_observation"]), axis=self.repeat_axis
                )
            else:
                warnings.warn("VecFrameStack wrapping a VecEnv without terminal_observation info", stacklevel=3)
            new[env_idx] = 0
        self._newest(new, width)[...] = observations
        self.stacked_obs = new
        return new, infos

    def _update_dict(
        self, observations: dict[str, np.ndarray], dones: np.ndarray, infos: list[dict[str, Any]]
    ) -> tuple[dict[str, np.ndarray], list[dict[str, Any]]]:
        stacked = {}
        for key, obs in observations.items():
            sub_infos = [
                {"terminal_observation": info["terminal_observation"][key]} if "terminal_observation" in info else {}
                for info in infos
            ]
            stacked[key], sub_infos = self.sub_stacked_observations[key].update(obs, dones, sub_infos)
            for info, sub_info in zip(infos, sub_infos):
                if "terminal_observation" in info:
                    info["terminal_observation"][key] = sub_info["terminal_observation"]
        return stacked, infos
