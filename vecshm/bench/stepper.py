"""What every system in the bench is: a build function behind the same two calls, ``reset()`` and ``step(actions)``."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vecshm.bench.workloads import Workload

__all__ = ["Stepper", "System"]


@dataclass
class Stepper:
    """A built vectorizer: ``step`` runs one batch of ``envs_per_step`` env-steps; ``close`` releases it.
    ``env_steps``: the env-steps done so far, for a system whose batches vary in size (Tianshou's wait_num)."""

    env: Any
    step: Callable[[np.ndarray], Any]
    reset: Callable[[], Any]
    envs_per_step: int | None = None
    env_steps: Callable[[], int] | None = None

    def close(self) -> None:
        self.env.close()


@dataclass(frozen=True)
class System:
    name: str
    build: Callable[[Workload, int], Stepper]
    requires: tuple[str, ...] = ()
    default: bool = True  # part of the default comparison (others are chosen with --systems)

    def available(self, workload: Workload) -> str | None:
        """None if this system can run ``workload`` here, else the reason it is skipped."""
        for module in self.requires:
            try:
                found = importlib.util.find_spec(module) is not None
            except ImportError:  # (a parent package that is missing)
                found = False
            if not found:
                return f"{module.split('.')[0]} is not installed"
        if self.name.startswith("EnvPool") and workload.user:
            return "EnvPool runs only the envs compiled into it (C++), not a Python env"
        if self.name.startswith("EnvPool") and not workload.atari:
            return "EnvPool only runs its own (Atari) envs"
        return None

    def available_for(self, workload: Workload, n_envs: int) -> str | None:
        if "async" in self.name and (n_envs < 2 or n_envs % 2):
            return "async batches of n/2 need an even n_envs"
        return self.available(workload)
