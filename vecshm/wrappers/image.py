"""Image-space checks with SB3's rules (``stable_baselines3.common.preprocessing``), without torch."""

from __future__ import annotations

import warnings

import numpy as np
from gymnasium import spaces

__all__ = ["is_image_space", "is_image_space_channels_first"]


def is_image_space_channels_first(observation_space: spaces.Box) -> bool:
    """True when the smallest dimension comes first (CxHxW)."""
    smallest_dimension = np.argmin(observation_space.shape)
    if smallest_dimension == 1:
        warnings.warn(
            "Treating image space as channels-last, while second dimension was smallest of the three.", stacklevel=2
        )
    return bool(smallest_dimension == 0)


def is_image_space(
    observation_space: spaces.Space, check_channels: bool = False, normalized_image: bool = False
) -> bool:
    """A 3-d uint8 Box with bounds [0, 255] (unless ``normalized_image``), optionally with 1, 3 or 4 channels."""
    check_dtype = check_bounds = not normalized_image
    if isinstance(observation_space, spaces.Box) and len(observation_space.shape) == 3:
        if check_dtype and observation_space.dtype != np.uint8:
            return False
        incorrect_bounds = np.any(observation_space.low != 0) or np.any(observation_space.high != 255)
        if check_bounds and incorrect_bounds:
            return False
        if not check_channels:
            return True
        if is_image_space_channels_first(observation_space):
            n_channels = observation_space.shape[0]
        else:
            n_channels = observation_space.shape[-1]
        return n_channels in [1, 3, 4]
    return False
