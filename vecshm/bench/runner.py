"""Interleaved measurement: every system, and the measured ideal, once per round, in turn."""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vecshm.bench.cpu import CpuMeter, descendants
from vecshm.bench.systems import BASELINE, Stepper, System
from vecshm.bench.workloads import Workload
from vecshm.shared.affinity import usable_cores

__all__ = ["Case", "run_case", "measure_rate", "measure_steps"]

IDEAL = "ideal (independent processes)"
CLOCK_EVERY = 64  # the most steps between two reads of the clock
READY = "ready"


@dataclass
class Case:
    """Results of one (workload, n_envs): env-steps/s per system, one entry per round, and the CPU
    milliseconds the system spent per 1,000 env-steps in that round (see :mod:`vecshm.bench.cpu`)."""

    workload: str
    n_envs: int
    rounds: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    baseline: str = BASELINE  # what ratios divide by (the multi-agent workloads: SuperSuit)
    unit: str = "envs"  # what n_envs counts (the multi-agent workloads: copies of the env, each a row per agent)
    note: str = ""  # a line under the case's heading (the user's env: its step time, and why an ideal or not)

    def ratios(self, name: str, baseline: str | None = None) -> list[float]:
        """Round-by-round ratio of ``name`` to ``baseline`` (default: the case's; same round, same machine state)."""
        baseline = self.baseline if baseline is None else baseline
        if baseline not in self.rounds or name not in self.rounds:
            return []
        return [a / b for a, b in zip(self.rounds[name], self.rounds[baseline]) if b > 0]


def measure_rate(stepper: Stepper, actions: list[np.ndarray], n_envs: int, seconds: float) -> float:
    """Env-steps per second over ``seconds`` of back-to-back steps."""
    env_steps, elapsed = measure_steps(stepper, actions, n_envs, seconds)
    return env_steps / elapsed


def measure_steps(stepper: Stepper, actions: list[np.ndarray], n_envs: int, seconds: float) -> tuple[int, float]:
    """Env-steps done in back-to-back steps for at least ``seconds`` (and 3 steps), and the time taken.

    The loop adds as little as a loop can: the clock is read once every ``CLOCK_EVERY`` steps
    once a first step showed how long one takes, and the actions cycle through a prepared list."""
    n_envs = stepper.envs_per_step or n_envs
    counted = stepper.env_steps() if stepper.env_steps is not None else 0
    step, cycle = stepper.step, len(actions)
    clock = time.perf_counter
    start = clock()
    step(actions[0])
    first = clock() - start
    every = max(1, min(CLOCK_EVERY, int(seconds / max(first, 1e-7) / 100)))  # about 100 reads in all
    steps = 1
    while True:
        for k in range(steps, steps + every):
            step(actions[k % cycle])
        steps += every
        elapsed = clock() - start
        if elapsed >= seconds and steps >= 3:
            if stepper.env_steps is not None:
                return stepper.env_steps() - counted, elapsed
            return steps * n_envs, elapsed


def _ideal_worker(workload: Workload, n_local: int, commands: Any, results: Any) -> None:
    step = workload.ideal_steps(n_local)
    results.put(READY)
    while True:
        seconds = commands.get()
        if seconds is None:
            break
        k = done = 0
        start = time.perf_counter()
        while True:
            done += step(k)
            k += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        results.put(done / elapsed)


class IdealPool:
    """min(n_envs, cores) processes, each stepping its share of the envs in a plain loop, no vectorizer."""

    def __init__(self, workload: Workload, n_envs: int) -> None:
        context = mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
        self.size = max(1, min(n_envs, len(usable_cores())))
        shares = [len(range(p, n_envs, self.size)) for p in range(self.size)]
        self.commands = [context.Queue() for _ in range(self.size)]
        self.results = context.Queue()
        self.processes = [
            context.Process(target=_ideal_worker, args=(workload, share, q, self.results), daemon=True)
            for share, q in zip(shares, self.commands)
        ]
        for process in self.processes:
            process.start()
        # Until every process has built its env, starting them would still be loading the CPU.
        for _ in self.processes:
            if self.results.get(timeout=300) != READY:
                raise RuntimeError("an ideal process failed to start")

    def measure(self, seconds: float) -> float:
        """Env-steps/s of every process together, each stepping for ``seconds``."""
        for queue in self.commands:
            queue.put(seconds)
        return float(sum(self.results.get(timeout=seconds + 120) for _ in self.processes))

    def close(self) -> None:
        for queue in self.commands:
            queue.put(None)
        for process in self.processes:
            process.join(10)
            if process.exitcode is None:
                process.terminate()
                process.join(5)


def run_case(
    workload: Workload,
    n_envs: int,
    systems: list[System],
    rounds: int,
    seconds: float,
    ideal: bool = True,
    progress: Callable[[str], None] = lambda _: None,
) -> Case:
    """Build every system once, then measure them in interleaved rounds (A B C A B C ...)."""
    case = Case(workload.name, n_envs, baseline=workload.baseline, unit=getattr(workload, "unit", "envs"))
    if getattr(workload, "user", False):
        why = (
            "a step does real work, so the ideal is measured: independent processes, no vectorizer"
            if workload.cpu_bound
            else "a step this cheap is mostly the loop around it, so no ideal is measured"
        )
        case.note = f"{workload.description}: {why}."
    actions = workload.actions(n_envs)
    built: dict[str, Any] = {}
    meters: dict[str, CpuMeter] = {}
    try:
        for system in systems:
            reason = system.available_for(workload, n_envs)
            if reason:
                case.skipped[system.name] = reason
                continue
            progress(f"starting {system.name}")
            stepper = None
            before = descendants()
            try:
                stepper = system.build(workload, n_envs)
                stepper.reset()
                measure_rate(stepper, actions, n_envs, min(1.0, seconds))  # warm-up: caches, spinners, allocator
            except Exception as error:  # one system that cannot run here must not cost the others' rows
                if stepper is not None:
                    stepper.close()
                case.skipped[system.name] = f"failed: {type(error).__name__}: {str(error)[:120]}"
                continue
            built[system.name] = stepper
            meters[system.name] = CpuMeter(descendants() - before)
            meters[system.name].settle()  # (its spinners must not take the cores from the next build or round)
            case.rounds[system.name], case.cpu[system.name] = [], []
        if ideal:
            progress("starting ideal processes")
            before = descendants()
            built[IDEAL] = IdealPool(workload, n_envs)
            meters[IDEAL] = CpuMeter(descendants() - before)
            built[IDEAL].measure(min(1.0, seconds))  # warm-up, as for the systems
            case.rounds[IDEAL], case.cpu[IDEAL] = [], []
        for r in range(rounds):
            for name, runner in built.items():
                progress(f"round {r + 1}/{rounds}: {name}")
                cpu = meters[name].seconds()
                if name == IDEAL:
                    rate = runner.measure(seconds)
                    env_steps = rate * seconds  # (each process stepped for ``seconds``)
                else:
                    env_steps, elapsed = measure_steps(runner, actions, n_envs, seconds)
                    rate = env_steps / elapsed
                # What the system spends until it is idle is its own, and must not slow the next one.
                meters[name].settle()
                case.rounds[name].append(rate)
                case.cpu[name].append(1e6 * (meters[name].seconds() - cpu) / max(env_steps, 1))  # ms per 1,000
    finally:
        for runner in built.values():
            runner.close()
    return case
