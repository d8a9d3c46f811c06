"""Built-in deterministic envs for benchmarks and examples (registered as ``vecshm/...`` ids when
vecshm is imported: :func:`register_envs`, called by ``vecshm/__init__.py``).

They do no simulation on purpose: each isolates one cost a vectorizer adds. Every env is
deterministic given its seed, so two vectorizers fed the same seeds and actions must agree bit
for bit.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["FrameEnv", "DictImageEnv", "BusyEnv", "VectorObsEnv", "register_envs"]


class _EpisodeEnv(gym.Env):
    """Shared episode logic: seeded RNG, random termination, a time limit that truncates."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, episode_length: int = 500, terminate_prob: float = 0.0, render_mode: str | None = None):
        self.episode_length = episode_length
        self.terminate_prob = terminate_prob
        self.render_mode = render_mode
        self._t = 0
        self._rng = np.random.default_rng(0)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self._t += 1
        terminated = bool(self.terminate_prob and self._rng.random() < self.terminate_prob)
        truncated = self._t >= self.episode_length
        reward = float(self._t % 7) * 0.25
        return self._observe(), reward, terminated, truncated, {}

    def _observe(self) -> Any:
        raise NotImplementedError

    def render(self) -> np.ndarray:
        return np.full((32, 32, 3), self._t % 256, dtype=np.uint8)


class FrameEnv(_EpisodeEnv):
    """Zero compute: returns one of a few precomputed 210x160x3 uint8 frames (Atari-sized)."""

    def __init__(self, shape: tuple[int, ...] = (210, 160, 3), n_frames: int = 4, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.observation_space = spaces.Box(0, 255, shape, np.uint8)
        self.action_space = spaces.Discrete(6)
        rng = np.random.default_rng(1234)
        self._frames = rng.integers(0, 256, size=(n_frames, *shape), dtype=np.uint8)

    def _observe(self) -> np.ndarray:
        return self._frames[self._t % len(self._frames)]


class DictImageEnv(_EpisodeEnv):
    """Dict observation: an 84x84x3 uint8 image and a float32 vector."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.observation_space = spaces.Dict(
            {
                "image": spaces.Box(0, 255, (84, 84, 3), np.uint8),
                "vector": spaces.Box(-np.inf, np.inf, (16,), np.float32),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._image = np.random.default_rng(99).integers(0, 256, size=(84, 84, 3), dtype=np.uint8)

    def _observe(self) -> dict[str, np.ndarray]:
        vector = np.full(16, self._t, dtype=np.float32)
        return {"image": self._image, "vector": vector}


class BusyEnv(_EpisodeEnv):
    """Burns ``step_us`` microseconds of CPU per step (or a random amount up to ``max_step_us``)."""

    def __init__(self, step_us: float = 200.0, max_step_us: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step_us = step_us
        self.max_step_us = max_step_us
        self.observation_space = spaces.Box(-np.inf, np.inf, (8,), np.float32)
        self.action_space = spaces.Discrete(2)
        self._busy_rng = np.random.default_rng(7)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        budget = self.step_us if self.max_step_us is None else self._busy_rng.uniform(0, self.max_step_us)
        end = time.perf_counter() + budget * 1e-6
        while time.perf_counter() < end:
            pass
        return super().step(action)

    def _observe(self) -> np.ndarray:
        return np.full(8, self._t, dtype=np.float32)


class VectorObsEnv(_EpisodeEnv):
    """A small float32 vector observation, CartPole-sized, with random terminations."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("terminate_prob", 0.01)
        super().__init__(**kwargs)
        self.observation_space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.action_space = spaces.Discrete(2)

    def _observe(self) -> np.ndarray:
        return self._rng.standard_normal(4).astype(np.float32)


def register_envs() -> None:
    """Register the built-in envs with Gymnasium (idempotent)."""
    entries = {
        "vecshm/Frames-v0": "FrameEnv",
        "vecshm/DictImage-v0": "DictImageEnv",
        "vecshm/Busy-v0": "BusyEnv",
        "vecshm/VectorObs-v0": "VectorObsEnv",
    }
    for env_id, cls in entries.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=f"vecshm.envs:{cls}", disable_env_checker=True)
