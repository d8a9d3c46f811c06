"""Envs with one fault planted each, for ``vecshm.check``'s tests: one module, so that a worker
process started afresh imports them by name (and gets this module's values as the file sets them)."""

from __future__ import annotations

import os
import random
import threading

import gymnasium as gym
import numpy as np
from gymnasium import spaces

SCALE = 1.0  # read at every step (ReadsScaleAtStep); a test changes it in this process only
BONUS = 0.0  # read once, when the env is built (ReadsBonusAtInit)
PARENT_PID = os.getpid()  # the process that imported this module first


class Walk(gym.Env):
    """A deterministic walk: seeded start, actions move it, episodes of ``length`` steps. Every
    planted fault below changes one thing of it."""

    def __init__(self, length: int = 7) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Discrete(3)
        self.length = length
        self.t, self.x = 0, 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.x = 0, float(self.np_random.uniform(-1, 1))
        return self.observation(), {"start": self.x}

    def step(self, action):
        self.t += 1
        self.x += (int(action) - 1) * 0.25
        terminated = self.t >= self.length
        return self.observation(), self.reward(), terminated, False, self.info()

    def observation(self):
        return np.array([self.t, self.x], np.float32)

    def reward(self):
        return self.x

    def info(self):
        return {"t": self.t}


# state this process set up, which a worker started afresh does not have
class ReadsScaleAtStep(Walk):
    def reward(self):
        return self.x * SCALE


class ReadsBonusAtInit(Walk):
    def __init__(self) -> None:
        super().__init__()
        self.bonus = BONUS

    def reward(self):
        return self.x + self.bonus


# different in every worker process, fork included
class KnowsItsProcess(Walk):
    def reward(self):
        return float(os.getpid() == PARENT_PID)


# not deterministic by itself
class PythonRandom(Walk):
    def reward(self):
        return self.x + random.random()


class GlobalNumpyRandom(Walk):
    def observation(self):
        return np.array([self.t, self.x + np.random.rand()], np.float32)


class UnseededGenerator(Walk):
    def __init__(self) -> None:
        super().__init__()
        self.rng = np.random.default_rng()

    def reward(self):
        return float(self.rng.random())


# values the peers cast or refuse
class Float64Observation(Walk):
    def observation(self):
        return np.array([self.t, self.x], np.float64)


class ListObservation(Walk):
    def observation(self):
        return [float(self.t), self.x]


class IntegerFlags(Walk):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, int(terminated), 0, info


class ArrayReward(Walk):
    def reward(self):
        return np.array([self.x])


class OutsideSpace(Walk):
    def __init__(self) -> None:
        super().__init__()
        self.observation_space = spaces.Box(-1, 1, (2,), np.float32)  # t grows past 1


# values that cannot cross processes
class LockInInfo(Walk):
    def info(self):
        return {"t": self.t, "guard": threading.Lock()}


class GeneratorInInfo(Walk):
    def info(self):
        return {"t": self.t, "upcoming": (k for k in range(3))}


class LockInSpace(Walk):
    def __init__(self) -> None:
        super().__init__()
        self.observation_space = LockedBox(-np.inf, np.inf, (2,), np.float32)


class LockedBox(spaces.Box):
    """A space that holds a lock: it cannot be pickled."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()


class FactoryWithLock:
    """A factory object holding a lock (a handle it meant to share with its envs)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self) -> gym.Env:
        return Walk()
