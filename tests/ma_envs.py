"""PettingZoo parallel envs for the multi-agent tests: the real ones (small episodes), and one of
our own whose agents die at random, join late, and whose episodes have random lengths."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from gymnasium import spaces

ParallelEnv = __import__("pettingzoo").ParallelEnv


class RandomDeaths(ParallelEnv):
    """``num_agents`` agents on 3-float observations and 3 actions. Each step, each agent dies with
    probability 0.15; the last agent joins only at step 2; an episode is truncated after a random
    length (3 to ``max_len``) or ends when every agent is gone. Deterministic for a seed."""

    metadata = {"name": "random_deaths_v0", "is_parallelizable": True, "render_modes": []}

    def __init__(
        self, num_agents: int = 4, max_len: int = 12, info: bool = True, join_late: bool = True, deaths: bool = True
    ) -> None:
        self.join_late = join_late
        self.death_rate = 0.15 if deaths else 0.0
        self.possible_agents = [f"agent_{i}" for i in range(num_agents)]
        self.agents: list[str] = []
        self.max_len = max_len
        self.with_info = info
        self.render_mode = None
        self._obs_space = spaces.Box(-10.0, 10.0, (3,), np.float32)
        self._act_space = spaces.Discrete(3)

    @functools.cache  # noqa: B019  (PettingZoo's own envs cache their spaces so)
    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs_space

    @functools.cache  # noqa: B019
    def action_space(self, agent: str) -> spaces.Space:
        return self._act_space

    def agent_count(self) -> int:
        return len(self.agents)

    def _obs(self, agent: str) -> np.ndarray:
        return self.rng.uniform(-1, 1, 3).astype(np.float32) + np.float32(self.possible_agents.index(agent))

    def _info(self, agent: str) -> dict[str, Any]:
        return {"t": self.t, "agent": agent} if self.with_info else {}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None or not hasattr(self, "rng"):  # (a reset without a seed goes on with the generator)
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.length = int(self.rng.integers(3, self.max_len + 1))
        self.agents = self.possible_agents[:-1] if self.join_late else list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: self._info(a) for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        obs, rewards, terms, truncs, infos = {}, {}, {}, {}, {}
        for a in self.agents:
            assert a in actions, f"no action for {a}"
            if not 0 <= int(actions[a]) < 3:
                raise ValueError(f"invalid action {actions[a]!r}")
            obs[a] = self._obs(a)
            rewards[a] = float(actions[a]) + float(self.rng.random())
            terms[a] = bool(self.rng.random() < self.death_rate)
            truncs[a] = self.t >= self.length
            infos[a] = self._info(a)
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        if self.join_late and self.t == 2 and self.t < self.length:  # the last agent joins
            late = self.possible_agents[-1]
            self.agents.append(late)
            obs[late], rewards[late], terms[late], truncs[late], infos[late] = self._obs(late), 0.0, False, False, {}
        return obs, rewards, terms, truncs, infos


class RaisesAtStep(RandomDeaths):
    """Raises in ``step`` number ``at`` (counted over the env's life)."""

    def __init__(self, at: int = 3) -> None:
        super().__init__(info=False)
        self.at, self.steps = at, 0

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.steps += 1
        if self.steps == self.at:
            raise ValueError("this env fails on purpose")
        return super().step(actions)


class MixedSpaces(RandomDeaths):
    """Its last agent observes 4 floats where the others observe 3."""

    def observation_space(self, agent: str) -> spaces.Space:
        if agent == self.possible_agents[-1]:
            return spaces.Box(-10.0, 10.0, (4,), np.float32)
        return self._obs_space


def real_envs() -> dict[str, Any]:
    """Each real env the tests run, as a factory of a small-episode instance."""
    import supersuit as ss
    from mpe2 import simple_spread_v3, simple_world_comm_v3
    from pettingzoo.butterfly import cooperative_pong_v6, knights_archers_zombies_v11, pistonball_v6

    return {
        "pistonball": lambda: pistonball_v6.parallel_env(max_cycles=6),
        "cooperative_pong": lambda: cooperative_pong_v6.parallel_env(max_cycles=10),
        "kaz_black_death": lambda: ss.black_death_v3(knights_archers_zombies_v11.parallel_env(max_cycles=8)),
        "simple_spread": lambda: simple_spread_v3.parallel_env(max_cycles=5),
        "simple_world_comm": lambda: ss.pad_action_space_v0(
            ss.pad_observations_v0(simple_world_comm_v3.parallel_env(max_cycles=5))
        ),
        "dict_agents": DictAgents,
    }


class DictAgents(ParallelEnv):
    """Five agents observing a Dict with a Tuple inside and acting in a Dict, as SuperSuit's
    ``test_vector_dict`` env: agent ``i``'s ``feature`` is all ``i``; ``id`` is random. An episode is
    truncated after a random length (3 to 8); rewards follow the actions; infos count steps."""

    metadata = {"name": "dict_agents_v0", "is_parallelizable": True, "render_modes": []}

    def __init__(self) -> None:
        self.possible_agents = [str(i) for i in range(5)]
        self.agents: list[str] = []
        self.render_mode = None
        self._obs_space = spaces.Dict(
            {
                "feature": spaces.Box(0.0, 10.0, (5,), np.float32),
                "id": spaces.Tuple((spaces.Box(0.0, 10.0, (7,), np.float32), spaces.Box(0.0, 10.0, (8,), np.float32))),
            }
        )
        self._act_space = spaces.Dict({"mask": spaces.Discrete(10), "obs": spaces.Box(0.0, 10.0, (5,), np.float32)})

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Space:
        return self._act_space

    def _obs(self, agent: str) -> dict[str, Any]:
        ids = tuple(self.rng.uniform(0, 10, n).astype(np.float32) for n in (7, 8))
        return {"feature": np.full(5, int(agent), np.float32), "id": ids}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None or not hasattr(self, "rng"):
            self.rng = np.random.default_rng(seed)
        self.t, self.length = 0, int(self.rng.integers(3, 9))
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {"t": 0} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        for a in self.agents:
            if actions[a] not in self._act_space:
                raise ValueError(f"invalid action {actions[a]!r}")
        obs = {a: self._obs(a) for a in self.agents}
        rewards = {a: float(actions[a]["mask"]) + float(actions[a]["obs"].sum()) for a in self.agents}
        terms = {a: False for a in self.agents}
        truncs = {a: self.t >= self.length for a in self.agents}
        infos = {a: {"t": self.t} for a in self.agents}
        if self.t >= self.length:
            self.agents = []
        return obs, rewards, terms, truncs, infos


class MultiDiscreteAgents(RandomDeaths):
    """:class:`RandomDeaths` (every agent there from the start, none dying) acting in ``MultiDiscrete([3, 2])``."""

    def __init__(self) -> None:
        super().__init__(join_late=False, deaths=False)
        self._act_space = spaces.MultiDiscrete([3, 2])

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        for a in self.agents:
            if actions[a] not in self._act_space:
                raise ValueError(f"invalid action {actions[a]!r}")
        return super().step({a: int(action[0]) for a, action in actions.items()})


class GymAgent(ParallelEnv):
    """A Gymnasium env as a ParallelEnv of one agent, ``"env"``: what SuperSuit's own functions step
    correctly, where they fail on the Gymnasium env itself (its ``SingleVecEnv`` predates
    Gymnasium 1.x's ``reset``), so that SuperSuit's conventions for a Gymnasium env can be checked."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.possible_agents = ["env"]
        self.agents: list[str] = []
        self.metadata = env.metadata
        self.render_mode = env.render_mode

    def observation_space(self, agent: str) -> spaces.Space:
        return self.env.observation_space

    def action_space(self, agent: str) -> spaces.Space:
        return self.env.action_space

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        self.agents = ["env"]
        return {"env": obs}, {"env": info}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        obs, reward, terminated, truncated, info = self.env.step(actions["env"])
        if terminated or truncated:
            self.agents = []
        return {"env": obs}, {"env": reward}, {"env": terminated}, {"env": truncated}, {"env": info}


class PricedAgents(ParallelEnv):
    """Three agents reading rows of a table of prices (rows of 4 floats), from a random row on; an
    episode is truncated after 9 steps. For vecshm.share: the table is what each copy holds."""

    metadata = {"name": "priced_agents_v0", "is_parallelizable": True, "render_modes": []}

    def __init__(self, prices: np.ndarray) -> None:
        self.prices = prices
        self.possible_agents = ["a", "b", "c"]
        self.agents: list[str] = []
        self.render_mode = None
        self._obs_space = spaces.Box(-np.inf, np.inf, (4,), np.float64)

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(3)

    def _obs(self) -> dict[str, np.ndarray]:
        return {a: self.prices[self.t + i] for i, a in enumerate(self.agents)}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None or not hasattr(self, "rng"):
            self.rng = np.random.default_rng(seed)
        self.t, self.steps = int(self.rng.integers(0, len(self.prices) - 100)), 0
        self.agents = list(self.possible_agents)
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.t, self.steps = self.t + 1, self.steps + 1
        obs = self._obs()
        rewards = {a: float(self.prices[self.t, 0]) * (int(actions[a]) - 1) for a in self.agents}
        done = self.steps >= 9
        terms, truncs = {a: False for a in self.agents}, {a: done for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terms, truncs, {a: {} for a in obs}
