"""How ``vecshm.tune`` measures: the env alone in this process, and a plan's rate in the caller's
loop. The tests give ``tune`` a measurer of their own instead, so that what it chooses can be
checked without a clock.

The caller's loop is the one the user runs: whole steps (``step(actions)``, as SB3 and most
Gymnasium loops do) or async batches (``recv()``, then ``send(actions, ids)``); after each step the
caller's own time (a policy's forward pass) is spent busy, on the same cores as the envs.

A Gymnasium env is measured in env-steps, on ``ShmVecEnv``, against SB3's ``SubprocVecEnv`` and
``DummyVecEnv`` (Gymnasium's ``AsyncVectorEnv`` and ``SyncVectorEnv`` without SB3). A PettingZoo
parallel env is measured in copy-steps (every agent of a copy stepped once), on ``AgentVecEnv``,
whose async batches are whole copies, against SuperSuit on a process per core and in this process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from vecshm.bench.runner import measure_steps
from vecshm.bench.stepper import Stepper
from vecshm.bench.workloads import step_time
from vecshm.shared.affinity import usable_cores
from vecshm.tune.plans import EnvProfile, Plan
from vecshm.user_env import is_parallel_env

__all__ = ["REFERENCES", "AgentMeasurer", "GymMeasurer", "Measurer", "live_measurer"]

# What each speed-up is over: the multiprocess vectorizer a user runs now, and the in-process one.
REFERENCES = ("SubprocVecEnv", "in-process")


class Measurer(Protocol):
    """What ``tune`` asks: the env's own cost, and a plan's (or a reference's) rate.
    ``names`` says which system stands for each of :data:`REFERENCES` (those it lacks: not measured),
    and ``unit`` what a step counts."""

    names: dict[str, str]
    unit: str
    noun: str  # what the plans run: "envs", or "copies" of a PettingZoo env

    def profile(self, seconds: float) -> EnvProfile: ...

    def rate(self, what: Plan | str, seconds: float) -> float: ...

    def close(self) -> None: ...


def live_measurer(factories: list[Callable[[], Any]], caller_seconds: float) -> GymMeasurer | AgentMeasurer:
    """The measurer for what ``factories`` make: a Gymnasium env, or a PettingZoo parallel env."""
    env = factories[0]()
    if is_parallel_env(env):
        return AgentMeasurer(env, len(factories), caller_seconds)
    env.close()
    return GymMeasurer(factories, caller_seconds)


class _Live:
    """Measures on this machine. Each plan is built once, on first use, and kept until ``close()``
    (or ``drop()``), so that later rounds measure it warm, in turn with the others."""

    names: dict[str, str]
    unit: str
    noun: str

    def __init__(self, num_envs: int, caller_seconds: float, actions: list[np.ndarray]) -> None:
        self.num_envs = num_envs
        self.caller_seconds = caller_seconds
        self.actions = actions
        self.built: dict[Plan | str, Stepper] = {}

    def rate(self, what: Plan | str, seconds: float) -> float:
        if what not in self.built:
            self.built[what] = self.build(what)
            self.built[what].reset()
            measure_steps(self.built[what], self.actions, self.num_envs, min(0.3, seconds))  # warm-up
        steps, elapsed = measure_steps(self.built[what], self.actions, self.num_envs, seconds)
        return steps / elapsed

    def drop(self, what: Plan | str) -> None:
        """Close ``what``: a plan that lost, so that its processes no longer take memory."""
        stepper = self.built.pop(what, None)
        if stepper is not None:
            stepper.close()

    def close(self) -> None:
        for what in list(self.built):
            self.drop(what)

    def build(self, what: Plan | str) -> Stepper:
        raise NotImplementedError

    def whole_steps(self, venv: Any, envs_per_step: int | None = None) -> Stepper:
        caller = self.caller_seconds

        def step(actions: np.ndarray) -> Any:
            result = venv.step(actions)
            _busy(caller)
            return result

        return Stepper(venv, step, venv.reset, envs_per_step=envs_per_step)

    def batches(self, venv: Any, batch: int, rows_per_id: int = 1) -> Stepper:
        """``venv``'s async batches of ``batch`` ids (an id: an env, or a copy of ``rows_per_id`` agents)."""
        caller = self.caller_seconds

        def step(actions: np.ndarray) -> Any:
            result = venv.recv()
            _busy(caller)
            venv.send(actions[: batch * rows_per_id], result[-1])
            return result

        return Stepper(venv, step, venv.async_reset, envs_per_step=batch)


class GymMeasurer(_Live):
    """A Gymnasium env's plans on ``ShmVecEnv`` (whole steps) and ``ShmVectorEnv`` (async batches)."""

    unit = "env-steps/s"
    noun = "envs"

    def __init__(self, factories: list[Callable[[], gym.Env]], caller_seconds: float) -> None:
        env = factories[0]()
        space = env.action_space
        env.close()
        space.seed(0)
        n = len(factories)
        super().__init__(
            n, caller_seconds, [np.stack([np.asarray(space.sample()) for _ in range(n)]) for _ in range(64)]
        )
        self.factories = factories
        try:
            import stable_baselines3  # noqa: F401

            self.names = {"SubprocVecEnv": "SB3 SubprocVecEnv", "in-process": "SB3 DummyVecEnv"}
        except ImportError:
            self.names = {"SubprocVecEnv": "Gymnasium AsyncVectorEnv", "in-process": "Gymnasium SyncVectorEnv"}

    def profile(self, seconds: float) -> EnvProfile:
        env = self.factories[0]()
        try:
            env.reset(seed=0)
            return _timed(lambda k: _done(env.step(self.actions[k % 64][0])) and env.reset(), seconds)
        finally:
            env.close()

    def build(self, what: Plan | str) -> Stepper:
        if isinstance(what, str):
            return self.whole_steps(_reference(self.names[what], self.factories))
        from vecshm import ShmVecEnv, ShmVectorEnv

        if what.batch_size is None:
            return self.whole_steps(ShmVecEnv(self.factories, **what.options()))
        return self.batches(ShmVectorEnv(self.factories, **what.options()), what.batch_size)


class AgentMeasurer(_Live):
    """A PettingZoo parallel env's plans on ``AgentVecEnv``, in copies (every agent a row)."""

    noun = "copies"

    def __init__(self, parallel_env: Any, num_copies: int, caller_seconds: float) -> None:
        self.parallel_env = parallel_env
        self.agents = list(parallel_env.possible_agents)
        space = parallel_env.action_space(self.agents[0])
        space.seed(0)
        rows = num_copies * len(self.agents)
        super().__init__(
            num_copies, caller_seconds, [np.stack([np.asarray(space.sample()) for _ in range(rows)]) for _ in range(64)]
        )
        self.unit = f"copy-steps/s ({len(self.agents)} agents each)"
        try:
            import supersuit  # noqa: F401

            cores = len(usable_cores())
            self.names = {"SubprocVecEnv": f"SuperSuit (num_cpus={cores})", "in-process": "SuperSuit (num_cpus=0)"}
        except ImportError:
            self.names = {}  # SuperSuit is what PettingZoo users run now; without it, no reference

    def profile(self, seconds: float) -> EnvProfile:
        env = self.parallel_env
        env.reset(seed=0)

        def step(k: int) -> None:
            row = self.actions[k % 64]
            env.step({agent: row[j] for j, agent in enumerate(self.agents) if agent in env.agents})
            if not env.agents:
                env.reset()

        return _timed(step, seconds)

    def build(self, what: Plan | str) -> Stepper:
        if isinstance(what, str):
            import supersuit as ss

            cpus = int(self.names[what].split("=")[1].rstrip(")"))
            rows = ss.pettingzoo_env_to_vec_env_v1(self.parallel_env)
            venv = ss.concat_vec_envs_v1(rows, self.num_envs, num_cpus=cpus, base_class="stable_baselines3")
            return self.whole_steps(venv, envs_per_step=self.num_envs)
        from vecshm.pettingzoo import AgentVecEnv

        venv = AgentVecEnv(self.parallel_env, self.num_envs, **what.options())
        if what.batch_size is None:
            return self.whole_steps(venv, envs_per_step=self.num_envs)
        return self.batches(venv, what.batch_size, rows_per_id=len(self.agents))


def _timed(step: Callable[[int], Any], seconds: float) -> EnvProfile:
    """A step's mean time and spread over about ``seconds`` (the bench's :func:`step_time`)."""
    return EnvProfile(*step_time(step, seconds))


def _done(result: tuple) -> bool:
    """Whether a Gymnasium step's episode ended."""
    return bool(result[2] or result[3])


def _reference(name: str, factories: list[Callable[[], gym.Env]]) -> Any:
    if name == "SB3 SubprocVecEnv":
        from stable_baselines3.common.vec_env import SubprocVecEnv

        return SubprocVecEnv(factories)
    if name == "SB3 DummyVecEnv":
        from stable_baselines3.common.vec_env import DummyVecEnv

        return DummyVecEnv(factories)
    cls = gym.vector.AsyncVectorEnv if name == "Gymnasium AsyncVectorEnv" else gym.vector.SyncVectorEnv
    return cls(factories)


def _busy(seconds: float) -> None:
    """The caller's own work: this long on a core, as a policy's forward pass would be."""
    if seconds > 0:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
