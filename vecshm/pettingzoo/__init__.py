"""PettingZoo's parallel envs on shared memory: every agent of every copy a row, one import away from SuperSuit.

Replace SuperSuit's two vectorizing calls with these (its per-env wrappers stay as they are)::

    from vecshm.pettingzoo import concat_vec_envs_v1, pettingzoo_env_to_vec_env_v1

    env = pettingzoo_env_to_vec_env_v1(env)
    env = concat_vec_envs_v1(env, 8, num_cpus=4, base_class="stable_baselines3")

or build the vec envs directly: :class:`AgentVecEnv` (SB3's ``VecEnv``) and :class:`AgentVectorEnv`
(Gymnasium's ``VectorEnv``). Rows are (copy, agent) in ``possible_agents`` order; docs/multiagent.md
says what differs from SuperSuit and why.
"""

from __future__ import annotations

from typing import Any

from vecshm.pettingzoo.rows import agent_spaces
from vecshm.pettingzoo.sb3 import AgentVecEnv
from vecshm.pettingzoo.vector import AgentVectorEnv

__all__ = ["AgentRowsEnv", "AgentVecEnv", "AgentVectorEnv", "concat_vec_envs_v1", "pettingzoo_env_to_vec_env_v1"]


class AgentRowsEnv:
    """A ``ParallelEnv`` whose agents are to become rows (what :func:`pettingzoo_env_to_vec_env_v1`
    returns): ``num_envs`` agents sharing ``observation_space`` and ``action_space``. It steps
    nothing itself: :func:`concat_vec_envs_v1` copies its env into the workers."""

    def __init__(self, parallel_env: Any) -> None:
        self.par_env = parallel_env
        self.possible_agents, self.observation_space, self.action_space = agent_spaces(parallel_env)
        self.num_envs = len(self.possible_agents)
        self.metadata = getattr(parallel_env, "metadata", {})
        self.render_mode = getattr(getattr(parallel_env, "unwrapped", parallel_env), "render_mode", None)

    def __repr__(self) -> str:
        return f"AgentRowsEnv({self.par_env}, agents={self.num_envs})"


def pettingzoo_env_to_vec_env_v1(parallel_env: Any) -> AgentRowsEnv:
    """SuperSuit's ``pettingzoo_env_to_vec_env_v1``: ``parallel_env``'s agents as rows. Its spaces are
    checked here, before any process starts (every agent must share one observation and one action
    space: a ``SpaceMismatchError`` names two that do not)."""
    return AgentRowsEnv(parallel_env)


def concat_vec_envs_v1(
    vec_env: Any, num_vec_envs: int, num_cpus: int = 0, base_class: str = "gymnasium", **options: Any
) -> AgentVecEnv | AgentVectorEnv:
    """SuperSuit's ``concat_vec_envs_v1``: ``num_vec_envs`` copies of ``vec_env`` (from
    :func:`pettingzoo_env_to_vec_env_v1`, or a ``ParallelEnv`` itself) on shared memory.

    ``num_cpus``: worker processes; ``0`` is vecshm's default plan (one process per usable core),
    where SuperSuit's ``0`` steps every copy in the calling process, which vecshm never does.
    ``base_class``: ``"gymnasium"`` (an :class:`AgentVectorEnv`) or ``"stable_baselines3"`` (an
    :class:`AgentVecEnv`). ``options``: vecshm's own keywords, as the two classes take them
    (``copy``, ``batch_size``, ``autoreset_mode`` for Gymnasium, ``step_timeout``, ``cpu_affinity``,
    ``on_worker_failure``, ``start_method``, ...).
    """
    parallel_env = vec_env.par_env if isinstance(vec_env, AgentRowsEnv) else vec_env
    if base_class == "gymnasium":
        return AgentVectorEnv(parallel_env, num_vec_envs, num_cpus, **options)
    if base_class == "stable_baselines3":
        return AgentVecEnv(parallel_env, num_vec_envs, num_cpus, **options)
    raise ValueError(
        f"vecshm.pettingzoo supports base_class 'gymnasium' and 'stable_baselines3', got {base_class!r} "
        "(SuperSuit's 'stable_baselines' is for Stable-Baselines 2, which runs on Gym, not Gymnasium)"
    )
