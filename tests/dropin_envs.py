"""Small envs that expose what a vec env passes them: action types, reset keywords, space variants."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class EchoEnv(gym.Env):
    """Reports the type and dtype of each action it gets, and the keywords of each reset."""

    metadata = {"render_modes": []}

    def __init__(self, action_space: spaces.Space | None = None, low: float = -1.0, shape: tuple = (3,)) -> None:
        self.observation_space = spaces.Box(low, 1.0, shape, np.float32)
        self.action_space = action_space if action_space is not None else spaces.Box(-1, 1, (), np.float32)
        self.render_mode = None

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict]:
        super().reset(seed=kwargs.get("seed"))
        return np.zeros(self.observation_space.shape, np.float32), {"reset_keywords": sorted(kwargs)}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        info = {
            "action_type": type(action).__name__,
            "action_dtype": str(getattr(action, "dtype", None)),
            "action_repr": repr(action),
        }
        return np.zeros(self.observation_space.shape, np.float32), 0.0, False, False, info


class StrictResetEnv(EchoEnv):
    """Declares ``reset(self, seed, options)`` with no defaults, as some user envs do."""

    def reset(self, seed, options):  # type: ignore[override]
        return super().reset(seed=seed, options=options)


class SleepEnv(EchoEnv):
    """Sleeps ``action`` seconds per step (Gymnasium's own timeout test env does the same)."""

    def __init__(self) -> None:
        super().__init__(spaces.Box(0.0, 1.0, (), np.float32))

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        time.sleep(action)
        return super().step(action)


def echo(**kwargs: Any):
    return lambda: EchoEnv(**kwargs)


class FailingEnv(EchoEnv):
    """Raises in ``reset`` for seed 1 and in ``step`` for actions >= 1 (as Gymnasium's own error test)."""

    def __init__(self) -> None:
        super().__init__(spaces.Discrete(3))

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict]:
        if kwargs.get("seed") == 1:
            raise ValueError("Error in reset")
        return super().reset(**kwargs)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if action >= 1:
            raise ValueError(f"Error in step with {action}")
        return super().step(action)
