"""Multi-agent workloads (PettingZoo parallel envs, every agent a row) and the vectorizers compared on them.

An env-step here is one agent's step (one row), as the vec envs count them; ``n`` is the number of
copies of the env. The systems: vecshm's :class:`~vecshm.pettingzoo.AgentVecEnv`, its
``concat_vec_envs_v1`` in SuperSuit's shape (Gymnasium's base class, infos a list), and SuperSuit as
PettingZoo's tutorials use it (``concat_vec_envs_v1(..., base_class="stable_baselines3")``), in
this process (``num_cpus=0``) and on one process per usable core. The ideal: one process per
usable core (at most one per copy), each stepping its share of the copies in a plain loop.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vecshm.bench.systems import Stepper, System
from vecshm.bench.workloads import CPU_BOUND_SECONDS, WORKLOADS, step_time
from vecshm.user_env import make_named_env

__all__ = [
    "ALL_WORKLOADS",
    "MultiAgentWorkload",
    "MULTIAGENT_SYSTEMS",
    "MULTIAGENT_WORKLOADS",
    "SUPERSUIT_PROCESSES",
    "user_agent_workload",
]

SUPERSUIT_PROCESSES = "SuperSuit (num_cpus=cores)"


@dataclass(frozen=True)
class MultiAgentWorkload:
    """A PettingZoo env (``module`` has ``parallel_env(**kwargs)``, or ``maker``: the user's
    ``module:callable`` of ``--env``) vectorized as rows."""

    name: str
    description: str
    module: str
    kwargs: tuple[tuple[str, object], ...] = ()
    default_n: int = 4  # copies, unless -n says otherwise
    cpu_bound: bool = True
    baseline: str = SUPERSUIT_PROCESSES
    unit: str = "copies"
    requires: tuple[str, ...] = ("pettingzoo",)
    maker: str | None = None
    user: bool = False

    def parallel_env(self) -> Any:
        if self.maker is not None:
            return make_named_env(self.maker, dict(self.kwargs))
        return importlib.import_module(self.module).parallel_env(**dict(self.kwargs))

    def available(self) -> str | None:
        for module in self.requires:
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed (pip install 'vecshm[pettingzoo]')"
        return None

    def num_agents(self) -> int:
        return len(self.parallel_env().possible_agents)

    def actions(self, n_copies: int, count: int = 64, seed: int = 0) -> list[np.ndarray]:
        """A fixed cycle of row-action batches (one row per agent of each copy), the same for every system."""
        env = self.parallel_env()
        space = env.action_space(env.possible_agents[0])
        space.seed(seed)
        rows = n_copies * len(env.possible_agents)
        return [np.stack([np.asarray(space.sample()) for _ in range(rows)]) for _ in range(count)]

    def ideal_steps(self, n_local: int) -> Callable[[int], int]:
        """The ideal's loop body in one process: step copy ``k % n_local`` of this process's on its
        ``k``-th actions (a dict, as a plain PettingZoo loop has them), resetting a copy once it has no
        agent left; each call returns the env-steps it did (the agents stepped)."""
        envs = [self.parallel_env() for _ in range(n_local)]
        for k, env in enumerate(envs):
            env.reset(seed=k)
        agents = envs[0].possible_agents
        cycle = self.actions(1)

        def step(k: int) -> int:
            env = envs[k % n_local]
            row = cycle[(k // n_local) % len(cycle)]
            live = env.agents
            env.step({agent: row[j] for j, agent in enumerate(agents) if agent in live})
            if not env.agents:
                env.reset()
            return len(live)

        return step


def _agent_vec_env(**options: Any) -> Callable[[Any, int], Stepper]:
    def build(workload: MultiAgentWorkload, n_copies: int) -> Stepper:
        from vecshm.pettingzoo import AgentVecEnv

        venv = AgentVecEnv(workload.parallel_env(), n_copies, **options)
        return Stepper(venv, venv.step, venv.reset, envs_per_step=venv.num_envs)

    return build


def _supersuit_shape(workload: Any, n_copies: int) -> Stepper:
    """vecshm's ``concat_vec_envs_v1`` with SuperSuit's default ``base_class="gymnasium"``: SuperSuit's
    shape (infos a list of dicts) over the same rows."""
    from vecshm.pettingzoo import concat_vec_envs_v1

    venv = concat_vec_envs_v1(workload.parallel_env(), n_copies)
    return Stepper(venv, venv.step, venv.reset, envs_per_step=venv.num_envs)


def _supersuit(num_cpus: int | None) -> Callable[[Any, int], Stepper]:
    """SuperSuit as its tutorials build it; ``num_cpus`` None: one process per usable core."""

    def build(workload: MultiAgentWorkload, n_copies: int) -> Stepper:
        import supersuit as ss

        from vecshm.shared.affinity import usable_cores

        cpus = len(usable_cores()) if num_cpus is None else num_cpus
        rows = ss.pettingzoo_env_to_vec_env_v1(workload.parallel_env())
        venv = ss.concat_vec_envs_v1(rows, n_copies, num_cpus=cpus, base_class="stable_baselines3")
        return Stepper(venv, venv.step, venv.reset, envs_per_step=venv.num_envs)

    return build


MULTIAGENT_SYSTEMS: dict[str, System] = {
    s.name: s
    for s in [
        System("vecshm AgentVecEnv", _agent_vec_env(), ("pettingzoo",)),
        System("vecshm AgentVecEnv copy=False", _agent_vec_env(copy=False), ("pettingzoo",), default=False),
        System("vecshm concat_vec_envs_v1 (SuperSuit's shape)", _supersuit_shape, ("pettingzoo",)),
        System("SuperSuit (num_cpus=0, in process)", _supersuit(0), ("supersuit", "stable_baselines3")),
        System(SUPERSUIT_PROCESSES, _supersuit(None), ("supersuit", "stable_baselines3")),
    ]
}

MULTIAGENT_WORKLOADS: dict[str, MultiAgentWorkload] = {
    w.name: w
    for w in [
        MultiAgentWorkload(
            "pistonball",
            "PettingZoo Pistonball: 20 agents, 457x120x3 uint8 frames each (rows per copy: 20)",
            "pettingzoo.butterfly.pistonball_v6",
            requires=("pettingzoo", "pymunk", "pygame"),
        ),
        MultiAgentWorkload(
            "simple_spread",
            "MPE2 simple_spread: 3 agents, 18-float observations (the CPU-overhead case)",
            "mpe2.simple_spread_v3",
            default_n=8,
            requires=("pettingzoo", "mpe2"),
        ),
    ]
}

ALL_WORKLOADS: dict[str, Any] = {**WORKLOADS, **MULTIAGENT_WORKLOADS}  # what the bench's -w chooses from


def user_agent_workload(env: str, kwargs: dict[str, Any], seconds: float = 0.5) -> MultiAgentWorkload:
    """The workload of the user's PettingZoo parallel env (``--env module:callable``), a copy's step
    (every agent) timed here first: CPU-bound, with an ideal, where it takes
    :data:`~vecshm.bench.workloads.CPU_BOUND_SECONDS` or more."""
    workload = MultiAgentWorkload(env, "", env, tuple(kwargs.items()), maker=env, user=True)
    per_copy, _ = step_time(workload.ideal_steps(1), seconds)
    agents = workload.num_agents()
    description = f"your PettingZoo env, {agents} agents, {per_copy * 1e6:,.0f} us per step of a copy in one process"
    return dataclasses.replace(workload, description=description, cpu_bound=per_copy >= CPU_BOUND_SECONDS)
