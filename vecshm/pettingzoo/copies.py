"""The copies of one ``ParallelEnv`` on the engine, and their results as rows.

Both multi-agent facades start their :class:`~vecshm.parent.core.run.VecRun` here (one env of the
engine per copy, :class:`~vecshm.pettingzoo.rows.AgentRows` in its worker) and read each batch
with :func:`read_rows`: the rows of copy ``k`` are ``k * num_agents`` to ``(k + 1) * num_agents``,
agents in ``possible_agents`` order, as SuperSuit orders them. Observations are reshaped views of
what the workers wrote (lent or copied as the facade's ``copy`` says); rewards and flags are
small fresh arrays.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from types import FrameType
from typing import Any, NamedTuple

import numpy as np

from vecshm.parent.core.run import VecRun
from vecshm.parent.handback.results import Batch
from vecshm.parent.processes.start_methods import gymnasium_start_method
from vecshm.pettingzoo.rows import CopyOf, agent_spaces
from vecshm.row_maps import EnvRows
from vecshm.shared.errors import WorkerDiedError, WorkerError, remote_errors
from vecshm.shared.protocol import AutoReset

__all__ = [
    "AgentPlan",
    "CopyRows",
    "Rows",
    "options_for_copies",
    "describe",
    "copies_named",
    "plan_copies",
    "read_rows",
    "row_of",
    "start_copies",
    "to_copies",
]


class AgentPlan(NamedTuple):
    """What the facades know of one ``ParallelEnv``: its agents and the spaces they share."""

    agents: list[str]
    observation_space: Any
    action_space: Any
    num_copies: int

    @property
    def num_rows(self) -> int:
        return self.num_copies * len(self.agents)


class CopyRows(EnvRows):
    """The row map of copies of one ``ParallelEnv`` (:mod:`vecshm.row_maps`): row ``k * num_agents + a``
    is agent ``a`` of copy ``k``, and the run's env ``k`` is copy ``k``. A call on some rows runs
    once on each copy hosting them, and each row gets its copy's answer."""

    word = "copies"
    regroups = True

    def __init__(self, plan: AgentPlan) -> None:
        super().__init__(plan.num_copies)
        self.plan = plan
        self.num_rows = plan.num_rows
        self.num_agents = len(plan.agents)

    def named(self, error: BaseException) -> BaseException:
        return copies_named(error)

    def env_of(self, row: int) -> int:
        return row // self.num_agents

    def first_rows(self) -> range:
        return range(0, self.num_rows, self.num_agents)

    def to_envs(self, actions: Any, envs: int) -> Any:
        return to_copies(actions, self.plan, envs)

    def sent(self, actions: Any, env_ids: Any) -> Any:
        if env_ids is None:
            return actions
        return self.to_envs(actions, len(np.atleast_1d(np.asarray(env_ids))))

    def envs_of(self, rows: Iterable[int]) -> list[int]:
        """The copies hosting ``rows``, each once (a negative row counts from the end)."""
        return sorted({int(r) % self.num_rows // self.num_agents for r in rows})

    def per_row(self, rows: Sequence[int], envs: Sequence[int], answers: list[Any]) -> list[Any]:
        by_copy = dict(zip(envs, answers))
        return [by_copy[int(r) % self.num_rows // self.num_agents] for r in rows]

    def read(self, batch: Batch, own_arrays: bool, same_step: bool, reward_dtype: type) -> Rows:
        """The rows of ``batch`` (see :func:`read_rows`)."""
        return read_rows(batch, self.plan, own_arrays, same_step, reward_dtype)


def plan_copies(parallel_env: Any, num_copies: int) -> AgentPlan:
    """Check ``parallel_env`` (its agents must share their spaces) and ``num_copies``, before any
    process starts."""
    if not isinstance(num_copies, (int, np.integer)) or num_copies < 1:
        raise ValueError(f"the number of copies must be an int >= 1, got {num_copies!r}")
    agents, observation_space, action_space = agent_spaces(parallel_env)
    return AgentPlan(agents, observation_space, action_space, int(num_copies))


def start_copies(
    parallel_env: Any, num_copies: int, num_cpus: int, autoreset: AutoReset, options: dict[str, Any]
) -> tuple[AgentPlan, VecRun]:
    """``num_copies`` copies of ``parallel_env`` checked (:func:`plan_copies`, before any process
    starts), then run on ``num_cpus`` worker processes (0: vecshm's default plan), errors naming
    copies; ``options``: vecshm's, as :func:`vecshm.options.resolved` gives them
    (:class:`~vecshm.options.StartOptions`, less ``copy``, which is the facade's; ``batch_size``
    counts copies)."""
    plan = plan_copies(parallel_env, num_copies)
    if options["device"] is not None:
        raise ValueError(
            "device= is not supported by vecshm.pettingzoo: its rows come as numpy arrays; pass "
            "pin_memory=True for fast copies to a GPU (torch.as_tensor(obs).to('cuda'), or SB3's obs_as_tensor)"
        )
    fns = [CopyOf(parallel_env)] * plan.num_copies
    try:
        return plan, VecRun(fns, options_for_copies(fns, num_cpus, options), autoreset=autoreset)
    except (WorkerError, WorkerDiedError) as error:
        CopyRows(plan).raise_named(error)


def options_for_copies(fns: list[Any], num_cpus: int, options: dict[str, Any]) -> dict[str, Any]:
    """vecshm's ``options`` for copies made by ``fns`` on SuperSuit's ``num_cpus`` worker processes
    (0: vecshm's default plan), the start method, unless given, multiprocessing's default, as
    SuperSuit's processes (and AsyncVectorEnv) take it."""
    if not isinstance(num_cpus, (int, np.integer)) or num_cpus < 0:
        raise ValueError(f"num_cpus must be an int >= 0 (0: vecshm's default plan), got {num_cpus!r}")
    if num_cpus and options.get("envs_per_worker") is None:
        options = {**options, "envs_per_worker": -(-len(fns) // min(int(num_cpus), len(fns)))}
    if options.get("start_method") is None:
        options = {**options, "start_method": gymnasium_start_method(_user_frame(), fns)}
    return options


def describe(venv: Any) -> str:
    """A multi-agent vec env's ``repr``: its copies, agents and rows, and whether it is open."""
    plan = getattr(venv, "agent_plan", None)
    if plan is None:
        return f"{type(venv).__name__}(<not started>)"
    state = "closed" if venv.closed else "open"
    return f"{type(venv).__name__}(copies={plan.num_copies}, agents={len(plan.agents)}, rows={plan.num_rows}, {state})"


def copies_named(error: BaseException) -> BaseException:
    """An error of the engine (which calls a copy an env) naming copies: ``copy 1 raised ...``,
    ``worker 1 (copies 2-3) was killed``; any other error as it is."""
    if isinstance(error, WorkerError) and error.record is not None:
        return remote_errors([e.record for e in error.errors or [error] if e.record is not None], "copy")
    if isinstance(error, WorkerDiedError):
        message = re.sub(r"\((envs?) ", lambda m: "(copies " if m.group(1) == "envs" else "(copy ", str(error), count=1)
        return type(error)(message, error.env_indices, error.exitcode)
    return error


def _user_frame() -> Any:
    """The frame of the code that called into vecshm (whether its script can be imported by a worker)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("vecshm."):
        frame = frame.f_back
    return frame


def to_copies(actions: Any, plan: AgentPlan, copies: int) -> Any:
    """A batch of row actions (one row per agent of each of ``copies`` copies) as the copies' actions."""
    rows = copies * len(plan.agents)
    if isinstance(actions, dict):
        return {key: to_copies(value, plan, copies) for key, value in actions.items()}
    if isinstance(actions, tuple):
        return tuple(to_copies(value, plan, copies) for value in actions)
    actions = np.asarray(actions)
    if actions.ndim == 0 or actions.shape[0] != rows:
        raise ValueError(
            f"expected actions with one row per agent of each copy ({copies} copies x {len(plan.agents)} agents "
            f"= {rows} rows), got an array of shape {actions.shape}"
        )
    return actions.reshape(copies, len(plan.agents), *actions.shape[1:])


class Rows(NamedTuple):
    """A batch's results as rows (see the module). ``finals`` (SAME_STEP) names, by position in the
    batch, the copies whose episode ended (all of their agents done) and which were reset in the
    same step: ``obs`` holds the reset's rows, and ``finals[k]`` the copy's last observation (a dict
    of its agents' rows, ``"obs"`` among them); ``infos[k]``: each agent's info of the step (of the
    reset, for a copy ``finals`` names), ``final_infos[k]`` those of the last step; ``restarted``:
    positions of copies a worker restart ended (every present agent truncated)."""

    copy_ids: list[int]
    obs: Any
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    present: np.ndarray
    finals: dict[int, Any]
    infos: list[list[dict[str, Any]]]
    final_infos: dict[int, list[dict[str, Any]]]
    restarted: frozenset[int]


def _flat(value: Any, rows: int) -> Any:
    """``(copies, agents, ...)`` leaves as ``(rows, ...)`` views."""
    if isinstance(value, dict):
        return {key: _flat(leaf, rows) for key, leaf in value.items()}
    if isinstance(value, tuple):
        return tuple(_flat(leaf, rows) for leaf in value)
    return value.reshape(rows, *value.shape[2:])


def row_of(value: Any, a: int) -> Any:
    """Row ``a`` of a batched observation (a dict or tuple of arrays, or an array), copied."""
    if isinstance(value, dict):
        return {key: row_of(leaf, a) for key, leaf in value.items()}
    if isinstance(value, tuple):
        return tuple(row_of(leaf, a) for leaf in value)
    return np.array(value[a])


def _agent_infos(info: dict[str, Any], num_agents: int) -> list[dict[str, Any]]:
    agents = info.get("agents")
    return [dict(one) for one in agents] if agents is not None else [{} for _ in range(num_agents)]


def read_rows(
    batch: Batch, plan: AgentPlan, own_arrays: bool, same_step: bool, reward_dtype: type = np.float64
) -> Rows:
    """The rows of ``batch`` (see :class:`Rows`), rewards in ``reward_dtype`` (SB3's float32, Gymnasium's
    float64); ``own_arrays``: the observations copied out of the segment (the facade's ``copy`` option),
    else lent views."""
    a = len(plan.agents)
    ids = batch.ids
    rows = len(ids) * a
    by_copy = batch.observations(own_arrays)  # each copy's observation: its agents' rows and flags
    rewards = by_copy["reward"].reshape(rows).astype(reward_dtype)
    terminated = by_copy["terminated"].reshape(rows).astype(bool)
    truncated = by_copy["truncated"].reshape(rows).astype(bool)
    present = by_copy["present"].reshape(rows).astype(bool)
    infos = [_agent_infos(info, a) for info in batch.infos()]
    ended = (batch.terminated | batch.truncated).nonzero()[0].tolist()
    finals: dict[int, Any] = {}
    final_infos: dict[int, list[dict[str, Any]]] = {}
    restarted = frozenset(k for k, i in enumerate(ids) if i in batch.restarted) if batch.restarted else frozenset()
    if ended and same_step:
        for k, info in zip(ended, batch.infos([ids[k] for k in ended], "final")):
            final = finals[k] = batch.final_observation(ids[k])
            final_infos[k] = _agent_infos(info, a)
            if k not in restarted:  # the last step's rewards and flags, with the reset's observations
                span = slice(k * a, (k + 1) * a)
                rewards[span] = final["reward"]
                terminated[span] = final["terminated"].astype(bool)
                truncated[span] = final["truncated"].astype(bool)
    for k in restarted:  # the step was lost: every agent present in the last observation is truncated
        last = finals[k] if k in finals else {"present": by_copy["present"][k]}
        span = slice(k * a, (k + 1) * a)
        rewards[span] = 0.0
        terminated[span] = False
        truncated[span] = np.asarray(last["present"], dtype=bool)
    return Rows(
        list(ids), _flat(by_copy["obs"], rows), rewards, terminated, truncated, present, finals, infos, final_infos,
        restarted,
    )  # fmt: skip
