"""``python -m vecshm.bench --device cuda``: every row ends each step with its observations on the GPU.

The peers copy as their users do, ``torch.as_tensor(obs).to(device)`` from the arrays they return
(ordinary memory). vecshm's rows: the same from its segment in ordinary memory, from the segment
registered with CUDA (``pin_memory=True``), under Gymnasium's own ``NumpyToTorch`` wrapper (the
conventional path gets the registered speed too), and ``device=`` (copies issued without blocking).
The rows keep the host benchmark's names for the peers, so that the ratio column is still to
``SB3 SubprocVecEnv``, here followed by its copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from vecshm.bench.systems import (
    BASELINE,
    Stepper,
    System,
    _gym_async,
    _sb3_subproc,
    _shm,
    envpool_async,
    envpool_sync,
    shm_async,
    shm_vector,
)
from vecshm.bench.workloads import Workload

__all__ = ["device_systems", "cuda_unavailable"]


def cuda_unavailable(device: str) -> str | None:
    """Why ``device`` cannot be measured here (None: it can)."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        return f"torch.cuda.is_available() is False (torch {torch.__version__})"
    return None


def _copied(build: Callable[[Workload, int], Stepper], device: str) -> Callable:
    """``build``'s stepper, each step followed by ``torch.as_tensor(obs).to(device)`` (every system's
    step returns its observations first)."""

    def wrapped(workload: Workload, n_envs: int) -> Stepper:
        import torch

        stepper = build(workload, n_envs)
        inner = stepper.step

        def step(actions: np.ndarray) -> Any:
            result = inner(actions)
            return torch.as_tensor(result[0]).to(device), result

        return Stepper(stepper.env, step, stepper.reset, stepper.envs_per_step)

    return wrapped


def _numpy_to_torch(device: str) -> Callable[[Workload, int], Stepper]:
    def build(workload: Workload, n_envs: int) -> Stepper:
        from gymnasium.wrappers.vector import NumpyToTorch

        from vecshm import ShmVectorEnv

        envs = NumpyToTorch(ShmVectorEnv(workload.factories(n_envs), pin_memory=True), device=device)
        return Stepper(envs, envs.step, lambda: envs.reset(seed=0))

    return build


def device_systems(device: str) -> dict[str, System]:
    """The rows of a ``--device`` run (their names say what each does after its step)."""
    to = f"+ .to({device})"
    rows = [
        System(BASELINE, _copied(_sb3_subproc, device), ("stable_baselines3",)),
        System("Gymnasium AsyncVectorEnv(shared_memory=True)", _copied(_gym_async, device)),
        System("EnvPool", _copied(envpool_sync, device), ("envpool",)),
        System("EnvPool async (batch n/2)", _copied(envpool_async, device), ("envpool",)),
        System(f"vecshm ShmVecEnv {to}", _copied(_shm(), device)),
        System(f"vecshm ShmVecEnv pin_memory {to}", _copied(_shm(pin_memory=True), device)),
        System(f"vecshm ShmVectorEnv {to}", _copied(shm_vector(), device)),
        System(f"vecshm ShmVectorEnv pin_memory {to}", _copied(shm_vector(pin_memory=True), device)),
        System("vecshm ShmVectorEnv pin_memory + NumpyToTorch", _numpy_to_torch(device), ("array_api_compat",)),
        System(f"vecshm ShmVectorEnv device={device}", shm_vector(device=device)),
        System(f"vecshm ShmVectorEnv async (batch n/2) {to}", _copied(shm_async(), device)),
        System(f"vecshm ShmVectorEnv async (batch n/2) pin_memory {to}", _copied(shm_async(pin_memory=True), device)),
        System(f"vecshm ShmVectorEnv async (batch n/2) device={device}", shm_async(device=device)),
    ]
    if not str(device).startswith("cuda"):  # (page-locking needs CUDA)
        rows = [s for s in rows if "pin_memory" not in s.name]
    return {s.name: s for s in rows}
