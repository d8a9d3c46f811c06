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

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from vecshm.pettingzoo.agent_vec_env import AgentVecEnv
from vecshm.pettingzoo.agent_vector_env import AgentVectorEnv
from vecshm.pettingzoo.copies import options_for_copies
from vecshm.pettingzoo.rows import EnvCopy
from vecshm.pettingzoo.single_agent import OneAgentEnv
from vecshm.pettingzoo.supersuit_shape import AgentRowsEnv, SuperSuitVecEnv
from vecshm.shared.errors import NotAParallelEnvError
from vecshm.vec_env.shm_vec_env import ShmVecEnv

__all__ = [
    "AgentRowsEnv",
    "AgentVecEnv",
    "AgentVectorEnv",
    "NotAParallelEnvError",
    "SuperSuitVecEnv",
    "concat_vec_envs_v1",
    "pettingzoo_env_to_vec_env_v1",
]


def pettingzoo_env_to_vec_env_v1(parallel_env: Any) -> AgentRowsEnv:
    """SuperSuit's ``pettingzoo_env_to_vec_env_v1``: ``parallel_env``'s agents as rows, a vec env in
    SuperSuit's shape by itself (its worker process starts at its first use), or what
    :func:`concat_vec_envs_v1` copies. Its spaces are checked here, before any process starts:
    every agent must share one observation and one action space (a ``SpaceMismatchError``, also an
    ``AssertionError`` as SuperSuit's, names two that do not); what is no ``ParallelEnv`` is a
    ``NotAParallelEnvError`` (a ``TypeError``, and an ``AssertionError`` as SuperSuit's)."""
    return AgentRowsEnv(parallel_env)


def concat_vec_envs_v1(
    vec_env: Any, num_vec_envs: int, num_cpus: int = 0, base_class: str = "gymnasium", **options: Any
) -> SuperSuitVecEnv | AgentVecEnv | ShmVecEnv:
    """SuperSuit's ``concat_vec_envs_v1``: ``num_vec_envs`` copies of ``vec_env`` on shared memory.

    ``vec_env``: what :func:`pettingzoo_env_to_vec_env_v1` returns (SuperSuit's own too), a
    ``ParallelEnv``, or a Gymnasium env (each copy then one row).
    ``num_cpus``: worker processes; ``0`` is vecshm's default plan (one process per usable core),
    where SuperSuit's ``0`` steps every copy in the calling process, which vecshm never does.
    ``base_class``: ``"gymnasium"`` (a :class:`SuperSuitVecEnv`, in SuperSuit's conventions) or
    ``"stable_baselines3"`` (an :class:`AgentVecEnv`, SB3's ``VecEnv``; for a Gymnasium env, a
    :class:`~vecshm.ShmVecEnv`). ``options``: vecshm's own keywords, as those classes take them
    (``copy``, ``batch_size``, ``step_timeout``, ``cpu_affinity``, ``on_worker_failure``,
    ``start_method``, ...).
    """
    if base_class not in ("gymnasium", "stable_baselines3"):
        raise ValueError(
            f"vecshm.pettingzoo supports base_class 'gymnasium' and 'stable_baselines3', got {base_class!r} "
            "(SuperSuit's 'stable_baselines' is for Stable-Baselines 2, which runs on Gym, not Gymnasium)"
        )
    if isinstance(vec_env, gym.Env):
        if base_class == "stable_baselines3":
            return _sb3_copies(vec_env, num_vec_envs, num_cpus, options)
        return SuperSuitVecEnv(OneAgentEnv(vec_env), num_vec_envs, num_cpus, **options)
    parallel_env = _parallel_env_of(vec_env)
    if base_class == "gymnasium":
        return SuperSuitVecEnv(parallel_env, num_vec_envs, num_cpus, **options)
    return AgentVecEnv(parallel_env, num_vec_envs, num_cpus, **options)


def _parallel_env_of(vec_env: Any) -> Any:
    """The ``ParallelEnv`` to copy: that of :func:`pettingzoo_env_to_vec_env_v1`'s vec env (or of
    SuperSuit's ``MarkovVectorEnv``), or ``vec_env`` itself."""
    if isinstance(vec_env, AgentRowsEnv) or type(vec_env).__name__ == "MarkovVectorEnv":
        return vec_env.par_env
    if isinstance(vec_env, gym.vector.VectorEnv) or hasattr(vec_env, "num_envs"):
        raise NotAParallelEnvError(
            f"concat_vec_envs_v1 copies a ParallelEnv, pettingzoo_env_to_vec_env_v1's vec env or a Gymnasium env, "
            f"not a vec env of {getattr(vec_env, 'num_envs', '?')} envs ({type(vec_env).__name__})"
        )
    return vec_env


def _sb3_copies(env: gym.Env, num_copies: int, num_cpus: int, options: dict[str, Any]) -> ShmVecEnv:
    """SB3's vec env of ``num_copies`` copies of the Gymnasium env ``env`` (each copied with
    cloudpickle, as SuperSuit copies it), its ``metadata`` the env's own beside SB3's render modes."""
    if not isinstance(num_copies, int) or num_copies < 1:
        raise ValueError(f"the number of copies must be an int >= 1, got {num_copies!r}")
    fns: list[Callable[[], gym.Env]] = [EnvCopy(env)] * num_copies
    venv = ShmVecEnv(fns, **options_for_copies(fns, num_cpus, options))
    venv.metadata = {**venv.metadata, **(env.metadata or {})}
    return venv
