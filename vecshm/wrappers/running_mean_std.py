"""Running mean and variance of a stream of batches (parallel Welford merge), as SB3 keeps them."""

from __future__ import annotations

import numpy as np

__all__ = ["RunningMeanStd"]


class RunningMeanStd:
    """Mean and variance of everything seen so far, updated one batch at a time."""

    def __init__(self, epsilon: float = 1e-4, shape: tuple[int, ...] = ()) -> None:
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = epsilon

    def copy(self) -> RunningMeanStd:
        new_object = RunningMeanStd(shape=self.mean.shape)
        new_object.mean = self.mean.copy()
        new_object.var = self.var.copy()
        new_object.count = float(self.count)
        return new_object

    def combine(self, other: RunningMeanStd) -> None:
        """Merge another stream's statistics into this one."""
        self.update_from_moments(other.mean, other.var, other.count)

    def update(self, arr: np.ndarray) -> None:
        """Add a batch (first axis: samples) in one pass."""
        self.update_from_moments(np.mean(arr, axis=0), np.var(arr, axis=0), arr.shape[0])

    def update_from_moments(self, batch_mean: np.ndarray, batch_var: np.ndarray, batch_count: float) -> None:
        delta = batch_mean - self.mean
        tot_count = self.count + batch_count
        new_mean = self.mean + delta * batch_count / tot_count
        m_a = self.var * self.count
        m_b = batch_var * batch_count
        m_2 = m_a + m_b + np.square(delta) * self.count * batch_count / (self.count + batch_count)
        self.mean = new_mean
        self.var = m_2 / (self.count + batch_count)
        self.count = batch_count + self.count
