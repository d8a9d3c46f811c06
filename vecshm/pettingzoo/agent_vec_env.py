"""``AgentVecEnv``: copies of a PettingZoo ``ParallelEnv`` as one SB3 ``VecEnv``, every agent a row.

What SuperSuit's ``concat_vec_envs_v1(..., base_class="stable_baselines3")`` returns, with SB3's
own conventions where SuperSuit's wrapper departs from them: ``TimeLimit.truncated`` on every row,
``reset_infos`` at every automatic reset, ``indices`` honoured by the calls, ``seed()`` (and so
``PPO(seed=...)``) seeding copy ``k`` with ``seed + k``. See docs/multiagent.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from vecshm.options import StartOptions, resolved, takes_options
from vecshm.parent.core.inspection import RunProperties
from vecshm.parent.handback.results import Batch
from vecshm.pettingzoo.copies import CopyRows, Rows, describe, row_of, start_copies
from vecshm.shared.protocol import AutoReset
from vecshm.vec_env.base import VecEnvObs
from vecshm.vec_env.sb3_kernel import SB3AsyncBatches

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["AgentVecEnv"]


@takes_options(StartOptions)
class AgentVecEnv(RunProperties, SB3AsyncBatches):
    """SB3's ``VecEnv`` over ``num_copies`` copies of ``parallel_env``: row ``k * num_agents + a`` is
    agent ``possible_agents[a]`` of copy ``k``.

    :param parallel_env: a PettingZoo ``ParallelEnv`` (copied for each copy, with cloudpickle);
        every agent must share one observation and one action space
    :param num_copies: copies of the env
    :param num_cpus: worker processes (0: vecshm's default plan, one per usable core)
    :param options: vecshm's options (below), as :class:`~vecshm.ShmVecEnv` takes them, and
        ``start_method`` and ``daemon``; ``batch_size`` counts copies

    ``present`` holds, after each step or reset, whether each row's agent is in the observations
    returned (an absent agent's row is zeros, with reward 0); each row's info says it too.
    """

    rows: CopyRows

    def __init__(self, parallel_env: Any, num_copies: int, num_cpus: int = 0, **options: Unpack[StartOptions]) -> None:
        given = resolved("AgentVecEnv", options, StartOptions)
        own_arrays = given.pop("copy")  # (the copy option: observations copied out, else lent)
        plan, run = start_copies(parallel_env, num_copies, num_cpus, AutoReset.SAME_STEP, given)
        self.agent_plan = plan
        self.num_agents = len(plan.agents)
        self.possible_agents = plan.agents
        self.present = np.ones(plan.num_rows, dtype=bool)
        self._started(run, CopyRows(plan), own_arrays, plan.observation_space, plan.action_space)
        # the env's own (``env.unwrapped.metadata["name"]``, as SuperSuit's hands it on), beside SB3's render modes
        self.metadata = {**self.metadata, **(getattr(parallel_env, "metadata", None) or {})}

    # -- the result shape -------------------------------------------------------------------------

    def _rows(self, batch: Batch) -> Rows:
        return self.rows.read(batch, self.copy, same_step=True, reward_dtype=np.float32)

    def _results(self, batch: Batch, device: bool) -> tuple[Any, Any, Any, Any, Any, list]:
        """The rows of whole copies (``recv``'s ``env_ids`` are the copies'; ``present`` holds their mask)."""
        rows = self._rows(batch)
        dones = rows.terminated | rows.truncated
        return rows.obs, rows.rewards, dones, rows.terminated, rows.truncated, self._infos(rows)

    def _reset_results(self, batch: Batch) -> VecEnvObs:
        rows = self._rows(batch)
        self.present = rows.present
        self.reset_infos = [info for agents in rows.infos for info in agents]
        return rows.obs

    def _infos(self, rows: Rows) -> list[dict[str, Any]]:
        """SB3's infos of ``rows``, as DummyVecEnv gives them for envs that are the rows: every
        info has ``TimeLimit.truncated``; a done row has ``terminal_observation`` (its agent's last
        observation, where it had one); a copy's automatic reset puts each agent's reset info in
        ``reset_infos``."""
        a, terminated, truncated, present = self.num_agents, rows.terminated, rows.truncated, rows.present
        self.present = present
        infos = [info for agents in rows.infos for info in agents]
        for k, final in rows.finals.items():  # copies reset in the step: their rows' infos are the last step's
            first_row = rows.copy_ids[k] * a  # (among all rows: an async batch holds some copies)
            for j, step_info in enumerate(rows.final_infos[k]):
                self.reset_infos[first_row + j] = infos[k * a + j]
                step_info["TimeLimit.truncated"] = bool(truncated[k * a + j] and not terminated[k * a + j])
                if final["present"][j]:
                    step_info["terminal_observation"] = row_of(final["obs"], j)
                infos[k * a + j] = step_info
        for r in (terminated | truncated).nonzero()[0].tolist():
            if r // a not in rows.finals:  # an agent done, its copy going on: its row is its last observation
                infos[r]["TimeLimit.truncated"] = bool(truncated[r] and not terminated[r])
                infos[r]["terminal_observation"] = row_of(rows.obs, r)
        for r, info in enumerate(infos):
            info.setdefault("TimeLimit.truncated", False)
            info["present"] = bool(present[r])
        for k in rows.restarted:
            for r in range(k * a, (k + 1) * a):
                infos[r]["worker_restarted"] = True
        return infos

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> VecEnvObs:
        """SB3's ``reset()``; a ``seed`` or ``options`` given here are as ``seed()`` and ``set_options()``
        before it (SuperSuit's wrapper takes them, and fails on the seed)."""
        if seed is not None:
            self.seed(seed)
        if options is not None:
            self.set_options(options)
        return super().reset()

    def __repr__(self) -> str:
        return describe(self)
