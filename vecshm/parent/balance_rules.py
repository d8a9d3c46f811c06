"""When the parent takes a core of its own during async batches: the rules
:class:`vecshm.parent.core.balance.CoreBalance` follows, and their defaults (the ``balance_rules``
option's), measured on 2 and 16 cores."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields

__all__ = ["BalanceRules", "DEFAULT_BALANCE_RULES"]

BALANCE_SECONDS = 0.25  # how often the balance is looked at while async batches run
# From this many cores on, async batches reserve the parent's core from their first batch, before
# any window was measured: a core is then at most an eighth of the workers', and on 16 cores
# reserving it was the faster placement for every workload measured (docs/benchmark-notes.md)
RESERVE_FROM_CORES = 8
RESERVE_BELOW = 2.5  # workers' busy time per remaining core over the parent's, below which it gets a core
RELEASE_ABOVE = 3.5  # ... above which the workers get it back (apart from RESERVE_BELOW, so it does not flap)
# (both on 2 cores; CoreBalance scales them by the remaining cores, see tick)
# A caller that took longer than this between two batches paused (a learner's update, other work):
# the parent worked then, but not while workers stepped, so a window that spans it would mislead.
PAUSE_SECONDS = BALANCE_SECONDS / 5


@dataclass(frozen=True)
class BalanceRules:
    """When :class:`vecshm.parent.core.balance.CoreBalance` looks, and what it decides; the defaults
    are the constants above, measured on 2 and 16 cores.

    A window lasts ``window_seconds``; the parent away over ``pause_seconds`` between two waits is a pause. The
    parent gets a core below a ratio of ``reserve_below``, and gives it back above ``release_above``
    (both per remaining core over 1); from ``reserve_from_cores`` cores on it takes one from the
    first batch. ``clock`` reads the time. ``BalanceRules.always_reserve()`` decides at every batch,
    always for a core of the parent's (to watch the workers move).
    """

    window_seconds: float = BALANCE_SECONDS
    pause_seconds: float = PAUSE_SECONDS
    reserve_below: float = RESERVE_BELOW
    release_above: float = RELEASE_ABOVE
    reserve_from_cores: int = RESERVE_FROM_CORES
    clock: Callable[[], float] = field(default=time.perf_counter, compare=False)

    @classmethod
    def always_reserve(cls) -> BalanceRules:
        return cls(window_seconds=0.0, reserve_below=math.inf)

    def __repr__(self) -> str:
        """Only what differs from the defaults (``BalanceRules()``: the defaults, as signatures show them)."""
        changed = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.compare and getattr(self, f.name) != f.default
        ]
        return f"BalanceRules({', '.join(changed)})"


DEFAULT_BALANCE_RULES = BalanceRules()
