"""A core of its own for the parent while async batches are bound by the parent's work.

In an async loop the parent is a stage of the pipeline: while some workers step, it shapes the
last batch, the caller computes the next actions, and it writes them. When that work is of the
order of the workers' own, the parent is as busy as a worker, and on a machine where every core
has a busy worker it gets only its share of one: the whole pipeline waits on it. Leaving it a core
(the workers keep the others) lets it run at full speed, but costs the workers that core, which
only pays while their work per remaining core stays within a few times the parent's.

The ratio below (the workers' busy time per remaining core over the parent's) decides; the
thresholds come from measurements on 2 cores (docs/benchmark-notes.md, "Async batches on 2 cores: the
parent's core").

So, while async batches run with envs left in flight (``batch_size < num_envs``), every
window (``BalanceRules.window_seconds``; the first batch taken once ``due`` has come looks),
:class:`CoreBalance` compares the time the workers spent running commands with the time the
parent spent outside its waits (the caller's work included), and moves the workers off the
parent's core or back. A window in which the parent was away between two waits
for longer than ``BalanceRules.pause_seconds`` (a learner's update) is dropped: it measures the
caller, not the pipeline. Only where the caller placed nothing (``cpu_affinity`` and
``pin_parent`` are None), on Linux, with 2 or more usable cores. A synchronous command (all
workers at once, the parent waiting) gives the workers every core again at once.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Protocol

import numpy as np

from vecshm.parent.balance_rules import DEFAULT_BALANCE_RULES, BalanceRules

__all__ = ["CoreBalance"]


class WaitSeconds(Protocol):
    """What adds up the parent's time spent waiting for workers, and counts its pauses: the times
    it was away longer than ``pause_seconds`` between two waits (the engine's ``Waiter``)."""

    waited_seconds: float
    pauses: int


class CoreBalance:
    """Whether the workers keep off the parent's core (``cores[0]``), decided from measured work.

    ``busy`` is the workers' shared array of seconds spent running commands; ``pids`` gives the
    worker processes now (a restarted worker has a new one); ``enabled`` is False where the caller
    placed the processes itself or the platform cannot.
    """

    def __init__(
        self,
        cores: list[int],
        busy: np.ndarray,
        pids: Callable[[], list[int]],
        enabled: bool,
        waits: WaitSeconds,
        rules: BalanceRules = DEFAULT_BALANCE_RULES,
    ) -> None:
        self.cores = cores
        self.rules = rules
        self.enabled = enabled and len(cores) >= 2 and hasattr(os, "sched_setaffinity")
        self.reserved = False  # whether the workers keep off cores[0] now
        # the placement the last window chose (before any, by the core count): async batches that
        # start again after a synchronous command or a pause take it at once
        self.chosen = len(cores) >= rules.reserve_from_cores
        self.active = False  # reserved, or a window open: a synchronous command has something to release
        self.ratio: float | None = None  # the last window's workers' busy time per remaining core over the parent's
        self.utilization: float | None = None  # the last window's workers' busy time per remaining core over its length
        self._busy = busy
        self._pids = pids
        # its ``waited_seconds``: the parent's time spent waiting for workers (the engine's Waiter adds it up)
        self._waits = waits
        self._moved: set[int] = set()  # workers moved off cores[0]
        # (start, wait seconds, pauses, workers' busy) when the window opened
        self._window: tuple[float, float, int, float] | None = None
        # when a batch must look next (``rules.clock``): a window's end, at once before the first.
        # A batch before then skips ``tick`` (on the step path of every async batch).
        self.due = 0.0 if self.enabled else math.inf

    def tick(self) -> None:
        """An async batch was taken: look at the balance once a window (``rules.window_seconds``) passed."""
        if not self.enabled:
            return
        rules = self.rules
        now = rules.clock()
        window, waits = self._window, self._waits
        if window is None or waits.pauses != window[2]:  # a first batch, or a window with a pause in it
            self._window = (now, waits.waited_seconds, waits.pauses, float(self._busy.sum()))
            self.due = now + rules.window_seconds
            self.active = True
            if self.chosen and not self.reserved:
                self._reserve()
            return
        start, wait_seconds, _, busy = window
        if now - start < rules.window_seconds:
            return
        total = float(self._busy.sum())
        workers = total - busy
        parent = (now - start) - (waits.waited_seconds - wait_seconds)
        self._window = (now, waits.waited_seconds, waits.pauses, total)
        self.due = now + rules.window_seconds
        per_core = workers / (len(self.cores) - 1)
        self.utilization = per_core / (now - start)
        ratio = self.ratio = per_core / max(parent, 1e-9)
        # Both bounds are for 2 cores, where the parent's core is half the machine; with more, it
        # costs the workers one core in ``cores``, so the bounds scale with the remaining cores.
        spare = len(self.cores) - 1
        self.chosen = ratio < rules.reserve_below * spare or (self.reserved and ratio <= rules.release_above * spare)
        if self.chosen:
            self._reserve()
        else:
            self.release()

    def release(self) -> None:
        """Workers on every core again (a synchronous command runs every worker at once)."""
        self._window = None
        self.due = 0.0 if self.enabled else math.inf
        self.active = False
        if not self.reserved:
            return
        self.reserved = False
        self._set(self._moved & set(self._pids()), self.cores)  # not a pid since reused by another process
        self._moved = set()

    def close(self) -> None:
        """Drop the view of the workers' shared array (the segment's mapping goes with the last one)."""
        self.enabled = False
        self.due = math.inf
        self._busy = np.zeros(0)

    def _reserve(self) -> None:
        """Workers off ``cores[0]``; a worker started since (a restart) is moved too."""
        self.reserved = self.active = True
        pids = set(self._pids())
        self._set(pids - self._moved, self.cores[1:])
        self._moved = pids

    def _set(self, pids: set[int], cores: list[int]) -> None:
        for pid in pids:
            try:
                os.sched_setaffinity(pid, cores)
            except ProcessLookupError:  # it died: the engine reports that on its own
                pass
            except OSError:  # not ours to move (a sandbox): leave the placement to the scheduler
                self.enabled = False
                self.due = math.inf
