"""``AgentVectorEnv``: copies of a PettingZoo ``ParallelEnv`` as one Gymnasium ``VectorEnv``, every agent a row.

What SuperSuit's ``concat_vec_envs_v1(..., base_class="gymnasium")`` returns, with Gymnasium 1.x's
conventions where SuperSuit's departs from them: infos as a dict of arrays with masks, the
autoreset mode in ``metadata["autoreset_mode"]`` (SAME_STEP, as SuperSuit resets, or NEXT_STEP),
and copy ``k`` reset with ``seed + k``. See docs/multiagent.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from vecshm.options import StartOptions, resolved, takes_options
from vecshm.parent.core.inspection import RunProperties
from vecshm.pettingzoo.copies import (
    AgentPlan,
    Rows,
    describe,
    naming_copies,
    plan_copies,
    read_rows,
    row_of,
    start_copies,
    to_copies,
)
from vecshm.shared.errors import AlreadyPendingCallError, NoAsyncCallError
from vecshm.shared.protocol import AutoReset, CallOp
from vecshm.vector.infos import batch_infos
from vecshm.vector.rules import seed_list

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["AgentVectorEnv", "CopyRowsVectorEnv"]

MODES = {AutoresetMode.SAME_STEP: AutoReset.SAME_STEP, AutoresetMode.NEXT_STEP: AutoReset.NEXT_STEP}


class CopyRowsVectorEnv(RunProperties, gym.vector.VectorEnv):
    """What the Gymnasium-shaped multi-agent vec envs share: ``num_copies`` copies of
    ``parallel_env`` on one run, row ``k * num_agents + a`` agent ``possible_agents[a]`` of copy
    ``k``, stepped, reset, sent and called alike. A subclass says how a batch's rows become the
    infos it returns (:meth:`_infos`), what its spaces and metadata are, and in which dtype its
    rewards come (``reward_dtype``): :class:`AgentVectorEnv` in Gymnasium's conventions,
    :class:`~vecshm.pettingzoo.supersuit_shape.SuperSuitVecEnv` in SuperSuit's.
    """

    reward_dtype: type = np.float64

    def __init__(
        self,
        parallel_env: Any,
        num_copies: int,
        num_cpus: int,
        autoreset_mode: str | AutoresetMode,
        options: Mapping[str, Any],
    ) -> None:
        """``options``: vecshm's, as the subclass's caller gave them (:class:`~vecshm.options.StartOptions`)."""
        self.closed = True  # until the workers are up
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        if self.autoreset_mode not in MODES:
            raise ValueError(f"autoreset_mode must be SAME_STEP or NEXT_STEP, got {self.autoreset_mode}")
        plan: AgentPlan = plan_copies(parallel_env, num_copies)
        self.agent_plan = plan
        given = resolved(type(self).__name__, options, StartOptions)
        self.copy = given.pop("copy")
        with naming_copies():
            self._run = start_copies(parallel_env, plan, num_cpus, MODES[self.autoreset_mode], given)
        self.closed = False
        self.num_envs = plan.num_rows
        self.num_agents = len(plan.agents)
        self.possible_agents = plan.agents
        self.single_observation_space = plan.observation_space
        self.single_action_space = plan.action_space
        self.render_mode = getattr(getattr(parallel_env, "unwrapped", parallel_env), "render_mode", None)
        self._pending = ""  # "step" or "reset" between an *_async call and its *_wait
        self._last_copies = 0

    def _infos(self, rows: Rows) -> Any:
        """The infos of ``rows``, in the subclass's form."""
        raise NotImplementedError

    # -- stepping ---------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, Any]:
        """Reset every copy: copy ``k`` with ``seed + k`` (a list: a seed per row, a copy's first row's counting)."""
        self._check_idle("reset")
        seeds = self._copy_seeds(seed)
        self._run.drain()
        self._run.start_reset([{"seed": s, "options": options} for s in seeds], self.copy)
        with naming_copies():
            batch = self._run.finish()
        rows = read_rows(batch, self.agent_plan, self.copy, False, self.reward_dtype)
        return self._run.hand_back((rows.obs, self._infos(rows)))

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, Any]:
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: Any) -> None:
        self._check_idle("step_async")
        self._run.start_step(to_copies(actions, self.agent_plan, self.agent_plan.num_copies), self.copy)
        self._pending = "step"

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, Any]:
        self._run.check_usable()
        if self._pending != "step":
            raise NoAsyncCallError("Calling `step_wait` without any prior call to `step_async`.", "step")
        self._pending = ""
        with naming_copies():
            batch = self._run.finish()
        rows = read_rows(batch, self.agent_plan, self.copy, self._same_step, self.reward_dtype)
        return self._run.hand_back((rows.obs, rows.rewards, rows.terminated, rows.truncated, self._infos(rows)))

    def _copy_seeds(self, seed: int | list[int | None] | None) -> list[int | None]:
        """Each copy's seed: ``seed + k`` for copy ``k``, whatever the number of processes."""
        if isinstance(seed, (int, np.integer)):
            return [int(seed) + k for k in range(self.agent_plan.num_copies)]
        return seed_list(seed, self.num_envs)[:: self.num_agents]

    @property
    def _same_step(self) -> bool:
        return self.autoreset_mode is AutoresetMode.SAME_STEP

    # -- async batches: whole copies --------------------------------------------------------------

    def async_reset(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """Reset every copy without waiting; ``recv()`` returns the reset rows batch by batch."""
        self._check_idle("async_reset")
        seeds = self._copy_seeds(seed)
        self._run.async_reset([{"seed": s, "options": options} for s in seeds])

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Step the copies ``env_ids`` (default: those the last ``recv`` returned), one row of
        ``actions`` per agent of each, without waiting."""
        self._run.check_usable()
        copies = self._last_copies if env_ids is None else len(np.atleast_1d(np.asarray(env_ids)))
        self._run.send(to_copies(actions, self.agent_plan, copies), env_ids)

    def recv(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, Any, np.ndarray]:
        """The first ``batch_size`` copies to finish: ``(obs, rewards, terminations, truncations,
        infos, copy_ids)``, the rows of those copies in ``copy_ids`` order."""
        with naming_copies():
            batch = self._run.recv()
        self._last_copies = len(batch.ids)
        rows = read_rows(batch, self.agent_plan, self.copy, self._same_step, self.reward_dtype)
        return self._run.hand_back(
            (rows.obs, rows.rewards, rows.terminated, rows.truncated, self._infos(rows), np.asarray(batch.env_ids))
        )

    # -- calls: on the copies hosting the rows ----------------------------------------------------

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Attribute ``name`` of each row's copy (its ``ParallelEnv``)."""
        return self._per_row(CallOp.GET_ATTR, name)

    def set_attr(self, name: str, values: Any) -> None:
        """Set ``name`` on every copy (one value for all, or one per copy)."""
        copies = self.agent_plan.num_copies
        if not isinstance(values, (list, tuple)):
            values = [values] * copies
        if len(values) != copies:
            raise ValueError(f"values must be one per copy ({copies}), got {len(values)}")
        self._check_idle("set_attr")
        for k, value in enumerate(values):
            self._run.call(CallOp.SET_ATTR, [k], name, value, False)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of each copy (an attribute that is no method: its value); one result per row."""
        return self._per_row(CallOp.ENV_METHOD, name, args, kwargs, True)

    def render(self) -> tuple[Any, ...] | None:
        """Each copy's render (one per copy)."""
        self._check_idle("render")
        return tuple(self._run.call(CallOp.RENDER, list(range(self.agent_plan.num_copies))))

    def env_is_wrapped(self, wrapper_class: type) -> list[bool]:
        """Whether each row's copy is wrapped in ``wrapper_class``: Gymnasium's wrappers, PettingZoo's
        and SuperSuit's, and those of the AEC env a parallel env was made from."""
        return list(self._per_row(CallOp.ENV_METHOD, "is_wrapped_by", (wrapper_class,), {}, True))

    def _per_row(self, op: CallOp, *args: Any) -> tuple[Any, ...]:
        self._check_idle(op.name.lower())
        answers = self._run.call(op, list(range(self.agent_plan.num_copies)), *args)
        return tuple(answers[r // self.num_agents] for r in range(self.num_envs))

    def _check_idle(self, name: str) -> None:
        self._run.check_usable()
        if self._pending:
            raise AlreadyPendingCallError(
                f"Calling `{name}` while waiting for a pending call to `{self._pending}` to complete", self._pending
            )
        if self._run.in_flight and name not in ("reset", "async_reset"):
            raise AlreadyPendingCallError(f"{name}() was called while copies are in flight; recv() them first", "send")

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self, **kwargs: Any) -> None:
        if self.closed:
            return
        self.closed = True
        self._pending = ""
        self._run.close()

    def __enter__(self) -> CopyRowsVectorEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "closed", True):
            self.close()

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
