"""The vectorizers compared, each behind the same two calls: ``reset()`` and ``step(actions)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from vecshm.bench.peers import PEER_SYSTEMS
from vecshm.bench.stepper import Stepper, System
from vecshm.bench.workloads import Workload

__all__ = ["System", "SYSTEMS", "USER_ENV_SYSTEMS", "Stepper", "envpool_like_ale_v5", "get_systems"]


def _stepper(venv: Any) -> Stepper:
    return Stepper(venv, venv.step, venv.reset)


def _shm(**options: Any) -> Callable[[Workload, int], Stepper]:
    def build(workload: Workload, n_envs: int) -> Stepper:
        from vecshm import ShmVecEnv

        return _stepper(ShmVecEnv(workload.factories(n_envs), **options))

    return build


def _shm_one_process(workload: Workload, n_envs: int) -> Stepper:
    """Every env in one worker process: the configuration PufferLib's one-worker row has."""
    from vecshm import ShmVecEnv

    return _stepper(ShmVecEnv(workload.factories(n_envs), envs_per_worker=n_envs))


def shm_vector(**options: Any) -> Callable[[Workload, int], Stepper]:
    """``ShmVectorEnv`` stepped synchronously; ``options`` go to its constructor (benchmarks/ vary them)."""

    def build(workload: Workload, n_envs: int) -> Stepper:
        from vecshm import ShmVectorEnv

        return _stepper(ShmVectorEnv(workload.factories(n_envs), **options))

    return build


