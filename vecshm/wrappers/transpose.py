"""``VecTransposeImage``: HxWxC images to CxHxW (PyTorch's layout), Dict keys and terminal obs included."""

from __future__ import annotations

from copy import deepcopy

import numpy as np
from gymnasium import spaces

from vecshm.sb3 import stands_for
from vecshm.shared.errors import InvalidArgumentError
from vecshm.vec_env.base import VecEnv
from vecshm.wrappers.base import VecEnvObservationWrapper
from vecshm.wrappers.image import is_image_space, is_image_space_channels_first
from vecshm.wrappers.pinned import PinnedArrays, page_locked, page_locker

__all__ = ["VecTransposeImage"]


@stands_for("VecTransposeImage")
class VecTransposeImage(VecEnvObservationWrapper):
    """Re-orders image channels from last to first (SB3 semantics); ``skip=True`` does nothing."""

    def __init__(self, venv: VecEnv, skip: bool = False) -> None:
        if not (is_image_space(venv.observation_space) or isinstance(venv.observation_space, spaces.Dict)):
            raise InvalidArgumentError(
                f"VecTransposeImage needs an image observation space (HxWxC uint8 in [0, 255]) or a Dict with "
                f"image keys, not {venv.observation_space}"
            )
        self.skip = skip
        if skip:
            super().__init__(venv)
            return
        if isinstance(venv.observation_space, spaces.Dict):
            self.image_space_keys = []
            observation_space = deepcopy(venv.observation_space)
            for key, space in observation_space.spaces.items():
                if is_image_space(space):
                    self.image_space_keys.append(key)
                    observation_space.spaces[key] = self.transpose_space(space, key)
        else:
            observation_space = self.transpose_space(venv.observation_space)
        super().__init__(venv, observation_space=observation_space)
        # above a pinned vec env (pin_memory=True): batches transposed into page-locked arrays
        self._page_locked = page_locker(venv)
        self._pinned: dict[str, PinnedArrays] | None = {} if self._page_locked is not None else None

    @staticmethod
    def transpose_space(observation_space: spaces.Box, key: str = "") -> spaces.Box:
        if not is_image_space(observation_space):
            raise InvalidArgumentError(f"The observation space {key} must be an image, not {observation_space}")
        if is_image_space_channels_first(observation_space):
            raise InvalidArgumentError(f"The observation space {key} must follow the channel last convention")
        height, width, channels = observation_space.shape
        return spaces.Box(low=0, high=255, shape=(channels, height, width), dtype=observation_space.dtype)

    @staticmethod
    def transpose_image(image: np.ndarray) -> np.ndarray:
        """One image (HWC) or a batch (NHWC), channels moved first."""
        if len(image.shape) == 3:
            return np.transpose(image, (2, 0, 1))
        return np.transpose(image, (0, 3, 1, 2))

    def transpose_observations(self, observations: np.ndarray | dict) -> np.ndarray | dict:
        if self.skip:
            return observations
        if isinstance(observations, dict):
            observations = deepcopy(observations)
            for key in self.image_space_keys:
                observations[key] = self._transposed(observations[key], key)
            return observations
        return self._transposed(observations, "")

    def _transposed(self, image: np.ndarray, key: str) -> np.ndarray:
        """``transpose_image``: a view, or above a pinned vec env a batch copied into page-locked memory
        (a view's copy to the GPU would first make it contiguous in ordinary memory)."""
        view = self.transpose_image(image)
        if self._pinned is None or view.ndim != 4 or view.shape[0] != self.num_envs:
            return view
        pool = self._pinned.get(key)
        if pool is None or pool.shape != view.shape or pool.dtype != view.dtype:
            pool = self._pinned[key] = PinnedArrays(view.shape, view.dtype, self._page_locked or page_locked)
        out = pool.take()
        np.copyto(out, view)
        return out

    observation = transpose_observations
