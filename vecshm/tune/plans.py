"""The settings ``vecshm.tune`` weighs, and what the env's own cost says each could reach at best.

A plan is a set of vecshm options: how many envs each worker process hosts (so how many processes),
whole steps or async batches of a size, the busy-wait, and pinning. Its upper bound is what no
vectorizer could beat with it, from the env's step time alone: the slowest process steps its
envs one after another, all processes together cannot use more cores than there are, and the
caller's own time per step comes on top of a whole step (an async batch overlaps it). A plan whose
bound is below a rate already measured cannot win, and is not measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["EnvProfile", "Plan", "candidates", "upper_bound"]


@dataclass(frozen=True)
class EnvProfile:
    """One env stepped alone in this process: a step's mean time and its spread (the standard
    deviation over the mean), resets included."""

    step_seconds: float
    spread: float


@dataclass(frozen=True)
class Plan:
    """vecshm options for ``num_envs`` envs: ``envs_per_worker``, ``batch_size`` (None: whole steps),
    ``spin`` (None: adaptive; 0: never busy-wait) and ``cpu_affinity`` (``"auto"``: pinned)."""

    num_envs: int
    envs_per_worker: int
    batch_size: int | None = None
    spin: float | None = None
    cpu_affinity: str | None = None

    @property
    def processes(self) -> int:
        return math.ceil(self.num_envs / self.envs_per_worker)

    @property
    def envs_per_step(self) -> int:
        return self.batch_size or self.num_envs

    def options(self) -> dict[str, Any]:
        """The constructor's keywords for this plan (those at their default left out, but the first)."""
        found: dict[str, Any] = {"envs_per_worker": self.envs_per_worker}
        for name, value in (("batch_size", self.batch_size), ("spin", self.spin), ("cpu_affinity", self.cpu_affinity)):
            if value is not None:
                found[name] = value
        return found

    def label(self, noun: str = "envs") -> str:
        """The plan in words; ``noun``: what it runs (envs, or a PettingZoo env's copies)."""
        words = [f"{self.processes} process{'es' if self.processes > 1 else ''} x {self.envs_per_worker} {noun}"]
        words.append(f"async batches of {self.batch_size}" if self.batch_size else "whole steps")
        if self.spin == 0:
            words.append("no busy-wait")
        if self.cpu_affinity:
            words.append("pinned")
        return ", ".join(words)


def candidates(num_envs: int, cores: int, async_batches: bool) -> list[Plan]:
    """Every process count up to the cores (each a distinct ``envs_per_worker``), whole steps; and,
    for a caller of ``send``/``recv``, batches of a half and a quarter of the envs over a process
    per core. More processes than cores only take turns on them, so none is offered."""
    plans, seen = [], set()
    for processes in range(1, min(num_envs, cores) + 1):
        per_worker = math.ceil(num_envs / processes)
        if per_worker not in seen:
            seen.add(per_worker)
            plans.append(Plan(num_envs, per_worker))
    if async_batches and num_envs >= 2:
        for batch in sorted({num_envs // 2, num_envs // 4} - {0}, reverse=True):
            # a process's envs all in one batch: the most that divides it, at most the envs per core
            per_worker = next(d for d in range(max(1, num_envs // cores), 0, -1) if batch % d == 0)
            plans.append(Plan(num_envs, per_worker, batch_size=batch))
    return plans


def upper_bound(plan: Plan, profile: EnvProfile, cores: int, caller_seconds: float) -> float:
    """Env-steps per second that ``plan`` could not exceed for this env, whatever vecshm's own costs."""
    step = profile.step_seconds
    busy = min(plan.processes, cores)
    if plan.batch_size is None:
        slowest = plan.envs_per_worker * step  # a whole step waits for the fullest process
        compute = max(slowest, plan.num_envs * step / busy)
        return plan.num_envs / (compute + caller_seconds)
    # async: the first ``batch_size`` envs to finish while the caller works on the last batch, the
    # caller's work and the envs' sharing the cores
    compute = plan.batch_size * step
    return plan.batch_size / max(compute / busy, caller_seconds, (compute + caller_seconds) / cores, 1e-9)
