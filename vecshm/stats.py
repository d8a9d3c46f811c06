"""Where the time goes: ``venv.stats``, a snapshot of a running vec env's figures.

A vecshm vec env created with ``stats=True`` (``ShmVecEnv``, ``ShmVectorEnv``, the multi-agent
classes; off by default, as counting costs a cheap env's steps a few percent) counts, from its
start or its last ``venv.reset_stats()``: how the wall time splits between waiting for the envs,
the vec env's own work and the caller's (policy, learner, logging); each env's steps, episodes and
restarts, and its step time as its worker measured it; what synchronous steps waited for their
slowest worker; and how busy each worker process kept its core. ``venv.stats`` returns them as a
:class:`VecStats`, a frozen value (later steps do not change it) with a one-line :attr:`~VecStats.verdict`::

    print(venv.stats)              # a short table, the verdict last
    logger.log(venv.stats.as_dict())  # flat and numeric, under "vecshm/..."
    venv.stats.plot()              # a matplotlib figure (pip install 'vecshm[plot]')

How each figure is counted, and what it costs: :mod:`vecshm.parent.core.run_stats` and
:mod:`vecshm.shared.step_times`; docs/usage.md, "Where the time goes".
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import Any

import numpy as np

from vecshm.shared.step_times import BINS, quantiles

__all__ = ["EnvStats", "ProcessStats", "VecStats"]

SLOW_RATIO = 1.5  # an env this many times slower than the median env is named


@dataclass(frozen=True)
class EnvStats:
    """One env's figures: ``steps`` whose results reached the caller, ``episodes`` they ended (a
    restart's truncation included), ``restarts`` of its worker, and its step time (seconds, reset
    at an episode's end included) over ``timed_steps`` steps its worker timed (one command in
    four; a restarted worker's start again)."""

    index: int
    steps: int
    episodes: int
    restarts: int
    timed_steps: int
    mean_step: float
    median_step: float
    p99_step: float


@dataclass(frozen=True)
class ProcessStats:
    """One worker process: the envs it hosts (``start`` to ``stop``) and the share of the wall
    time it spent running commands (its core's, were it alone on it)."""

    index: int
    start: int
    stop: int
    busy: float


