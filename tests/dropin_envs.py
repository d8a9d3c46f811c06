"""Small envs that expose what a vec env passes them: action types, reset keywords, space variants."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
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


class DiscreteObservationEnv(EchoEnv):
    """An ``EchoEnv`` whose observations are ``Discrete``: a space of another type than ``EchoEnv``'s Box."""

    def __init__(self) -> None:
        super().__init__()
        self.observation_space = spaces.Discrete(5)

    def reset(self, **kwargs: Any) -> tuple[int, dict]:
        super().reset(**kwargs)
        return 0, {}


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


class LockEnv(EchoEnv):
    """Holds an attribute nothing can pickle."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()


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


class CounterInfoEnv(gym.Env):
    """Infos like ALE's (``lives``, ``episode_frame_number``, ``frame_number``: Python ints), with
    now and then an empty info, an extra float key, or a NumPy-typed value, so that both ways of
    batching infos (per key, and env by env) are taken."""

    metadata = {"render_modes": []}

    def __init__(self, tag: int = 0) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.tag = tag
        self.t = self.frames = 0

    def _info(self) -> dict[str, Any]:
        if (self.t + self.tag) % 11 == 0:
            return {}
        info: dict[str, Any] = {"lives": 3 - self.t // 4, "episode_frame_number": 4 * self.t}
        info["frame_number"] = self.frames
        if self.t % 6 == 5:  # envs in step with each other all have it; others (after a reset) do not
            info["bonus"] = 0.5 * self.t
        if self.tag == 4 and self.t % 4 == 1:
            info["lives"] = np.int32(info["lives"])
        if self.tag == 2 and self.t % 3 == 0:
            info["ok"] = self.t % 2 == 0
        return info

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), self._info()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        self.frames += 4
        obs = np.full(2, self.t / 100, np.float32)
        return obs, float(action), self.t >= 9 + self.tag, False, self._info()


def typed_info(kind: int, t: int, huge: bool = True) -> dict[Any, Any]:
    """Infos of every kind a worker may write: flat numbers of each type the columns hold (kinds 1,
    2, 5, 8), and flat dicts that must be pickled (an int beyond 64 bits, or with ``huge=False`` a
    string, which Gymnasium can batch; ``np.bool_``; a key that is not a string; a dict subclass)."""
    if kind == 1:  # ALE's
        return {"lives": 3 - t % 4, "episode_frame_number": 4 * t, "frame_number": 4 * t + 1000}
    if kind == 2:
        return {
            "i": -t,
            "f": t / 7,
            "nan": float("nan"),
            "neg_zero": -0.0,
            "inf": float("-inf"),
            "b": t % 2 == 0,
            "i8": np.int8(-128),
            "i16": np.int16(t),
            "i32": np.int32(-(2**31)),
            "i64": np.int64(-(2**63)),
            "u8": np.uint8(255),
            "u16": np.uint16(t),
            "u32": np.uint32(2**32 - 1),
            "u64": np.uint64(2**64 - 1),
            "f16": np.float16(0.1),
            "f32": np.float32(t / 3),
            "f32_nan": np.float32("nan"),
            "f64": np.float64(-t / 9),
        }
    if kind == 3:
        return {"lives": 1, "huge": 2**70 + t} if huge else {"lives": 1, "name": f"t{t}"}
    if kind == 4:
        return {"lives": 2, "flag": np.bool_(t % 2)}
    if kind == 5:
        return {"_hidden": t, "lives": 3}
    if kind == 6:
        return {1: t}
    if kind == 7:
        return OrderedDict(lives=t)
    if kind == 8:  # ALE's keys, another type for one of them: another schema
        return {"lives": 1, "episode_frame_number": 2, "frame_number": t + 0.5}
    return {}


class TypedInfoEnv(gym.Env):
    """Returns ``typed_info`` kinds in turn: on even steps every env the same kind, on odd steps
    each env its own, so a batch of infos is sometimes of one schema and sometimes mixed."""

    metadata = {"render_modes": []}
    KINDS = 9

    def __init__(self, tag: int = 0, huge: bool = True) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.tag = tag
        self.huge = huge  # Gymnasium cannot batch an int beyond 64 bits (OverflowError)
        self.t = 0

    def _info(self) -> dict[Any, Any]:
        kind = (self.t // 2 + (self.tag if self.t % 2 else 0)) % self.KINDS
        return typed_info(kind, self.t, self.huge)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 2 * (self.tag % 3)
        return np.zeros(2, np.float32), self._info()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        obs = np.full(2, self.t / 100, np.float32)
        ended = self.t >= 11 + self.tag  # terminated for even tags, truncated for odd ones
        return obs, float(action), ended and self.tag % 2 == 0, ended and self.tag % 2 == 1, self._info()


def doubled_reward(reward: float) -> float:
    return 2 * reward


def reward_doubling_worker(index, env_fn, *protocol) -> None:  # noqa: ANN001 (AsyncVectorEnv's worker arguments)
    """A custom ``AsyncVectorEnv`` worker, as users write them: Gymnasium's own worker on a changed
    env. ``protocol`` is the rest of the installed Gymnasium's worker arguments (pipes, shared
    memory, error queue, autoreset mode and, in newer versions, the ``max_concurrency`` semaphore)."""
    from gymnasium.vector.async_vector_env import _async_worker
    from gymnasium.wrappers import TransformReward

    def doubled() -> gym.Env:
        return TransformReward(env_fn(), doubled_reward)

    _async_worker(index, doubled, *protocol)
