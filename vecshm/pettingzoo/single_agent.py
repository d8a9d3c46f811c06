"""A Gymnasium env as a ParallelEnv of one agent, so that SuperSuit's functions take plain envs.

SuperSuit's ``concat_vec_envs_v1`` takes a Gymnasium env as well as a PettingZoo one: each copy is
then one row. vecshm runs such an env as a one-agent copy (:class:`OneAgentEnv`), on the same rows
as every PettingZoo env, so nothing about the engine or the facades changes for it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

__all__ = ["AGENT", "OneAgentEnv"]

AGENT = "env"  # the one agent's name


class OneAgentEnv:
    """``env`` as a ParallelEnv whose one agent, :data:`AGENT`, is the env: present from each reset
    until its episode ends. Its attributes are the env's (``get_attr`` on a copy reads them), and
    ``env_is_wrapped`` looks through it at the env's wrappers (``wraps_one_env``)."""

    wraps_one_env = True

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self.possible_agents = [AGENT]
        self.agents: list[str] = []

    @property
    def metadata(self) -> dict[str, Any]:
        return self.env.metadata

    @property
    def render_mode(self) -> str | None:
        return self.env.render_mode

    @property
    def unwrapped(self) -> OneAgentEnv:
        return self

    def observation_space(self, agent: str) -> gym.Space:
        return self.env.observation_space

    def action_space(self, agent: str) -> gym.Space:
        return self.env.action_space

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        self.agents = [AGENT]
        return {AGENT: obs}, {AGENT: info}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        obs, reward, terminated, truncated, info = self.env.step(actions[AGENT])
        if terminated or truncated:
            self.agents = []
        return {AGENT: obs}, {AGENT: reward}, {AGENT: terminated}, {AGENT: truncated}, {AGENT: info}

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "env":  # (not the env's: and no recursion while unpickling)
            raise AttributeError(name)
        return getattr(self.env, name)

    def __repr__(self) -> str:
        return f"OneAgentEnv({self.env})"
