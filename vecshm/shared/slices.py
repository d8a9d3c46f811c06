"""How many envs each worker process hosts: contiguous slices, decided from the core count.

Both the parent's plan (:class:`vecshm.parent.plan.VecEnvPlan`) and :func:`vecshm.topology`, which
shows a user the plan before any process starts, split envs with :func:`split_envs`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["split_envs", "slice_sizes"]


def split_envs(
    num_envs: int, envs_per_worker: int | None, num_cores: int, max_workers: int | None = None
) -> list[tuple[int, int]]:
    """Contiguous env slices, one per worker process.

    ``envs_per_worker`` each (the last takes what is left: 5 envs by 2 give 2, 2 and 1), or, by
    default, spread as evenly as possible over the cores, and over at most ``max_workers``.
    """
    if envs_per_worker is None:
        workers = max(1, min(num_envs, num_cores, max_workers or num_envs))
        bounds = np.linspace(0, num_envs, workers + 1).round().astype(int)
        return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
    if not isinstance(envs_per_worker, (int, np.integer)) or envs_per_worker < 1:
        raise ValueError(f"envs_per_worker must be a positive integer, got {envs_per_worker!r}")
    slices = [(s, min(s + int(envs_per_worker), num_envs)) for s in range(0, num_envs, int(envs_per_worker))]
    if max_workers is not None and len(slices) > max_workers:
        raise ValueError(
            f"envs_per_worker={envs_per_worker} makes {len(slices)} workers for {num_envs} envs, more than "
            f"max_concurrency={max_workers} allows; pass envs_per_worker >= {-(-num_envs // max_workers)}"
        )
    return slices


def slice_sizes(slices: Sequence[tuple[int, int]]) -> np.ndarray:
    """How many envs each slice holds."""
    return np.array([stop - start for start, stop in slices], dtype=np.int64)
