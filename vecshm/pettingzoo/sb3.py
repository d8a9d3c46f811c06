"""``AgentVecEnv``: copies of a PettingZoo ``ParallelEnv`` as one SB3 ``VecEnv``, every agent a row.

What SuperSuit's ``concat_vec_envs_v1(..., base_class="stable_baselines3")`` returns, with SB3's
own conventions where SuperSuit's wrapper departs from them: ``TimeLimit.truncated`` on every row,
``reset_infos`` at every automatic reset, ``indices`` honoured by the calls, ``seed()`` (and so
``PPO(seed=...)``) seeding copy ``k`` with ``seed + k``. See docs/multiagent.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from vecshm.options import StartOptions, resolved, takes_options
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
from vecshm.shared.protocol import AutoReset, CallOp
from vecshm.vec_env.base import VecEnvIndices, VecEnvObs, VecEnvStepReturn
from vecshm.vec_env.shm import SB3_CALLS, SB3RunVecEnv

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["AgentVecEnv"]


@takes_options(StartOptions)
class AgentVecEnv(SB3RunVecEnv):
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

    def __init__(self, parallel_env: Any, num_copies: int, num_cpus: int = 0, **options: Unpack[StartOptions]) -> None:
        self.waiting = False
        self.closed = True  # until the workers are up
        plan: AgentPlan = plan_copies(parallel_env, num_copies)
        self.agent_plan = plan
        given = resolved("AgentVecEnv", options, StartOptions)
        self.copy = given.pop("copy")
        with naming_copies():
            self._run = start_copies(parallel_env, plan, num_cpus, AutoReset.SAME_STEP, given)
        self.closed = False
        self.num_agents = len(plan.agents)
        self.possible_agents = plan.agents
        self.present = np.ones(plan.num_rows, dtype=bool)
        self._last_copies = 0  # copies the last recv returned: send's default
        try:
            super().__init__(plan.num_rows, plan.observation_space, plan.action_space)
        except BaseException:
            self.close()
            raise
        # the env's own (``env.unwrapped.metadata["name"]``, as SuperSuit's hands it on), beside SB3's render modes
        self.metadata = {**self.metadata, **(getattr(parallel_env, "metadata", None) or {})}

    # -- stepping ---------------------------------------------------------------------------------

    in_flight_rows = "copies"
    naming = staticmethod(naming_copies)

    def step_async(self, actions: np.ndarray) -> None:
        super().step_async(to_copies(actions, self.agent_plan, self.agent_plan.num_copies))

    def step_wait(self) -> VecEnvStepReturn:
        batch = self._pending_step()
        rows = read_rows(batch, self.agent_plan, self.copy, same_step=True, reward_dtype=np.float32)
        return self._run.hand_back((rows.obs, rows.rewards, rows.terminated | rows.truncated, self._infos(rows)))

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

    # -- async batches: whole copies --------------------------------------------------------------

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Step the copies ``env_ids`` (default: those the last ``recv`` returned) on ``actions``,
        one row per agent of each, without waiting."""
        copies = self._last_copies if env_ids is None else len(np.atleast_1d(np.asarray(env_ids)))
        super().send(to_copies(actions, self.agent_plan, copies), env_ids)

    def recv(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]], np.ndarray]:
        """The first ``batch_size`` copies to finish: ``(obs, rewards, terminated, truncated, infos,
        copy_ids)``, rows of those copies in ``copy_ids`` order (``present`` holds their mask)."""
        with naming_copies():
            batch = self._run.recv()
        self._last_copies = len(batch.ids)
        rows = read_rows(batch, self.agent_plan, self.copy, same_step=True, reward_dtype=np.float32)
        infos = self._infos(rows)
        return self._run.hand_back(
            (rows.obs, rows.rewards, rows.terminated, rows.truncated, infos, np.asarray(batch.env_ids))
        )

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> VecEnvObs:
        """SB3's ``reset()``; a ``seed`` or ``options`` given here are as ``seed()`` and ``set_options()``
        before it (SuperSuit's wrapper takes them, and fails on the seed)."""
        if seed is not None:
            self.seed(seed)
        if options is not None:
            self.set_options(options)
        batch = self._reset_batch()
        rows = read_rows(batch, self.agent_plan, self.copy, same_step=True, reward_dtype=np.float32)
        self.present = rows.present
        self.reset_infos = [info for agents in rows.infos for info in agents]
        return self._run.hand_back(rows.obs)

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Seed copy ``k`` with ``seed + k`` at the next reset (a random base seed when None),
        however many processes host them; each row's entry is its copy's seed."""
        if seed is None:
            seed = int(np.random.randint(0, np.iinfo(np.uint32).max, dtype=np.uint32))
        self._seeds = [seed + r // self.num_agents for r in range(self.num_envs)]
        return self._seeds

    def _reset_requests(self) -> list[dict[str, Any]]:
        """Each copy's ``reset`` keywords: its first row's seed and options."""
        firsts = range(0, self.num_envs, self.num_agents)
        return [
            {"seed": self._seeds[r], "options": self._options[r]} if self._options[r] else {"seed": self._seeds[r]}
            for r in firsts
        ]

    # -- rare calls: on the copies hosting the rows ----------------------------------------------

    def _copies(self, indices: VecEnvIndices) -> tuple[list[int], list[int]]:
        """The rows of ``indices``, and the copies hosting them (each once)."""
        rows = [int(r) % self.num_envs for r in self._get_indices(indices)]
        return rows, sorted({r // self.num_agents for r in rows})

    def _per_row(self, name: str, indices: VecEnvIndices, *args: Any, **kwargs: Any) -> list[Any]:
        rows, copies = self._copies(indices)
        op, call_args = SB3_CALLS[name](*args, **kwargs)
        self._check_idle(name)
        answers = dict(zip(copies, self._run.call(op, copies, *call_args)))
        return [answers[r // self.num_agents] for r in rows]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._per_row("get_attr", indices, attr_name)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._per_row("set_attr", indices, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        return self._per_row("env_method", indices, method_name, *method_args, **method_kwargs)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        """Whether each row's copy is wrapped in ``wrapper_class``: Gymnasium's wrappers, PettingZoo's
        and SuperSuit's, and those of the AEC env a parallel env was made from."""
        return self._per_row("env_method", indices, "is_wrapped_by", wrapper_class)

    def has_attr(self, attr_name: str) -> bool:
        self._check_idle("has_attr")
        return all(self._run.call(CallOp.HAS_ATTR, list(range(self.agent_plan.num_copies)), attr_name))

    def _render_ids(self) -> list[int]:
        """One image per copy (its agents share it)."""
        return list(range(self.agent_plan.num_copies))

    def __repr__(self) -> str:
        return describe(self)
