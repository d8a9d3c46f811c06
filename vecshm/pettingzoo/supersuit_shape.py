"""SuperSuit's vec envs in SuperSuit's own shape, on vecshm's rows: what ``concat_vec_envs_v1`` and
``pettingzoo_env_to_vec_env_v1`` return to code written against SuperSuit.

SuperSuit's Gymnasium-based vec envs (``ConcatVecEnv`` and ``ProcConcatVec``, and
``MarkovVectorEnv`` for one copy) keep conventions of their own, which its users rely on:

- ``observation_space`` and ``action_space`` are one agent's, not batched;
- actions may come as a list of per-row actions as well as one array (or dict of arrays);
- infos are a list of dicts, one per row; a row whose copy ended (and was reset in the same step)
  has its agent's last observation in ``terminal_observation``, and the reset's info merged in;
- rewards are float32, and ``metadata`` is the env's own (``env.unwrapped.metadata["name"]``);
- ``render()`` is the first copy's.

:class:`SuperSuitVecEnv` gives those conventions over the same run and the same read of each
batch as :class:`~vecshm.pettingzoo.agent_vector_env.AgentVectorEnv`: only the shapes it returns differ.
docs/multiagent.md lists where it still departs from SuperSuit, and why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import concatenate, create_empty_array

from vecshm.options import StartOptions, takes_options
from vecshm.pettingzoo.agent_vector_env import CopyRowsVectorEnv
from vecshm.pettingzoo.copies import AgentPlan, CopyRows, Rows, plan_copies, row_of
from vecshm.shared.errors import ClosedError

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["AgentRowsEnv", "SuperSuitVecEnv"]


@takes_options(StartOptions)
class SuperSuitVecEnv(CopyRowsVectorEnv):
    """SuperSuit's ``concat_vec_envs_v1(..., base_class="gymnasium")``: ``num_copies`` copies of
    ``parallel_env``, row ``k * num_agents + a`` agent ``possible_agents[a]`` of copy ``k``, in
    SuperSuit's conventions (see the module).

    :param parallel_env: a PettingZoo ``ParallelEnv`` (copied for each copy, with cloudpickle)
    :param num_copies: copies of the env
    :param num_cpus: worker processes (0: vecshm's default plan, one per usable core)
    :param options: vecshm's options (below), as :class:`~vecshm.ShmVectorEnv` takes them, and
        ``start_method`` and ``daemon``; ``batch_size`` counts copies

    ``present`` holds, after each step or reset, whether each row's agent is in the observations
    returned: an absent agent's row (one that died, where SuperSuit raises) is zeros, with reward 0.
    """

    reward_dtype = np.float32

    def __init__(self, parallel_env: Any, num_copies: int, num_cpus: int = 0, **options: Unpack[StartOptions]) -> None:
        super().__init__(parallel_env, num_copies, num_cpus, AutoresetMode.SAME_STEP, options)
        self.observation_space = self.single_observation_space
        self.action_space = self.single_action_space
        self.metadata = parallel_env.metadata  # the env's own, as SuperSuit hands it on
        self.present = np.ones(self.num_envs, dtype=bool)

    def reset(  # type: ignore[override]  # SuperSuit's: infos a list; seed and options by position too
        self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, list[dict[str, Any]]]:
        """Reset every copy, copy ``k`` with ``seed + k``: ``(obs, infos)``, infos one dict per row."""
        return super().reset(seed=seed, options=options)

    def _row_map(self, plan: AgentPlan) -> SuperSuitRows:
        return SuperSuitRows(plan)

    def _render_results(self, images: list[Any]) -> Any:
        """The first copy's render, as SuperSuit's."""
        return images[0]

    def _infos(self, rows: Rows) -> list[dict[str, Any]]:
        """SuperSuit's infos of ``rows``: each agent's info; where its copy ended, with
        ``terminal_observation`` (where the agent was in the last observation) and then the reset's
        info merged in, as SuperSuit's ``MarkovVectorEnv`` builds them. A row whose agent is done
        while its copy goes on (where SuperSuit raises) has ``terminal_observation`` too."""
        a = self.num_agents
        self.present = rows.present
        infos: list[dict[str, Any]] = []
        for k, reset_or_step in enumerate(rows.infos):
            if k not in rows.finals:
                infos.extend(reset_or_step)
                continue
            final = rows.finals[k]
            for j, info in enumerate(rows.final_infos[k]):
                if final["present"][j]:
                    info["terminal_observation"] = row_of(final["obs"], j)
                infos.append({**info, **reset_or_step[j]})
        for r in (rows.terminated | rows.truncated).nonzero()[0].tolist():
            if r // a not in rows.finals:
                infos[r]["terminal_observation"] = row_of(rows.obs, r)
        for k in rows.restarted:
            for r in range(k * a, (k + 1) * a):
                infos[r]["worker_restarted"] = True
        return infos


class SuperSuitRows(CopyRows):
    """SuperSuit's rows: an agent of a copy each, as :class:`~vecshm.pettingzoo.copies.CopyRows`;
    actions may also come as a list of per-row actions of a Dict or Tuple space (what
    ``[env.action_space.sample() for _ in range(env.num_envs)]`` gives), concatenated as SuperSuit's
    ``concatenate`` does; only the first copy renders."""

    def to_envs(self, actions: Any, envs: int) -> Any:
        return super().to_envs(self._batched(actions, envs * self.num_agents), envs)

    def render_envs(self) -> list[int]:
        return [0]

    def _batched(self, actions: Any, rows: int) -> Any:
        """``actions`` as one batch; anything but a list of per-row Dict or Tuple actions as it is
        (a list of arrays or numbers stacks as it is read)."""
        space = self.plan.action_space
        per_row = dict if isinstance(space, spaces.Dict) else tuple if isinstance(space, spaces.Tuple) else None
        if (
            per_row is not None
            and isinstance(actions, list)
            and len(actions) == rows
            and all(isinstance(action, per_row) for action in actions)
        ):
            out: Any = create_empty_array(space, rows)
            return concatenate(space, actions, out)
        return actions


class AgentRowsEnv(gym.vector.VectorEnv):
    """What :func:`~vecshm.pettingzoo.pettingzoo_env_to_vec_env_v1` returns: one copy of
    ``parallel_env``, its agents as rows (``num_envs`` agents), a vec env in SuperSuit's shape by
    itself, as SuperSuit's ``MarkovVectorEnv`` is. Its spaces are checked at once; its worker
    process starts at its first use, since most code hands it to ``concat_vec_envs_v1``, which
    copies its env, and never steps it."""

    def __init__(self, parallel_env: Any) -> None:
        plan = plan_copies(parallel_env, 1)
        self.par_env = parallel_env
        self.possible_agents = plan.agents
        self.num_envs = plan.num_rows
        self.observation_space = self.single_observation_space = plan.observation_space
        self.action_space = self.single_action_space = plan.action_space
        self.metadata = parallel_env.metadata
        self.render_mode = getattr(getattr(parallel_env, "unwrapped", parallel_env), "render_mode", None)
        self.closed = False
        self._rows: SuperSuitVecEnv | None = None

    @property
    def rows(self) -> SuperSuitVecEnv:
        """The copy's vec env (one worker process), started at the first call that needs it."""
        if self.closed:
            raise ClosedError("this vec env is closed; create a new one")
        if self._rows is None:
            self._rows = SuperSuitVecEnv(self.par_env, 1, 1)
        return self._rows

    @property
    def present(self) -> np.ndarray:
        """Whether each row's agent is in the observations last returned."""
        return self.rows.present

    def reset(  # type: ignore[override]  # SuperSuit's: infos a list; seed and options by position too
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, list[dict[str, Any]]]:
        return self.rows.reset(seed=seed, options=options)

    def step(  # type: ignore[override]  # SuperSuit's: infos a list
        self, actions: Any
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        return self.rows.step(actions)

    def step_async(self, actions: Any) -> None:
        self.rows.step_async(actions)

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        return self.rows.step_wait()

    def render(self) -> Any:
        return self.rows.render()

    def env_is_wrapped(self, wrapper_class: type) -> list[bool]:
        return self.rows.env_is_wrapped(wrapper_class)

    def close(self, **kwargs: Any) -> None:
        self.closed = True
        if self._rows is not None:
            self._rows.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open" if self._rows is not None else "not started"
        return f"AgentRowsEnv({self.par_env}, agents={self.num_envs}, {state})"
