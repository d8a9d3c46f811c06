"""Which cores vecshm may use, and the per-worker settings applied before envs are built."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["usable_cores", "apply_worker_settings", "THREAD_LIMIT_VARS"]

THREAD_LIMIT_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)


def usable_cores() -> list[int]:
    """The logical cores this process may run on (cgroup/taskset aware, unlike ``os.cpu_count``)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))  # pragma: no cover - non-Linux


def apply_worker_settings(settings: dict[str, Any]) -> None:
    """Pin the worker and cap native thread pools, before any env (and its libraries) is built."""
    cores = settings.get("cpu_affinity")
    if cores:
        os.sched_setaffinity(0, cores)
    if settings.get("limit_threads", True):
        for name in THREAD_LIMIT_VARS:
            os.environ[name] = "1"
        _limit_loaded_thread_pools()


def _limit_loaded_thread_pools() -> None:
    # Under fork the parent's libraries are already loaded; environment variables no longer reach
    # them, so cap the pools that are live in this process directly.
    import sys

    if "cv2" in sys.modules:
        try:
            sys.modules["cv2"].setNumThreads(1)
        except Exception:
            pass
    if "torch" in sys.modules:
        try:
            sys.modules["torch"].set_num_threads(1)
        except Exception:
            pass


def plan_worker_cores(cpu_affinity: Any, num_workers: int) -> list[list[int] | None]:
    """Cores each worker is pinned to: None (no pinning), ``"auto"``, or an explicit list.

    An explicit list gives one core (or a list of cores) per worker, reused round-robin when it is
    shorter than the number of workers. ``"auto"`` keeps the parent's first core free when there
    are more usable cores than workers, and spreads workers over the rest.
    """
    if cpu_affinity is None:
        return [None] * num_workers
    allowed = usable_cores()
    if isinstance(cpu_affinity, str):
        if cpu_affinity != "auto":
            raise ValueError(f"cpu_affinity must be None, 'auto' or a list of cores, got {cpu_affinity!r}")
        pool = allowed[1:] if len(allowed) > num_workers else allowed
        return [[pool[w % len(pool)]] for w in range(num_workers)]
    entries = list(cpu_affinity)
    if not entries:
        raise ValueError("cpu_affinity is an empty list; pass None for no pinning")
    plan: list[list[int] | None] = []
    for w in range(num_workers):
        entry = entries[w % len(entries)]
        cores = [int(entry)] if isinstance(entry, (int,)) or hasattr(entry, "__index__") else [int(c) for c in entry]
        bad = sorted(set(cores) - set(allowed))
        if bad or not cores:
            raise ValueError(
                f"cpu_affinity for worker {w} names cores {bad or cores} outside this process's allowed set {allowed}"
            )
        plan.append(cores)
    return plan