@dataclass(frozen=True)
class VecStats:
    """A snapshot of a vec env's figures (see the module). Times in seconds.

    ``wall`` splits into ``waiting`` (for the workers), ``own`` (the vec env's own work: actions in,
    results out) and ``caller`` (outside the vec env's calls). ``barrier`` is the mean time a
    synchronous step waited for its last worker past the median one, over ``whole_steps`` steps;
    ``last_to_finish`` counts, for sampled steps, which workers' envs came last.
    """

    wall: float
    waiting: float
    own: float
    caller: float
    envs: tuple[EnvStats, ...]
    processes: tuple[ProcessStats, ...]
    whole_steps: int
    barrier: float
    last_to_finish: tuple[tuple[tuple[int, int], int], ...]

    @classmethod
    def build(
        cls,
        wall: float,
        outside: float,
        waiting: float,
        steps: np.ndarray,
        episodes: np.ndarray,
        restarts: np.ndarray,
        step_times: np.ndarray,
        process_envs: list[tuple[int, int]],
        process_busy: np.ndarray,
        whole_steps: int,
        barrier_mean: float,
        last_to_finish: list[tuple[tuple[int, int], int]],
    ) -> VecStats:
        """The snapshot of a run's raw counters (:class:`vecshm.parent.core.run_stats.RunStats`)."""
        wall = max(wall, 1e-9)
        waiting = min(waiting, wall - outside)
        envs = []
        for i, row in enumerate(step_times):
            timed = int(row[0])
            median, p99 = quantiles(row[2 : 2 + BINS], (0.5, 0.99))
            envs.append(
                EnvStats(
                    i, int(steps[i]), int(episodes[i]), int(restarts[i]), timed,
                    float(row[1] / timed) if timed else math.nan, median, p99,
                )
            )  # fmt: skip
        processes = tuple(
            ProcessStats(p, start, stop, float(min(busy / wall, 1.0)))
            for p, ((start, stop), busy) in enumerate(zip(process_envs, process_busy))
        )
        return cls(
            wall=wall,
            waiting=waiting,
            own=max(wall - outside - waiting, 0.0),
            caller=outside,
            envs=tuple(envs),
            processes=processes,
            whole_steps=whole_steps,
            barrier=barrier_mean,
            last_to_finish=tuple(last_to_finish),
        )

    # -- derived figures ----------------------------------------------------------------------------

    @property
    def steps(self) -> int:
        """Env-steps in all."""
        return sum(env.steps for env in self.envs)

    @property
    def median_step(self) -> float:
        """The median env's mean step time."""
        means = [env.mean_step for env in self.envs if env.timed_steps]
        return float(np.median(means)) if means else math.nan

    @property
    def slowest_env(self) -> EnvStats | None:
        """The env with the longest mean step time (None before any step was timed)."""
        timed = [env for env in self.envs if env.timed_steps]
        return max(timed, key=lambda env: env.mean_step) if timed else None

    @property
    def idle(self) -> float:
        """The share of the wall time the worker processes sat idle, on average."""
        return 1.0 - float(np.mean([p.busy for p in self.processes])) if self.processes else math.nan

    @property
    def barrier_share(self) -> float:
        """The share of the wall time synchronous steps waited for their slowest worker."""
        return min(self.barrier * self.whole_steps / self.wall, 1.0)

    @property
    def bound(self) -> str:
        """``"env-bound"`` where more time went waiting for the envs than to the caller, else ``"caller-bound"``."""
        return "env-bound" if self.waiting >= self.caller else "caller-bound"

    @property
    def verdict(self) -> str:
        """One line: the bound, the slowest env where one stands out, and what to try (docs/usage.md)."""
        slowest, median = self.slowest_env, self.median_step
        ratio = slowest.mean_step / median if slowest is not None and median > 0 else math.nan
        if self.bound == "caller-bound":
            return (
                f"caller-bound: the envs were idle {self.idle:.0%} of the time; try async batches (batch_size), "
                "which step the envs while your policy and learner compute, or fewer worker processes "
                "(envs_per_worker), which leave cores to the learner"
            )
        line = f"env-bound: {self.waiting / self.wall:.0%} of wall time waiting for envs"
        if slowest is not None and ratio >= SLOW_RATIO:
            line += f"; env {slowest.index} steps {ratio:.1f}x slower than the median"
        if ratio >= SLOW_RATIO or self.barrier_share >= 0.1:
            return line + "; try async batches (batch_size), so that the slowest envs stop holding up every step"
        if self.idle > 0.3 and len(self.processes) < len(self.envs):
            return line + "; the workers sat idle: try more worker processes (envs_per_worker)"
        return line + "; the envs need the cores: try pinning them (cpu_affinity='auto') with limit_threads=True"

    # -- for people and loggers ---------------------------------------------------------------------

    def as_dict(self, per_env: bool = False) -> dict[str, float]:
        """The figures, flat and numeric, under ``vecshm/`` (``per_env``: each env's too, ``vecshm/env_3/...``)."""
        slowest = self.slowest_env
        out = {
            "vecshm/wall_s": self.wall,
            "vecshm/waiting_share": self.waiting / self.wall,
            "vecshm/own_share": self.own / self.wall,
            "vecshm/caller_share": self.caller / self.wall,
            "vecshm/env_bound": float(self.bound == "env-bound"),
            "vecshm/steps": float(self.steps),
            "vecshm/steps_per_s": self.steps / self.wall,
            "vecshm/episodes": float(sum(env.episodes for env in self.envs)),
            "vecshm/restarts": float(sum(env.restarts for env in self.envs)),
            "vecshm/step_ms_median_env": self.median_step * 1e3,
            "vecshm/slowest_env": float(slowest.index) if slowest is not None else math.nan,
            "vecshm/slowest_env_step_ms": slowest.mean_step * 1e3 if slowest is not None else math.nan,
            "vecshm/barrier_share": self.barrier_share,
            "vecshm/workers_idle_share": self.idle,
        }
        if per_env:
            for env in self.envs:
                out.update(
                    {
                        f"vecshm/env_{env.index}/steps": float(env.steps),
                        f"vecshm/env_{env.index}/episodes": float(env.episodes),
                        f"vecshm/env_{env.index}/restarts": float(env.restarts),
                        f"vecshm/env_{env.index}/step_ms_mean": env.mean_step * 1e3,
                        f"vecshm/env_{env.index}/step_ms_p99": env.p99_step * 1e3,
                    }
                )
        return out

    def __str__(self) -> str:
        lines = [
            f"vecshm stats: {self.wall:.1f} s, {self.steps:,} env-steps of {len(self.envs)} envs",
            f"  wall time: waiting for envs {self.waiting / self.wall:.0%}, vec env's own work "
            f"{self.own / self.wall:.0%}, caller {self.caller / self.wall:.0%}",
        ]
        if self.whole_steps:
            lines.append(
                f"  synchronous steps: {self.whole_steps:,}, each waiting {self.barrier * 1e3:.2f} ms past the median "
                f"worker for its last ({self.barrier_share:.0%} of wall time){self._last_to_finish()}"
            )
        lines.append(f"  worker processes busy: {self._busy()}")
        lines.append("  env   steps  episodes  restarts  step ms: mean  median    p99")
        shown = sorted(self.envs, key=lambda env: -env.mean_step if env.timed_steps else 0.0)[:5]
        for env in sorted(shown, key=lambda env: env.index):
            lines.append(
                f"  {env.index:>3} {env.steps:>7} {env.episodes:>9} {env.restarts:>9} {env.mean_step * 1e3:>14.3f}"
                f" {env.median_step * 1e3:>7.3f} {env.p99_step * 1e3:>6.3f}"
            )
        if len(self.envs) > len(shown):
            lines.append(f"  (the {len(shown)} slowest of {len(self.envs)} envs; every one: .envs)")
        lines.append(self.verdict)
        return "\n".join(lines)

    def _busy(self) -> str:
        """Each process's busy share, or past eight of them the spread and the two ends (``.processes``: each)."""
        if len(self.processes) <= 8:
            return ", ".join(f"{p.index} ({_envs(p.start, p.stop)}) {p.busy:.0%}" for p in self.processes)
        ranked = sorted(self.processes, key=lambda p: p.busy)
        low, high = ranked[0], ranked[-1]
        median = float(np.median([p.busy for p in ranked]))
        return (
            f"median {median:.0%} of {len(ranked)}; least {low.index} ({_envs(low.start, low.stop)}) {low.busy:.0%}, "
            f"most {high.index} ({_envs(high.start, high.stop)}) {high.busy:.0%} (every one: .processes)"
        )

    def _last_to_finish(self) -> str:
        if not self.last_to_finish:
            return ""
        (start, stop), count = max(self.last_to_finish, key=lambda item: item[1])
        total = sum(count for _, count in self.last_to_finish)
        return f"; last to finish most often: {_envs(start, stop)} ({count / total:.0%})"

    def plot(self) -> Any:
        """A matplotlib figure: the wall time split as a bar, and each env's step time (median, the
        10th to 90th percentile, and the 99th). Needs matplotlib (``pip install 'vecshm[plot]'``)."""
        try:
            import matplotlib.pyplot as plt
            from matplotlib import ticker
        except ImportError as error:
            raise ImportError("VecStats.plot() needs matplotlib: pip install 'vecshm[plot]'") from error
        figure, (split, times) = plt.subplots(2, 1, figsize=(8, 6), height_ratios=(1, 3), layout="constrained")
        left = 0.0
        for label, seconds, color in (
            ("waiting for envs", self.waiting, "#4c72b0"),
            ("vec env's own work", self.own, "#dd8452"),
            ("caller (policy, learner)", self.caller, "#55a868"),
        ):
            share = seconds / self.wall
            split.barh(0, share, left=left, color=color, label=f"{label} {share:.0%}")
            left += share
        split.set_xlim(0, 1)
        split.set_yticks([])
        split.set_title(textwrap.fill(self.verdict, 100), fontsize=9)
        split.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3, fontsize=8, frameon=False)
        timed = [env for env in self.envs if env.timed_steps]
        if timed:
            xs = [env.index for env in timed]
            medians = np.array([env.median_step for env in timed]) * 1e3
            means = np.array([env.mean_step for env in timed]) * 1e3
            p99 = np.array([env.p99_step for env in timed]) * 1e3
            times.vlines(xs, medians, p99, color="#999999", linewidth=1, label="median to p99")
            times.scatter(xs, medians, color="#4c72b0", s=18, zorder=3, label="median")
            times.scatter(xs, means, color="#c44e52", marker="_", s=80, zorder=3, label="mean")
            times.scatter(xs, p99, color="#333333", marker="v", s=14, zorder=3, label="p99")
            times.set_yscale("log")
            times.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
            times.yaxis.set_minor_formatter(ticker.FormatStrFormatter("%g"))
            times.tick_params(axis="y", which="minor", labelsize=7)
            times.legend(fontsize=8)
        times.set_xlabel("env")
        times.set_ylabel("step time, ms (as its worker measured it)")
        return figure


def _envs(start: int, stop: int) -> str:
    return f"env {start}" if stop - start == 1 else f"envs {start}-{stop - 1}"
