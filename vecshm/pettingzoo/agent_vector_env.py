"""``AgentVectorEnv``: copies of a PettingZoo ``ParallelEnv`` as one Gymnasium ``VectorEnv``, every agent a row.

What SuperSuit's ``concat_vec_envs_v1(..., base_class="gymnasium")`` returns, with Gymnasium 1.x's
conventions where SuperSuit's departs from them: infos as a dict of arrays with masks, the
autoreset mode in ``metadata["autoreset_mode"]`` (SAME_STEP, as SuperSuit resets, or NEXT_STEP),
and copy ``k`` reset with ``seed + k``. See docs/multiagent.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from vecshm.options import StartOptions, resolved, takes_options
from vecshm.parent.core.inspection import RunProperties
from vecshm.parent.handback.results import Batch
from vecshm.pettingzoo.copies import CopyRows, Rows, describe, row_of, start_copies
from vecshm.shared.protocol import AutoReset
from vecshm.vector.gym_kernel import GymKernel
from vecshm.vector.infos import batch_infos

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["AgentVectorEnv", "CopyRowsVectorEnv"]

MODES = {AutoresetMode.SAME_STEP: AutoReset.SAME_STEP, AutoresetMode.NEXT_STEP: AutoReset.NEXT_STEP}


class CopyRowsVectorEnv(RunProperties, GymKernel):
    """What the Gymnasium-shaped multi-agent vec envs share: ``num_copies`` copies of
    ``parallel_env`` on one run, row ``k * num_agents + a`` agent ``possible_agents[a]`` of copy
    ``k`` (:class:`~vecshm.pettingzoo.copies.CopyRows`), on Gymnasium's kernel. A subclass says how
    a batch's rows become the infos it returns (:meth:`_infos`), what its spaces and metadata are,
    and in which dtype its rewards come (``reward_dtype``): :class:`AgentVectorEnv` in Gymnasium's conventions,
    :class:`~vecshm.pettingzoo.supersuit_shape.SuperSuitVecEnv` in SuperSuit's.
    """

    reward_dtype: type = np.float64
    rows: CopyRows

    def __init__(
        self,
        parallel_env: Any,
        num_copies: int,
        num_cpus: int,
        autoreset_mode: str | AutoresetMode,
        options: Mapping[str, Any],
    ) -> None:
        """``options``: vecshm's, as the subclass's caller gave them (:class:`~vecshm.options.StartOptions`)."""
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        if self.autoreset_mode not in MODES:
            raise ValueError(f"autoreset_mode must be SAME_STEP or NEXT_STEP, got {self.autoreset_mode}")
        given = resolved(type(self).__name__, options, StartOptions)
        own_arrays = given.pop("copy")  # (the copy option: observations copied out, else lent)
        plan, run = start_copies(parallel_env, num_copies, num_cpus, MODES[self.autoreset_mode], given)
        self.agent_plan = plan
        self._started(run, self._row_map(plan), own_arrays)
        self.num_agents = len(plan.agents)
        self.possible_agents = plan.agents
        self.single_observation_space = plan.observation_space
        self.single_action_space = plan.action_space
        self.render_mode = getattr(getattr(parallel_env, "unwrapped", parallel_env), "render_mode", None)

    def _row_map(self, plan: Any) -> CopyRows:
        """The rows: an agent of a copy each (SuperSuit's shape batches its actions first)."""
        return CopyRows(plan)

    def _infos(self, rows: Rows) -> Any:
        """The infos of ``rows``, in the subclass's form."""
        raise NotImplementedError

    # -- the result shape -------------------------------------------------------------------------

    def _rows(self, batch: Batch, same_step: bool) -> Rows:
        return self.rows.read(batch, self.copy, same_step, self.reward_dtype)

    def _reset_results(self, batch: Batch) -> tuple[Any, Any]:
        rows = self._rows(batch, False)
        return rows.obs, self._infos(rows)

    def _step_results(self, batch: Batch) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, Any]:
        rows = self._rows(batch, self._same_step)
        return rows.obs, rows.rewards, rows.terminated, rows.truncated, self._infos(rows)

    def __repr__(self) -> str:
        return describe(self)


@takes_options(StartOptions)
class AgentVectorEnv(CopyRowsVectorEnv):
    """Gymnasium's ``VectorEnv`` over ``num_copies`` copies of ``parallel_env``: row ``k * num_agents + a``
    is agent ``possible_agents[a]`` of copy ``k``.

    :param parallel_env: a PettingZoo ``ParallelEnv`` (copied for each copy, with cloudpickle);
        every agent must share one observation and one action space
    :param num_copies: copies of the env
    :param num_cpus: worker processes (0: vecshm's default plan, one per usable core)
    :param autoreset_mode: ``SAME_STEP`` (default, as SuperSuit resets a copy) or ``NEXT_STEP``
    :param options: vecshm's options (below), as :class:`~vecshm.ShmVectorEnv` takes them, and
        ``start_method`` and ``daemon``; ``batch_size`` counts copies

    ``observation_space`` and ``action_space`` are batched, one agent's are ``single_*``, as every
    Gymnasium vector env's. Infos carry ``present`` (whether each row's agent is in the observations
    returned; an absent agent's row is zeros, with reward 0).
    """

    def __init__(
        self,
        parallel_env: Any,
        num_copies: int,
        num_cpus: int = 0,
        *,
        autoreset_mode: str | AutoresetMode = AutoresetMode.SAME_STEP,
        **options: Unpack[StartOptions],
    ) -> None:
        super().__init__(parallel_env, num_copies, num_cpus, autoreset_mode, options)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        metadata = dict(getattr(parallel_env, "metadata", {}) or {})
        self.metadata = {**metadata, "autoreset_mode": self.autoreset_mode}

    def _infos(self, rows: Rows) -> dict[str, Any]:
        """Gymnasium's infos of ``rows``: each agent's info batched with masks, ``present``, and,
        under SAME_STEP, ``final_obs`` and ``final_info`` for each row whose agent is done (for a
        copy reset in the step, the row's info is then the reset's)."""
        a = self.num_agents
        per_row = [info for agents in rows.infos for info in agents]
        if rows.restarted:
            for k in rows.restarted:
                for j in range(a):
                    per_row[k * a + j]["worker_restarted"] = True
        if self._same_step:
            done = (rows.terminated | rows.truncated).nonzero()[0].tolist()
            for r in done:
                k, j = divmod(r, a)
                if k in rows.finals:
                    final = rows.finals[k]
                    last = row_of(final["obs"], j) if final["present"][j] else None
                    info = rows.final_infos[k][j]
                    if k in rows.restarted:
                        info["worker_restarted"] = True
                else:  # an agent done, its copy going on: its row holds its last observation
                    last, info, per_row[r] = row_of(rows.obs, r), per_row[r], {}
                per_row[r] = {"final_obs": last, "final_info": info, **per_row[r]}
        infos = batch_infos(len(per_row), per_row, self._add_info)
        infos["present"], infos["_present"] = rows.present, np.ones(len(per_row), dtype=bool)
        return infos
