"""The other vectorizers a user would weigh: PufferLib, Tianshou and TorchRL, each configured as
its own docs recommend for throughput (docs/benchmarks.md, "How each peer was configured").

- **PufferLib** (``pufferlib-core``): ``pufferlib.vector.Multiprocessing`` over envs wrapped in
  ``GymnasiumPufferEnv``, with one worker process, and with one per core (its docs: "1 process per
  hardware core"; ``overwork=True`` where the core count it reads is the physical one), and its
  zero-copy async batches of ``n/2`` (``recv`` then ``send``, with one worker per core).
- **Tianshou**: ``ShmemVectorEnv`` (shared memory, one process per env), synchronous, and with
  ``wait_num = n/2`` for its async mode (it returns every env that finished, at least ``wait_num``).
- **TorchRL**: ``ParallelEnv`` over ``GymEnv`` (one process per env, integer actions), stepped with
  ``step_and_maybe_reset``, as its collectors do.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from vecshm.bench.stepper import Stepper, System
from vecshm.bench.workloads import Workload, make_env

__all__ = ["PEER_SYSTEMS"]


def _cores() -> int:
    from vecshm.shared.affinity import usable_cores

    return len(usable_cores())


def _per_core(n_envs: int) -> int:
    """PufferLib's workers, one per core: the most that divides ``n_envs``, at most the cores."""
    return next(w for w in range(min(n_envs, _cores()), 0, -1) if n_envs % w == 0)


def _puffer_env(env_id: str, kwargs: dict[str, Any], buf: Any = None, seed: int = 0) -> Any:
    """One env as PufferLib's workers build it: they pass the slice of their buffers it writes to."""
    import pufferlib.emulation

    creator = functools.partial(make_env, env_id, kwargs)
    return pufferlib.emulation.GymnasiumPufferEnv(env_creator=creator, buf=buf, seed=seed)


def _puffer_make(workload: Workload, n_envs: int, workers: int, batch_size: int) -> Any:
    import pufferlib.vector

    return pufferlib.vector.make(
        functools.partial(_puffer_env, workload.env_id, dict(workload.kwargs)),
        num_envs=n_envs,
        num_workers=workers,
        batch_size=batch_size,
        backend=pufferlib.vector.Multiprocessing,
        overwork=True,
    )


def puffer_sync(one_worker: bool) -> Callable[[Workload, int], Stepper]:
    def build(workload: Workload, n_envs: int) -> Stepper:
        env = _puffer_make(workload, n_envs, 1 if one_worker else _per_core(n_envs), n_envs)
        return Stepper(env, env.step, lambda: env.reset(seed=0))

    return build


def puffer_async(workload: Workload, n_envs: int) -> Stepper:
    batch = n_envs // 2
    env = _puffer_make(workload, n_envs, _per_core(n_envs), batch)

    def step(actions: np.ndarray) -> Any:
        result = env.recv()
        env.send(actions[:batch])
        return result

    return Stepper(env, step, lambda: env.async_reset(0), envs_per_step=batch)


def tianshou_shmem(wait: bool) -> Callable[[Workload, int], Stepper]:
    def build(workload: Workload, n_envs: int) -> Stepper:
        from tianshou.env import ShmemVectorEnv

        env = ShmemVectorEnv(workload.factories(n_envs), wait_num=n_envs // 2 if wait else None)
        if not wait:
            return Stepper(env, env.step, env.reset)
        ready, counted = np.arange(n_envs), 0

        def step(actions: np.ndarray) -> Any:
            nonlocal ready, counted
            result = env.step(actions[: len(ready)], ready)
            ready = np.array([info["env_id"] for info in result[-1]])
            counted += len(ready)
            return result

        def reset() -> None:
            nonlocal ready
            env.reset()  # (waits for every env: nothing is left in flight)
            ready = np.arange(n_envs)

        return Stepper(env, step, reset, env_steps=lambda: counted)

    return build


def _torchrl_env(env_id: str, kwargs: dict[str, Any]) -> Any:
    """The env wrapped as TorchRL wraps a Gymnasium env it did not make itself (any id or callable)."""
    from torchrl.envs import GymWrapper

    return GymWrapper(make_env(env_id, kwargs), categorical_action_encoding=True)


def torchrl_parallel(workload: Workload, n_envs: int) -> Stepper:
    import torch
    from torchrl.envs import ParallelEnv

    env = ParallelEnv(n_envs, functools.partial(_torchrl_env, workload.env_id, dict(workload.kwargs)))
    td: Any = None  # the next step's input, as the last step (or the reset) left it

    def reset() -> None:
        nonlocal td
        td = env.reset()

    def step(actions: np.ndarray) -> Any:
        nonlocal td
        td.set("action", torch.as_tensor(actions))
        out, td = env.step_and_maybe_reset(td)
        return out

    return Stepper(env, step, reset)


PEER_SYSTEMS = [
    System("PufferLib Multiprocessing (1 worker)", puffer_sync(one_worker=True), ("pufferlib.vector",)),
    System("PufferLib Multiprocessing (1 worker per core)", puffer_sync(one_worker=False), ("pufferlib.vector",)),
    System("PufferLib Multiprocessing async (batch n/2)", puffer_async, ("pufferlib.vector",)),
    System("Tianshou ShmemVectorEnv", tianshou_shmem(wait=False), ("tianshou",), default=False),
    System("Tianshou ShmemVectorEnv async (wait_num n/2)", tianshou_shmem(wait=True), ("tianshou",), default=False),
    System("TorchRL ParallelEnv", torchrl_parallel, ("torchrl",), default=False),
]
