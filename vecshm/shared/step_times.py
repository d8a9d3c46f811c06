"""Each env's step time as its worker measures it, kept as a histogram both sides read alike.

A worker times its envs' steps on one command in :data:`TIMED_EVERY` (one clock read per env, no
system call: ``perf_counter`` reads the vDSO clock), adds each time to its env's histogram in plain
Python lists (:class:`StepTimes`), and copies the lists into its envs' rows of the segment's
``env_stats`` array about every :data:`PUBLISH_SECONDS` (no lock: each row has one writer, and a
reader that catches a row mid-copy sees a count one step off). The parent reads the rows when asked
for a snapshot (:mod:`vecshm.stats`). Timing one command in four keeps the cost out of the step
rates (benchmarks/ab_step_rate.py) and still gives each env hundreds of samples a second.

A row is ``[steps timed, seconds in all, bin 0, bin 1, ...]``; bin ``b`` counts steps that took
``2 ** (b / BINS_PER_OCTAVE)`` to ``2 ** ((b + 1) / BINS_PER_OCTAVE)`` microseconds (bin 0 from 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["BINS", "COLUMNS", "PUBLISH_SECONDS", "StepTimes", "TIMED_EVERY", "bin_edges", "quantiles"]

TIMED_EVERY = 4  # commands: one in four is timed
PUBLISH_SECONDS = 0.05
BINS_PER_OCTAVE = 4
BINS = 32 * BINS_PER_OCTAVE  # up to 2**32 us (71 minutes)
COLUMNS = 2 + BINS


class StepTimes:
    """The step times of one worker's ``n`` envs (see the module)."""

    def __init__(self, n: int) -> None:
        self.rows: list[list[float]] = [[0.0] * COLUMNS for _ in range(n)]
        self.countdown = TIMED_EVERY  # commands until the next timed one

    def timed_command(self) -> bool:
        """Whether this command's steps are to be timed (one in :data:`TIMED_EVERY`)."""
        self.countdown -= 1
        if self.countdown:
            return False
        self.countdown = TIMED_EVERY
        return True

    def add(self, offset: int, seconds: float) -> None:
        row = self.rows[offset]
        row[0] += 1
        row[1] += seconds
        micros = seconds * 1e6
        row[2 + (min(BINS - 1, int(BINS_PER_OCTAVE * math.log2(micros))) if micros > 1.0 else 0)] += 1

    def publish(self, rows: np.ndarray) -> None:
        """Copy the histograms into the segment's rows of these envs."""
        rows[...] = self.rows


def bin_edges() -> np.ndarray:
    """Each bin's lower edge, in seconds (and the last one's upper edge)."""
    edges = 2.0 ** (np.arange(BINS + 1) / BINS_PER_OCTAVE) * 1e-6
    edges[0] = 0.0
    return edges


def quantiles(histogram: np.ndarray, qs: Sequence[float]) -> list[float]:
    """The quantiles ``qs`` (0 to 1) of the step times a histogram row's bins count, in seconds:
    interpolated within the bin (geometrically, as the bins are), NaN for an empty histogram."""
    total = float(histogram.sum())
    if total <= 0:
        return [math.nan for _ in qs]
    cumulative = np.cumsum(histogram)
    edges = bin_edges()
    out = []
    for q in qs:
        b = int(np.searchsorted(cumulative, q * total, side="left"))
        b = min(b, BINS - 1)
        before = float(cumulative[b - 1]) if b else 0.0
        share = (q * total - before) / max(float(histogram[b]), 1.0)
        low, high = max(edges[b], 1e-6), edges[b + 1]
        out.append(float(low * (high / low) ** min(max(share, 0.0), 1.0)))
    return out
