"""An SB3 callback that writes a vecshm vec env's figures (:mod:`vecshm.stats`) to SB3's logger.

::

    from vecshm.callbacks import StatsCallback

    model.learn(1_000_000, callback=StatsCallback())

At the end of each rollout, every figure of ``venv.stats.as_dict()`` goes to ``model.logger``
under ``vecshm/...``: SB3's progress table, TensorBoard, CSV, whatever the logger writes. The vec env
is found by walking ``model.get_env()`` down its wrappers (``VecNormalize``, ``VecMonitor``, ...).
A ``RayVecEnv``'s actors each write theirs under ``vecshm/actor_<k>/...``.
Needs Stable-Baselines3 (imported here, not by ``import vecshm``).
"""

from __future__ import annotations

from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from vecshm.stats import VecStats

__all__ = ["StatsCallback", "find_stats", "logged_figures"]


def find_stats(venv: Any) -> Any:
    """The vecshm vec env under ``venv``'s wrappers (the first that has ``stats``), or None."""
    seen = 0
    while venv is not None and seen < 100:
        if isinstance(getattr(type(venv), "stats", None), property):
            return venv
        venv, seen = getattr(venv, "venv", None), seen + 1
    return None


def logged_figures(stats: VecStats | tuple[VecStats, ...], per_env: bool = False) -> dict[str, float]:
    """The figures a logger gets: ``stats.as_dict(per_env)``, or, for a ``RayVecEnv``'s tuple (one
    per actor), each actor's under ``vecshm/actor_<k>/``."""
    if isinstance(stats, VecStats):
        return stats.as_dict(per_env)
    prefix = len("vecshm/")
    return {
        f"vecshm/actor_{k}/{key[prefix:]}": value
        for k, actor in enumerate(stats)
        for key, value in actor.as_dict(per_env).items()
    }


class StatsCallback(BaseCallback):
    """Writes ``venv.stats.as_dict(per_env)`` to SB3's logger at the end of every ``every``-th
    rollout; ``reset``: count each logged period afresh (``venv.reset_stats()``), else since the start."""

    def __init__(self, every: int = 1, per_env: bool = False, reset: bool = True, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.every, self.per_env, self.reset = every, per_env, reset
        self.rollouts = 0
        self.source: Any = None

    def _on_training_start(self) -> None:
        self.source = find_stats(self.model.get_env())
        if self.source is None:
            raise TypeError(
                f"StatsCallback found no vecshm vec env under {type(self.model.get_env()).__name__} "
                "(ShmVecEnv, ShmVectorEnv, the multi-agent classes and RayVecEnv have stats)"
            )
        self.source.stats  # noqa: B018  (a StatsOffError now, not after a rollout, where the vec env counts nothing)

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        self.rollouts += 1
        if self.rollouts % self.every:
            return
        stats = self.source.stats
        for key, value in logged_figures(stats, self.per_env).items():
            self.logger.record(key, value)
        if self.verbose:
            for actor in (stats,) if isinstance(stats, VecStats) else stats:
                print(actor.verdict)
        if self.reset:
            self.source.reset_stats()
