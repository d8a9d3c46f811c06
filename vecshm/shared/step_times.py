"""Each env's step time as its worker measures it, kept as a histogram both sides read alike.

A worker times its envs' steps on one command in :data:`TIMED_EVERY`: it reads the clock before the
first env and after each one (``perf_counter``, the vDSO clock: no system call) and appends the
readings to a list, nothing more, so the step path pays one clock read and one append per env.
About every :data:`PUBLISH_SECONDS`, and before it sleeps, the worker turns the readings into
step times and bins them with NumPy in one go (:meth:`StepTimes.publish`), and copies each env's
histogram into its row of the segment's ``env_stats`` array: no lock, as each row has one writer,
and a reader that catches a row mid-copy sees a count a few steps off. The parent reads the rows
when asked for a snapshot (:mod:`vecshm.stats`), never on the step path.

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
        self.n = n
        self.rows = np.zeros((n, COLUMNS), np.float64)  # what was published so far
        self.readings: list[list[float]] = []  # each timed command's clock readings, not yet binned
        self.countdown = TIMED_EVERY  # commands until the next timed one

    def readings_for_command(self) -> list[float] | None:
        """A list for this command's clock readings (the first made now), or None where this
        command is not timed (:data:`TIMED_EVERY`)."""
        self.countdown -= 1
        if self.countdown:
            return None
        self.countdown = TIMED_EVERY
        readings: list[float] = []
        self.readings.append(readings)
        return readings

    def publish(self, rows: np.ndarray) -> None:
        """Bin the readings taken since the last call, and copy the histograms into ``rows`` (the
        segment's rows of these envs). A command an env's exception cut short is left out."""
        complete = [readings for readings in self.readings if len(readings) == self.n + 1]
        self.readings = []
        if complete:
            seconds = np.diff(np.array(complete), axis=1)  # (commands, envs)
            micros = np.maximum(seconds * 1e6, 1.0)  # (bin 0 holds everything up to its upper edge)
            bins = np.minimum((BINS_PER_OCTAVE * np.log2(micros)).astype(np.int64), BINS - 1)
            flat = (np.arange(self.n) * BINS + bins).ravel()
            self.rows[:, 0] += len(complete)
            self.rows[:, 1] += seconds.sum(axis=0)
            self.rows[:, 2:] += np.bincount(flat, minlength=self.n * BINS).reshape(self.n, BINS)
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
