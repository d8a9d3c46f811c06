"""What both facades show of their run: the inspection properties (:class:`RunProperties`), each
served by the facade's :class:`~vecshm.parent.core.run.VecRun`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vecshm.parent.core.run import Runtime, VecRun
from vecshm.parent.plan import VecEnvPlan
from vecshm.shared.buffers import Buffers
from vecshm.stats import VecStats

if TYPE_CHECKING:
    from vecshm.parent.core.balance import CoreBalance
    from vecshm.parent.core.waiting import WaitObserver

__all__ = ["RunProperties"]


class RunProperties:
    """What both facades show of their :class:`VecRun` (``self.run``)."""

    _run: VecRun

    @property
    def run(self) -> VecRun:
        """The vec env's run: the workers, and the commands, batches and calls sent to them."""
        return self._run

    @property
    def stats(self) -> VecStats:
        """Where the time went, since the vec env started or :meth:`reset_stats`: a frozen
        :class:`~vecshm.stats.VecStats` (``print`` it; ``.as_dict()`` for a logger; ``.plot()``)."""
        return self._run.stats()

    def reset_stats(self) -> None:
        """Count :attr:`stats` from now."""
        self._run.reset_stats()

    @property
    def pin_memory(self) -> bool:
        """Whether the segment is page-locked and registered with CUDA (``pin_memory``)."""
        return self._run.pin_memory

    @property
    def processes(self) -> list[Any]:
        """The worker processes (``multiprocessing.Process``), as the peers' ``processes``: one per
        worker process, each hosting ``envs_per_worker`` envs, so fewer than ``num_envs`` when a
        process hosts several. A restarted worker's new process replaces its old one."""
        return self._run.processes

    @property
    def plan(self) -> VecEnvPlan:
        """Which envs each worker process hosts, and each command runs on (see :mod:`vecshm.parent.plan`)."""
        return self._run.plan

    @property
    def runtime(self) -> Runtime:
        """How the vec env runs: start method, transport, cores, segment size, ring."""
        return self._run.runtime

    @property
    def segment(self) -> Buffers:
        """The shared segment's arrays by name, for diagnostics: read them, never write them."""
        return self._run.segment

    @property
    def core_balance(self) -> CoreBalance:
        """Whether the workers keep off the parent's core in async batches (:mod:`vecshm.parent.core.balance`)."""
        return self._run.core_balance

    @property
    def in_flight(self) -> bool:
        """Whether envs sent with ``send`` (or ``async_reset``) have not all come back from ``recv`` yet."""
        return self._run.in_flight

    @property
    def observer(self) -> WaitObserver | None:
        """An object told of every wait for workers (see :class:`vecshm.parent.core.waiting.WaitObserver`)."""
        return self._run.observer

    @observer.setter
    def observer(self, observer: WaitObserver | None) -> None:
        self._run.observer = observer