def shm_async(envs_per_worker: int | None = None, **options: Any) -> Callable[[Workload, int], Stepper]:
    """Half the envs per recv(): the learner takes whichever half finished first.

    ``envs_per_worker`` by default: the most that divides the batch, and at most ``n_envs / cores``;
    ``options`` go to ``ShmVectorEnv`` (e.g. a placement).
    """

    def build(workload: Workload, n_envs: int) -> Stepper:
        from vecshm import ShmVectorEnv
        from vecshm.shared.affinity import usable_cores

        batch = n_envs // 2
        per_worker = envs_per_worker or next(
            d for d in range(max(1, n_envs // len(usable_cores())), 0, -1) if batch % d == 0
        )
        env = ShmVectorEnv(workload.factories(n_envs), batch_size=batch, envs_per_worker=per_worker, **options)

        def reset() -> None:
            env.async_reset(seed=0)  # drains whatever is still in flight first

        def step(actions: np.ndarray) -> Any:
            result = env.recv()
            env.send(actions[:batch], result[-1])
            return result

        return Stepper(env, step, reset, envs_per_step=batch)

    return build


def _ray_vec_env(workload: Workload, n_envs: int) -> Stepper:
    """One Ray actor holding every core, so its ShmVecEnv has the same workers as the one measured
    beside it: the difference is the Ray hop (a task per step, results through the object store)."""
    import ray

    from vecshm.ray import RayVecEnv
    from vecshm.shared.affinity import usable_cores

    cores = len(usable_cores())
    if not ray.is_initialized():
        ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False, configure_logging=False)
    return _stepper(RayVecEnv(workload.factories(n_envs), num_actors=1, actor_options={"num_cpus": cores}))


def _vecshm_dummy(workload: Workload, n_envs: int) -> Stepper:
    from vecshm import DummyVecEnv

    return _stepper(DummyVecEnv(workload.factories(n_envs)))


def _sb3_subproc(workload: Workload, n_envs: int) -> Stepper:
    from stable_baselines3.common.vec_env import SubprocVecEnv

    return _stepper(SubprocVecEnv(workload.factories(n_envs)))


def _sb3_dummy(workload: Workload, n_envs: int) -> Stepper:
    from stable_baselines3.common.vec_env import DummyVecEnv

    return _stepper(DummyVecEnv(workload.factories(n_envs)))


def _gym_async(workload: Workload, n_envs: int) -> Stepper:
    import gymnasium as gym

    return _stepper(gym.vector.AsyncVectorEnv(workload.factories(n_envs), shared_memory=True))


def _gym_sync(workload: Workload, n_envs: int) -> Stepper:
    import gymnasium as gym

    return _stepper(gym.vector.SyncVectorEnv(workload.factories(n_envs)))


def _envpool_make(workload: Workload, n_envs: int, batch_size: int | None = None) -> Any:
    return envpool_like_ale_v5(workload.env_id, n_envs, batch_size)


def envpool_like_ale_v5(env_id: str, n_envs: int, batch_size: int | None = None) -> Any:
    """EnvPool's Gymnasium pool for the Atari game of ``env_id`` (``ALE/Pong-v5`` or ``Pong-v5``),
    configured like Gymnasium's ``ALE/*-v5``: RGB 210x160 frames, frame skip 4, sticky actions, no
    stacking, grayscale, resizing, life loss or reward clipping (EnvPool's Atari defaults differ).
    Its frames come channel-first (3, 210, 160)."""
    import envpool

    return envpool.make_gymnasium(
        env_id.split("/")[-1],
        num_envs=n_envs,
        batch_size=batch_size or n_envs,
        img_height=210,
        img_width=160,
        gray_scale=False,
        stack_num=1,
        frame_skip=4,
        repeat_action_probability=0.25,
        noop_max=1,
        episodic_life=False,
        reward_clip=False,
    )


def envpool_sync(workload: Workload, n_envs: int) -> Stepper:
    """EnvPool's synchronous mode: every env per step, as the vec envs beside it."""
    return _stepper(_envpool_make(workload, n_envs))


def envpool_async(workload: Workload, n_envs: int) -> Stepper:
    """EnvPool's own async mode: ``batch_size = n/2``, recv() then send() to the envs it returned."""
    batch = n_envs // 2
    env = _envpool_make(workload, n_envs, batch)

    def step(actions: np.ndarray) -> Any:
        result = env.recv()
        env.send(actions[:batch], result[4]["env_id"])
        return result

    return Stepper(env, step, env.async_reset, envs_per_step=batch)


SYSTEMS: dict[str, System] = {
    s.name: s
    for s in [
        System("vecshm ShmVecEnv", _shm()),
        System("vecshm ShmVecEnv copy=False", _shm(copy=False), default=False),
        System("vecshm ShmVecEnv pinned (auto)", _shm(cpu_affinity="auto"), default=False),
        System("vecshm ShmVecEnv envs_per_worker=1", _shm(envs_per_worker=1), default=False),
        # (forked workers, as PufferLib's and Gymnasium's on Linux: the default is SB3's forkserver)
        System("vecshm ShmVecEnv start_method=fork", _shm(start_method="fork"), default=False),
        System("vecshm ShmVecEnv (1 worker process)", _shm_one_process),
        System("vecshm ShmVectorEnv", shm_vector()),
        System("vecshm ShmVectorEnv async (batch n/2)", shm_async()),
        System("vecshm ShmVectorEnv async restart (batch n/2)", shm_async(on_worker_failure="restart"), default=False),
        System("vecshm DummyVecEnv", _vecshm_dummy, default=False),
        System("vecshm RayVecEnv (1 actor)", _ray_vec_env, ("ray",), default=False),
        System("SB3 SubprocVecEnv", _sb3_subproc, ("stable_baselines3",)),
        System("SB3 DummyVecEnv", _sb3_dummy, ("stable_baselines3",)),
        System("Gymnasium AsyncVectorEnv(shared_memory=True)", _gym_async),
        System("Gymnasium SyncVectorEnv", _gym_sync),
        System("EnvPool", envpool_sync, ("envpool",)),
        System("EnvPool async (batch n/2)", envpool_async, ("envpool",)),
        *PEER_SYSTEMS,
    ]
}

BASELINE = "SB3 SubprocVecEnv"

# For the user's own env (--env): the default comparison, and every other peer, each skipped with
# its reason where it cannot run here (not installed; EnvPool runs only its own envs).
USER_ENV_SYSTEMS = [name for name, s in SYSTEMS.items() if s.default or name.startswith(("Tianshou", "TorchRL"))]


def get_systems(names: list[str] | None, table: dict[str, System] | None = None) -> list[System]:
    """The systems ``names`` choose from ``table`` (default: the host benchmark's): None, the defaults;
    ``["all"]``, every one; else exact names or substrings."""
    table = SYSTEMS if table is None else table
    if not names:
        return [s for s in table.values() if s.default]
    if names == ["all"]:
        return list(table.values())
    chosen = []
    for name in names:
        matches = [s for key, s in table.items() if key == name] or [
            s for key, s in table.items() if name.lower() in key.lower()
        ]
        if not matches:
            raise ValueError(f"unknown system {name!r}; choose from: {', '.join(table)}")
        chosen += [m for m in matches if m not in chosen]
    return chosen
