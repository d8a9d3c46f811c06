"""How ``vecshm.tune`` measures: the env alone in this process, and a plan's env-steps per second
in the caller's loop. The tests give ``tune`` a measurer of their own instead, so that what it
chooses can be checked without a clock.

The caller's loop is the one the user runs: whole steps (``step(actions)``, as SB3 and most
Gymnasium loops do) or async batches (``recv()``, then ``send(actions, env_ids)``); after each
step the caller's own time (a policy's forward pass) is spent busy, on the same cores as the envs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from vecshm.bench.runner import measure_steps
from vecshm.bench.stepper import Stepper
from vecshm.tune.plans import EnvProfile, Plan

__all__ = ["LiveMeasurer", "Measurer", "REFERENCES"]

# What each speed-up is over: the multiprocess vectorizer a user runs now, and the in-process one.
REFERENCES = ("SubprocVecEnv", "in-process")


class Measurer(Protocol):
    """What ``tune`` asks: the env's own cost, and a plan's (or a reference's) rate."""

    def profile(self, seconds: float) -> EnvProfile: ...

    def rate(self, what: Plan | str, seconds: float) -> float: ...

    def close(self) -> None: ...


class LiveMeasurer:
    """Measures on this machine. Each plan is built once, on first use, and kept until ``close()``
    (or ``drop()``), so that later rounds measure it warm, in turn with the others."""

    def __init__(self, factories: list[Callable[[], gym.Env]], caller_seconds: float) -> None:
        self.factories = factories
        self.caller_seconds = caller_seconds
        self.built: dict[Plan | str, Stepper] = {}
        env = factories[0]()
        space = env.action_space
        env.close()
        space.seed(0)
        n = len(factories)
        self.actions = [np.stack([np.asarray(space.sample()) for _ in range(n)]) for _ in range(64)]

    def profile(self, seconds: float) -> EnvProfile:
        env = self.factories[0]()
        try:
            env.reset(seed=0)
            times: list[float] = []
            start = time.perf_counter()
            while time.perf_counter() - start < seconds or len(times) < 10:
                began = time.perf_counter()
                _, _, terminated, truncated, _ = env.step(self.actions[len(times) % 64][0])
                if terminated or truncated:
                    env.reset()
                times.append(time.perf_counter() - began)
        finally:
            env.close()
        mean = float(np.mean(times))
        return EnvProfile(mean, float(np.std(times) / mean) if mean > 0 else 0.0)

    def rate(self, what: Plan | str, seconds: float) -> float:
        if what not in self.built:
            self.built[what] = self._build(what)
            self.built[what].reset()
            measure_steps(self.built[what], self.actions, len(self.factories), min(0.3, seconds))  # warm-up
        steps, elapsed = measure_steps(self.built[what], self.actions, len(self.factories), seconds)
        return steps / elapsed

    def drop(self, what: Plan | str) -> None:
        """Close ``what``: a plan that lost, so that its processes no longer take memory."""
        stepper = self.built.pop(what, None)
        if stepper is not None:
            stepper.close()

    def close(self) -> None:
        for what in list(self.built):
            self.drop(what)

    def _build(self, what: Plan | str) -> Stepper:
        if isinstance(what, str):
            venv = _reference(what, self.factories)
            return self._whole_steps(venv)
        from vecshm import ShmVecEnv, ShmVectorEnv

        if what.batch_size is None:
            return self._whole_steps(ShmVecEnv(self.factories, **what.options()))
        env = ShmVectorEnv(self.factories, **what.options())
        batch, caller = what.batch_size, self.caller_seconds

        def step(actions: np.ndarray) -> Any:
            result = env.recv()
            _busy(caller)
            env.send(actions[:batch], result[-1])
            return result

        return Stepper(env, step, lambda: env.async_reset(seed=0), envs_per_step=batch)

    def _whole_steps(self, venv: Any) -> Stepper:
        caller = self.caller_seconds

        def step(actions: np.ndarray) -> Any:
            result = venv.step(actions)
            _busy(caller)
            return result

        return Stepper(venv, step, venv.reset)


def _reference(name: str, factories: list[Callable[[], gym.Env]]) -> Any:
    """SB3's ``SubprocVecEnv`` and ``DummyVecEnv`` where SB3 is installed, else Gymnasium's
    ``AsyncVectorEnv`` and ``SyncVectorEnv`` (the same roles, stepped the same way)."""
    try:
        from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

        return SubprocVecEnv(factories) if name == "SubprocVecEnv" else DummyVecEnv(factories)
    except ImportError:
        cls = gym.vector.AsyncVectorEnv if name == "SubprocVecEnv" else gym.vector.SyncVectorEnv
        return cls(factories)


def _busy(seconds: float) -> None:
    """The caller's own work: this long on a core, as a policy's forward pass would be."""
    if seconds > 0:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
