"""The engine's options, checked in one place for both facades.

Each facade maps its peer's keywords (``SubprocVecEnv``'s, ``AsyncVectorEnv``'s) onto one
:class:`EngineOptions`; the checks, defaults and derived settings (the start method's context,
spin budgets) live here, so the two facades cannot drift apart on what a keyword means.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from gymnasium import spaces

from vecshm.parent.processes.start_methods import default_start_method, preload_in_forkserver
from vecshm.shared.errors import SpaceMismatchError
from vecshm.shared.layout import leaves
from vecshm.shared.protocol import AutoReset
from vecshm.shared.sync import TSO_ARCHES

__all__ = [
    "EngineOptions",
    "BalanceRules",
    "DEFAULT_BALANCE_RULES",
    "DEFAULT_INFO_BYTES",
    "LEND_MIN_BYTES",
    "check_same_layout",
    "tuple_of_values",
]

DEFAULT_INFO_BYTES = 2048
# Lending a batch (a slot's, or the ring's units) costs a few microseconds; below this many bytes of
# observations a plain copy is cheaper. ``lend_min_bytes=0`` lends every batch.
LEND_MIN_BYTES = 64 * 1024
DEFAULT_SPIN_SECONDS = 1e-3
# A worker waits for its next command while the learner computes actions: spinning through that
# time takes cores from the learner, while a loop with no learner work turns a step round within a
# short spin (docs/design.md, "Waiting without burning cores"). So with the automatic setting the
# workers spin as long as the parent while its turnaround stays under this, and up to this after.
WORKER_SPIN_SECONDS = 150e-6
ON_WORKER_FAILURE = ("raise", "restart")


def _same_layout(a: spaces.Space, b: spaces.Space) -> bool:
    def layout(space: spaces.Space) -> list[tuple[Any, ...]]:
        return [(x.path, x.shape, x.dtype, x.dynamic) for x in leaves(space)]

    return layout(a) == layout(b)


def check_same_layout(env_spaces: list[tuple[spaces.Space, spaces.Space]]) -> None:
    """The engine's own rule: every env's spaces must lay out as env 0's (bounds may differ)."""
    observation_space, action_space = env_spaces[0]
    for i, (obs_space, act_space) in enumerate(env_spaces):
        if not (_same_layout(obs_space, observation_space) and _same_layout(act_space, action_space)):
            raise SpaceMismatchError(
                f"env {i} has spaces {obs_space} / {act_space}, which differ from env 0's "
                f"{observation_space} / {action_space}; all envs of a vec env must share their spaces"
            )


def tuple_of_values(space: spaces.Space, values: list[Any]) -> tuple[Any, ...]:
    """The default batch of a dynamic leaf: a tuple of the envs' values (Gymnasium's ``concatenate``)."""
    return tuple(values)


# -- the core balance (vecshm.parent.core.balance): the parent's core during async batches ---------

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


@dataclass(frozen=True)
class EngineOptions:
    """What a facade asks of the engine.

    ``check_spaces`` gets every env's ``(observation_space, action_space)`` and raises if the
    facade's rule refuses them; ``batch_dynamic`` batches the per-env values of a dynamic leaf (see
    :mod:`vecshm.shared.layout`) as the facade's peer does; ``max_workers`` caps the processes;
    ``reward_codes``: the workers record each reward's dtype, for ``Batch.stacked_rewards``;
    ``async_batch``: the size of the async batches to come (None: whole batches only);
    ``lend_min_bytes``: the smallest batch of observations lent rather than copied (see ``LEND_MIN_BYTES``);
    ``balance_rules``: when the parent gets a core of its own during async batches (:class:`BalanceRules`);
    ``stats``: count where the time goes (:mod:`vecshm.stats`; off by default, as it costs cheap steps a few percent).
    """

    autoreset: AutoReset
    reward_codes: bool = False
    start_method: str | None = None
    envs_per_worker: int | None = None
    info_bytes: int = DEFAULT_INFO_BYTES
    step_timeout: float | None = None
    start_timeout: float | None = None
    daemon: bool = True
    spin: float | None = None
    cpu_affinity: Any = None
    pin_parent: Sequence[int] | None = None
    limit_threads: bool = True
    on_worker_failure: str = "raise"
    check_spaces: Callable[[list[tuple[spaces.Space, spaces.Space]]], None] = check_same_layout
    batch_dynamic: Callable[[spaces.Space, list[Any]], Any] = tuple_of_values
    max_workers: int | None = None
    async_batch: int | None = None
    lend_min_bytes: int = LEND_MIN_BYTES
    balance_rules: BalanceRules = DEFAULT_BALANCE_RULES
    stats: bool = False

    def __post_init__(self) -> None:
        if self.on_worker_failure not in ON_WORKER_FAILURE:
            raise ValueError(f"on_worker_failure must be 'raise' or 'restart', got {self.on_worker_failure!r}")
        if self.step_timeout is not None and not self.step_timeout > 0:
            raise ValueError(f"step_timeout must be a positive number of seconds or None, got {self.step_timeout!r}")
        if self.start_timeout is not None and not self.start_timeout > 0:
            raise ValueError(f"start_timeout must be a positive number of seconds or None, got {self.start_timeout!r}")
        if self.info_bytes < 0:
            raise ValueError(f"info_bytes must be >= 0, got {self.info_bytes}")
        if not isinstance(self.lend_min_bytes, int) or self.lend_min_bytes < 0:
            raise ValueError(f"lend_min_bytes must be an int >= 0, got {self.lend_min_bytes!r}")

    def check_all_spaces(self, env_spaces: list[tuple[spaces.Space, spaces.Space]]) -> None:
        """The facade's rule (``check_spaces``), then the engine's: the shared layout needs it."""
        self.check_spaces(env_spaces)
        if self.check_spaces is not check_same_layout:
            check_same_layout(env_spaces)

    @property
    def start_seconds(self) -> float | None:
        """How long the workers may take to build their envs and map the segment: ``start_timeout``,
        else, with a ``step_timeout``, the longer of it and a minute (a simulator may load for
        longer than it steps), else no limit."""
        if self.start_timeout is not None:
            return float(self.start_timeout)
        return None if self.step_timeout is None else max(self.step_timeout, 60.0)

    @property
    def restarts(self) -> bool:
        """Whether a dead worker is rebuilt (else its death fails the vec env)."""
        return self.on_worker_failure == "restart"

    def context(self) -> mp.context.BaseContext:
        """The multiprocessing context of the start method (its forkserver preloading vecshm)."""
        method = self.start_method or default_start_method()
        if method not in mp.get_all_start_methods():
            raise ValueError(
                f"cannot find context for {method!r}: start_method must be one of {mp.get_all_start_methods()}"
            )
        if method == "forkserver":
            preload_in_forkserver()
        return mp.get_context(method)

    @property
    def parent_spin_seconds(self) -> float:
        """Longest busy-wait of the parent before it sleeps (its spinner adapts below it)."""
        if self.spin is not None:
            return max(0.0, float(self.spin))
        return DEFAULT_SPIN_SECONDS if platform.machine() in TSO_ARCHES else 0.0

    @property
    def worker_spin_seconds(self) -> tuple[float, float]:
        """Longest busy-waits of a worker between commands: while the parent turns a command round
        within ``WORKER_SPIN_SECONDS`` (a loop with no learner work), the parent's; after a longer
        turnaround, at most ``WORKER_SPIN_SECONDS``. An explicit ``spin`` sets both."""
        budget = self.parent_spin_seconds
        return budget, budget if self.spin is not None else min(budget, WORKER_SPIN_SECONDS)
