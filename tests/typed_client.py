"""A user's code, checked with ``mypy --strict`` (``make typecheck``): vecshm's public API as typed.

Never run by pytest (its name does not start with ``test_``); it only has to type-check, so that
``py.typed`` promises something. It uses each facade the way its peer's users do.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from numpy.typing import NDArray

import vecshm
from vecshm import (
    DummyVecEnv,
    ShmVecEnv,
    ShmVectorEnv,
    VecEnv,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
    WorkerError,
    make_vec_env,
    topology,
)


def make_cartpole() -> gym.Env[Any, Any]:
    return gym.make("CartPole-v1")


def sb3_style(num_envs: int) -> float:
    """SubprocVecEnv's users: step, reset, wrappers, env methods by index."""
    venv: VecEnv = ShmVecEnv([make_cartpole for _ in range(num_envs)], start_method="forkserver", envs_per_worker=2)
    venv = VecNormalize(VecMonitor(venv), norm_reward=True)
    venv.seed(0)
    obs = venv.reset()
    actions: NDArray[np.int64] = np.zeros(num_envs, dtype=np.int64)
    total = 0.0
    for _ in range(3):
        obs, rewards, dones, infos = venv.step(actions)
        total += float(np.sum(rewards))
        for info in infos:
            if "terminal_observation" in info:
                total += 0.0
    specs: list[Any] = venv.get_attr("spec", indices=[0])
    wrapped: list[bool] = venv.env_is_wrapped(gym.Wrapper)
    assert specs and wrapped and obs is not None and dones is not None
    venv.close()
    return total


def sb3_helpers() -> None:
    venv = make_vec_env("CartPole-v1", n_envs=2, vec_env_cls=ShmVecEnv)
    stacked = VecFrameStack(venv, n_stack=4)
    stacked.close()
    DummyVecEnv([make_cartpole]).close()


def gymnasium_style(num_envs: int) -> int:
    """AsyncVectorEnv's users: the 5-tuple, dict infos, autoreset modes, a context manager."""
    with ShmVectorEnv([make_cartpole] * num_envs, copy=True) as envs:
        obs, infos = envs.reset(seed=0)
        steps = 0
        for _ in range(3):
            obs, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
            steps += int(np.count_nonzero(terminations | truncations)) + 1
        names: tuple[Any, ...] = envs.get_attr("spec")
        assert names and obs is not None and rewards is not None
    return steps


def async_batches() -> list[int]:
    """EnvPool's users: send/recv with env ids, batches smaller than the vec env."""
    envs = ShmVectorEnv([make_cartpole] * 4, batch_size=2)
    seen: list[int] = []
    try:
        envs.async_reset(seed=0)
        for _ in range(4):
            obs, rewards, terminations, truncations, infos, env_ids = envs.recv()
            seen.extend(int(i) for i in env_ids)
            envs.send(np.zeros(len(env_ids), dtype=np.int64), env_ids)
    except WorkerError as error:
        print(f"env failed: {error}")
    finally:
        envs.close()
    return seen


def inspection() -> str:
    cores = topology(8)
    return f"{vecshm.__version__}: {cores.logical_cores} cores"


def multi_agent(parallel_env: Any) -> int:
    """SuperSuit's users: agents as rows, the drop-in functions and the SB3 class."""
    from vecshm.pettingzoo import AgentVecEnv, concat_vec_envs_v1, pettingzoo_env_to_vec_env_v1

    venv = concat_vec_envs_v1(pettingzoo_env_to_vec_env_v1(parallel_env), 2, num_cpus=2, base_class="stable_baselines3")
    assert isinstance(venv, AgentVecEnv)
    try:
        venv.seed(0)
        venv.reset()
        obs, rewards, dones, infos = venv.step(np.zeros(venv.num_envs, dtype=np.int64))
        present: np.ndarray = venv.present
        return int(present.sum()) + len(infos)
    finally:
        venv.close()
