"""Which cores vecshm may use, how it pins workers, and the settings applied before envs are built."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

from vecshm.shared.slices import split_envs

__all__ = [
    "THREAD_LIMIT_VARS",
    "Topology",
    "apply_worker_settings",
    "check_cores",
    "pin_calling_process",
    "plan_worker_cores",
    "topology",
    "usable_cores",
]

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


def _physical_groups(cores: list[int]) -> list[list[int]]:
    """Allowed logical cores grouped by physical core (hyperthread siblings together), in order."""
    groups: dict[tuple[str, str], list[int]] = {}
    for core in cores:
        base = f"/sys/devices/system/cpu/cpu{core}/topology"
        try:
            with open(f"{base}/physical_package_id") as package, open(f"{base}/core_id") as core_id:
                key = (package.read().strip(), core_id.read().strip())
        except OSError:
            key = ("?", str(core))  # no topology information: every logical core stands alone
        groups.setdefault(key, []).append(core)
    return list(groups.values())


@dataclass
class Topology:
    """What vecshm sees of this machine, and the worker plan it would use for ``num_envs`` envs."""

    logical_cores: int
    physical_cores: int
    allowed: list[int]
    physical_groups: list[list[int]]
    num_envs: int | None = None
    num_workers: int | None = None
    envs_per_worker: list[int] = field(default_factory=list)
    auto_plan: list[list[int] | None] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [
            f"logical cores: {self.logical_cores}, physical cores: {self.physical_cores}",
            f"allowed for this process: {self.allowed}",
            f"physical groups (hyperthread siblings): {self.physical_groups}",
        ]
        if self.num_envs is not None:
            lines.append(
                f"plan for {self.num_envs} envs: {self.num_workers} workers hosting {self.envs_per_worker} envs"
            )
            lines += [f"  worker {w}: cores {cores}" for w, cores in enumerate(self.auto_plan)]
        return "\n".join(lines)


def topology(num_envs: int | None = None, envs_per_worker: int | None = None) -> Topology:
    """Cores, physical grouping and the allowed set; with ``num_envs``, the default split and ``"auto"`` pins.

    >>> from vecshm import topology
    >>> print(topology(8))  # doctest: +SKIP
    """
    allowed = usable_cores()
    groups = _physical_groups(allowed)
    logical = os.cpu_count() or len(allowed)
    try:
        import psutil

        physical = psutil.cpu_count(logical=False) or len(groups)
    except ImportError:  # pragma: no cover - psutil is a dependency
        physical = len(groups)
    info = Topology(logical, physical, allowed, groups)
    if num_envs is not None:
        slices = split_envs(num_envs, envs_per_worker, len(allowed))
        info.num_envs = num_envs
        info.num_workers = len(slices)
        info.envs_per_worker = [b - a for a, b in slices]
        info.auto_plan = plan_worker_cores("auto", len(slices))
    return info


def _auto_cores(num_workers: int) -> list[list[int]]:
    """One worker per physical core, siblings kept apart; the parent's physical core stays free if it can."""
    groups = _physical_groups(usable_cores())
    if len(groups) > num_workers:
        groups = groups[1:]  # leave the first physical core to the parent (the learner)
    firsts = [group[0] for group in groups]  # one logical core per physical core first...
    seconds = [core for group in groups for core in group[1:]]  # ...hyperthread siblings only after
    order = firsts + seconds if num_workers > len(firsts) else firsts
    return [[order[w % len(order)]] for w in range(num_workers)]


def _require_pinning(what: str) -> None:
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError(f"{what}: core pinning needs os.sched_setaffinity (Linux); pass None on this platform")


def check_cores(cores: Any, what: str) -> list[int]:
    """``cores`` as a list of allowed core ids; ``ValueError`` naming the bad ones otherwise."""
    _require_pinning(what)
    values = [int(cores)] if isinstance(cores, int) or hasattr(cores, "__index__") else [int(c) for c in cores]
    allowed = usable_cores()
    bad = sorted(set(values) - set(allowed))
    if bad or not values:
        raise ValueError(f"{what} names cores {bad or values} outside this process's allowed set {allowed}")
    return values


def plan_worker_cores(cpu_affinity: Any, num_workers: int) -> list[list[int] | None]:
    """Cores each worker is pinned to: None (no pinning), ``"auto"``, or an explicit list.

    An explicit list gives one core (or a list of cores) per worker, reused round-robin when it is
    shorter than the number of workers.
    """
    if cpu_affinity is None:
        return [None] * num_workers
    _require_pinning("cpu_affinity")
    if isinstance(cpu_affinity, str):
        if cpu_affinity != "auto":
            raise ValueError(f"cpu_affinity must be None, 'auto' or a list of cores, got {cpu_affinity!r}")
        return list(_auto_cores(num_workers))
    entries = list(cpu_affinity)
    if not entries:
        raise ValueError("cpu_affinity is an empty list; pass None for no pinning")
    return [check_cores(entries[w % len(entries)], f"cpu_affinity for worker {w}") for w in range(num_workers)]


def apply_worker_settings(settings: dict[str, Any]) -> None:
    """Pin the worker and cap native thread pools, before any env (and its libraries) is built."""
    cores = settings.get("cpu_affinity")
    if cores:
        os.sched_setaffinity(0, cores)
    if settings.get("limit_threads", True):
        for name in THREAD_LIMIT_VARS:
            os.environ[name] = "1"
        _limit_loaded_thread_pools()


def pin_calling_process(cores: list[int], limit_threads: bool) -> None:
    """Pin the calling process (the learner) to ``cores`` and, with ``limit_threads``, cap the
    thread pools of PyTorch and OpenCV, if they are loaded, at one thread per core.

    Both size their pools when they load, for the cores allowed then. A pool larger than the cores
    it may use now oversubscribes them: SB3's NatureCNN forward pass on 2 frames took 96 ms with
    PyTorch's 2 threads on 1 core, and 1.4 ms with 1 thread (2-core machine). Loaded after the
    pinning, both size their pools to fit (1 thread each, pinned to one core).
    """
    os.sched_setaffinity(0, cores)
    if limit_threads:
        _limit_loaded_thread_pools(len(cores))


def _limit_loaded_thread_pools(threads: int = 1) -> None:
    # Under fork the parent's libraries are already loaded; environment variables no longer reach
    # them, so cap the pools that are live in this process directly (never raising them).
    for module, get, cap in (
        ("cv2", "getNumThreads", "setNumThreads"),
        ("torch", "get_num_threads", "set_num_threads"),
    ):
        if module in sys.modules:
            try:
                library = sys.modules[module]
                if getattr(library, get)() > threads:
                    getattr(library, cap)(threads)
            except Exception:
                pass
