"""One copy of a PettingZoo ``ParallelEnv`` as one env of the engine, its agents as rows.

In its worker, each copy runs as an :class:`AgentRows`: a Gymnasium env whose observation holds
every agent's row, in ``possible_agents`` order: its observation, reward, flags, and whether the
agent is present. A step's rows then travel in the shared segment as any observation does,
written once by the worker and read in place by the parent, and nothing about the engine changes:
a copy is one of its envs, so it steps as one, an async batch never splits it, and the engine
resets it (SAME_STEP or NEXT_STEP, as the facade asks) once all of its agents are done, which
:class:`AgentRows` reports as the copy's end.

An agent absent from a step (dead, or not yet joined) has a zero row, reward 0, no flags, and
``present`` False. The spaces are checked in the parent before any process starts
(:func:`agent_spaces`): every agent must share one observation and one action space.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from vecshm.shared import sharing
from vecshm.shared.errors import NotAParallelEnvError, SpaceMismatchError
from vecshm.shared.layout import RowItems

__all__ = ["AgentRows", "CopyOf", "EnvCopy", "agent_spaces", "is_wrapped_by", "ROW_FIELDS"]

ROW_FIELDS = ("obs", "reward", "terminated", "truncated", "present")  # the keys of a copy's observation


def agent_spaces(parallel_env: Any) -> tuple[list[str], gym.Space, gym.Space]:
    """``parallel_env``'s agents (``possible_agents``), and the observation and action space they
    share; a ``SpaceMismatchError`` naming two agents whose spaces differ (the rows of one array
    need one space: SuperSuit's padding wrappers make them one)."""
    agents = getattr(parallel_env, "possible_agents", None)
    if not callable(getattr(parallel_env, "observation_space", None)) or agents is None:
        raise NotAParallelEnvError(
            f"expected a PettingZoo ParallelEnv (with possible_agents and observation_space(agent)), got "
            f"{type(parallel_env).__name__}; an AEC env converts with pettingzoo.utils.conversions.aec_to_parallel "
            "(concat_vec_envs_v1 also takes a Gymnasium env)"
        )
    agents = list(agents)
    if not agents:
        raise ValueError("the ParallelEnv has no possible_agents: there would be no rows")
    first = agents[0]
    for kind, space_of, pad in (
        ("observation", parallel_env.observation_space, "supersuit.pad_observations_v0"),
        ("action", parallel_env.action_space, "supersuit.pad_action_space_v0"),
    ):
        space = space_of(first)
        for agent in agents[1:]:
            other = space_of(agent)
            if other != space:
                raise SpaceMismatchError(
                    f"agents {first!r} and {agent!r} have different {kind} spaces ({space} and {other}): "
                    f"every agent is a row of one array, so all need one {kind} space; wrap the env in {pad} "
                    "(before vecshm.pettingzoo) to pad them to one"
                )
    return agents, parallel_env.observation_space(first), parallel_env.action_space(first)


class EnvCopy:
    """An env factory for the engine: a fresh copy of one env (pickled once, here). SuperSuit
    copies the env the same way, with cloudpickle."""

    def __init__(self, env: Any) -> None:
        with sharing.collecting() as shares:
            self.blob = cloudpickle.dumps(env)
        self.shares = tuple(shares)  # the vecshm.share segments its arrays name, for the workers

    def __call__(self) -> Any:
        return cloudpickle.loads(self.blob)

    def __getstate__(self) -> dict[str, Any]:
        sharing.note(self.shares)  # (pickled again, for a worker: its segments go with it)
        return self.__dict__


class CopyOf(EnvCopy):
    """A fresh copy of one ``ParallelEnv``, as :class:`AgentRows`."""

    def __call__(self) -> AgentRows:
        return AgentRows(super().__call__())


class AgentRows(gym.Env):
    """A ``ParallelEnv`` whose observation is every agent's row (see the module)."""

    def __init__(self, parallel_env: Any) -> None:
        self.par_env = parallel_env
        self.possible_agents, agent_obs, agent_act = agent_spaces(parallel_env)
        n = len(self.possible_agents)
        self.observation_space = spaces.Dict(
            {
                "obs": batch_space(agent_obs, n),
                "reward": spaces.Box(-np.inf, np.inf, (n,), np.float64),  # the SB3 facade casts, as DummyVecEnv
                "terminated": spaces.MultiBinary(n),
                "truncated": spaces.MultiBinary(n),
                "present": spaces.MultiBinary(n),
            }
        )
        self.action_space = batch_space(agent_act, n)
        self.metadata = dict(getattr(parallel_env, "metadata", {}) or {})
        self.render_mode = getattr(getattr(parallel_env, "unwrapped", parallel_env), "render_mode", None)
        self._agent_obs = agent_obs
        self._by_row = isinstance(agent_obs, spaces.Box)  # one array per agent: written row by row
        self._zero = next(iter(iterate(self.observation_space["obs"], create_empty_array(agent_obs, 1, np.zeros))))
        # the rows are written into the same arrays each step: the worker copies them into the segment
        self._rows: dict[str, Any] = {
            "obs": create_empty_array(agent_obs, n, np.zeros),
            "present": np.zeros(n, np.int8),  # (MultiBinary's dtype)
            "reward": np.zeros(n, np.float64),
            "terminated": np.zeros(n, np.int8),
            "truncated": np.zeros(n, np.int8),
        }
        self._split_actions: Callable[[Any], list[Any]] = (
            list if isinstance(self.action_space, (spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary))
            else lambda actions: list(iterate(self.action_space, actions))
        )  # fmt: skip

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        observations, infos = self.par_env.reset(seed=seed, options=options)
        rows = self._write(observations, {}, {}, {})
        return rows, self._infos(infos)

    def step(self, actions: Any) -> tuple[dict, float, bool, bool, dict]:
        """Step the agents present on their rows of ``actions``; the copy ends once every agent the
        step returned is terminated or truncated (SuperSuit's rule: an env with no agent left ends)."""
        live = set(self.par_env.agents)
        rows = self._split_actions(actions)
        chosen = {agent: rows[i] for i, agent in enumerate(self.possible_agents) if agent in live}
        try:
            observations, rewards, terminations, truncations, infos = self.par_env.step(chosen)
        except Exception as error:
            self._name_bad_actions(chosen, error)
            raise
        ended = np.fromiter(terminations.values(), bool, len(terminations))
        cut = np.fromiter(truncations.values(), bool, len(truncations))
        done = bool((ended | cut).all())
        return self._write(observations, rewards, terminations, truncations), 0.0, done, False, self._infos(infos)

    def _name_bad_actions(self, chosen: dict[str, Any], error: Exception) -> None:
        """Raise an error naming the agents whose action lies outside their action space, if any
        (the env's own ``error`` is its cause)."""
        space = self.par_env.action_space
        bad = [agent for agent, action in chosen.items() if not _contains(space(agent), action)]
        if bad:
            shown = ", ".join(f"agent {agent!r}: {chosen[agent]!r}" for agent in bad[:3])
            raise ValueError(
                f"actions outside their agent's action space {space(bad[0])} ({shown}); the env raised "
                f"{type(error).__name__}: {error}"
            ) from error

    def _write(self, observations: dict, rewards: dict, terminations: dict, truncations: dict) -> dict[str, Any]:
        """The rows of one step (or reset) in this env's arrays; absent agents' rows are zeros."""
        rows, agents, zero = self._rows, self.possible_agents, self._zero
        present = [agent in observations for agent in agents]
        items = [observations[agent] if here else zero for agent, here in zip(agents, present)]
        if self._by_row:  # each agent's array goes straight into the segment (see RowItems)
            rows["obs"] = RowItems(items)
        else:
            rows["obs"] = concatenate(self._agent_obs, items, rows["obs"])
        rows["reward"][:] = [rewards.get(agent, 0) for agent in agents]
        rows["terminated"][:] = [bool(terminations.get(agent, False)) for agent in agents]
        rows["truncated"][:] = [bool(truncations.get(agent, False)) for agent in agents]
        rows["present"][:] = present
        return dict(rows)

    def _infos(self, infos: dict[str, Any]) -> dict[str, Any]:
        """The copy's info: ``{"agents": [each agent's info]}``, or ``{}`` when every one is empty
        (then nothing is pickled)."""
        per_agent = [infos.get(agent, {}) for agent in self.possible_agents]
        return {"agents": per_agent} if any(per_agent) else {}

    def render(self) -> Any:
        return self.par_env.render()

    def is_wrapped_by(self, wrapper_class: type) -> bool:
        """Whether the copy's env is wrapped in ``wrapper_class`` (see :func:`is_wrapped_by`)."""
        return is_wrapped_by(self.par_env, wrapper_class)

    def close(self) -> None:
        self.par_env.close()

    def __getattr__(self, name: str) -> Any:
        """The ``ParallelEnv``'s attributes (``get_attr`` on a copy reads them)."""
        if name.startswith("_") or name == "par_env":
            raise AttributeError(name)
        return getattr(self.par_env, name)


def is_wrapped_by(env: Any, wrapper_class: type) -> bool:
    """Whether ``wrapper_class`` is among the wrappers around ``env``: Gymnasium's, PettingZoo's
    (parallel and AEC, SuperSuit's among them) and, through ``aec_to_parallel``, those of the AEC
    env a parallel env was made from. (SuperSuit's own vec envs answer False for every PettingZoo
    env, and walk a Gymnasium env's wrappers as this does.)"""
    for _ in range(1000):  # a chain of wrappers, never a cycle; the bound is a guard
        if isinstance(env, wrapper_class):
            return True
        env = _inner_env(env)
        if env is None:
            return False
    return False


def _inner_env(env: Any) -> Any:
    """The env that ``env`` wraps, or None where it wraps none."""
    if isinstance(env, gym.Wrapper) or getattr(env, "wraps_one_env", False):
        return env.env
    try:
        from pettingzoo.utils.conversions import aec_to_parallel_wrapper  # type: ignore[import-untyped]
        from pettingzoo.utils.wrappers import BaseParallelWrapper, BaseWrapper  # type: ignore[import-untyped]
    except ImportError:  # (a Gymnasium env, without PettingZoo installed)
        return None
    if isinstance(env, aec_to_parallel_wrapper):
        return env.aec_env
    return env.env if isinstance(env, (BaseWrapper, BaseParallelWrapper)) else None


def _contains(space: gym.Space, action: Any) -> bool:
    try:
        return bool(space.contains(action))
    except Exception:
        return False
