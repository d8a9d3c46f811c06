"""The engine's options, checked in one place for both facades.

Each facade maps its peer's keywords (``SubprocVecEnv``'s, ``AsyncVectorEnv``'s) onto one
:class:`EngineOptions`; the checks, defaults and derived settings (the start method's context,
spin budgets) live here, so the two facades cannot drift apart on what a keyword means.
"""

from __future__ import annotations

import multiprocessing as mp
import platform
from collections.abc import Callable
from dataclasses import field, make_dataclass
from typing import TYPE_CHECKING, Any

from gymnasium import spaces

from vecshm.options import StartOptions, declared
from vecshm.parent.processes.start_methods import default_start_method, preload_in_forkserver
from vecshm.shared.errors import SpaceMismatchError
from vecshm.shared.layout import leaves
from vecshm.shared.protocol import AutoReset
from vecshm.shared.sync import TSO_ARCHES

__all__ = [
    "ENGINE_FIELDS",
    "EngineOptions",
    "EngineRules",
    "check_same_layout",
    "engine_options_type",
    "tuple_of_values",
]

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


class EngineRules:
    """What a facade asks of the engine: the methods of :data:`EngineOptions`, whose fields are
    vecshm's declared options (``vecshm/options.py``, those with ``engine=True``, each with its
    declared default) and the engine's own (:data:`ENGINE_FIELDS`).

    ``check_spaces`` gets every env's ``(observation_space, action_space)`` and raises if the
    facade's rule refuses them; ``batch_dynamic`` batches the per-env values of a dynamic leaf (see
    :mod:`vecshm.shared.layout`) as the facade's peer does; ``max_workers`` caps the processes;
    ``reward_codes``: the workers record each reward's dtype, for ``Batch.stacked_rewards``;
    ``async_batch``: the size of the async batches to come (None: whole batches only).
    """

    if TYPE_CHECKING:  # the fields are made from the declarations below: a type checker reads them as Any

        def __getattr__(self, name: str) -> Any: ...

    def __post_init__(self: Any) -> None:
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

    def check_all_spaces(self: Any, env_spaces: list[tuple[spaces.Space, spaces.Space]]) -> None:
        """The facade's rule (``check_spaces``), then the engine's: the shared layout needs it."""
        self.check_spaces(env_spaces)
        if self.check_spaces is not check_same_layout:
            check_same_layout(env_spaces)

    @property
    def start_seconds(self: Any) -> float | None:
        """How long the workers may take to build their envs and map the segment: ``start_timeout``,
        else, with a ``step_timeout``, the longer of it and a minute (a simulator may load for
        longer than it steps), else no limit."""
        if self.start_timeout is not None:
            return float(self.start_timeout)
        return None if self.step_timeout is None else max(self.step_timeout, 60.0)

    @property
    def restarts(self: Any) -> bool:
        """Whether a dead worker is rebuilt (else its death fails the vec env)."""
        return self.on_worker_failure == "restart"

    def context(self: Any) -> mp.context.BaseContext:
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
    def parent_spin_seconds(self: Any) -> float:
        """Longest busy-wait of the parent before it sleeps (its spinner adapts below it)."""
        if self.spin is not None:
            return max(0.0, float(self.spin))
        return DEFAULT_SPIN_SECONDS if platform.machine() in TSO_ARCHES else 0.0

    @property
    def worker_spin_seconds(self: Any) -> tuple[float, float]:
        """Longest busy-waits of a worker between commands: while the parent turns a command round
        within ``WORKER_SPIN_SECONDS`` (a loop with no learner work), the parent's; after a longer
        turnaround, at most ``WORKER_SPIN_SECONDS``. An explicit ``spin`` sets both."""
        budget = self.parent_spin_seconds
        return budget, budget if self.spin is not None else min(budget, WORKER_SPIN_SECONDS)


# The engine's own fields, which no caller sets as a keyword of a vec env class: a facade's rules.
ENGINE_FIELDS: list[tuple[str, Any, Any]] = [
    ("autoreset", AutoReset, field()),
    ("reward_codes", bool, field(default=False)),
    ("check_spaces", Callable[[list[tuple[spaces.Space, spaces.Space]]], None], field(default=check_same_layout)),
    ("batch_dynamic", Callable[[spaces.Space, list[Any]], Any], field(default=tuple_of_values)),
    ("max_workers", "int | None", field(default=None)),
    ("async_batch", "int | None", field(default=None)),
]


def engine_options_type(options: type = StartOptions) -> type:
    """One frozen dataclass: the engine's own fields, then every option ``options`` declares that
    the engine reads, with the declared type and default. So a new option is one declaration in
    ``vecshm/options.py``, plus its use."""
    made = make_dataclass(
        "EngineOptions",
        [
            *ENGINE_FIELDS,
            *((o.name, o.annotation, field(default=o.default)) for o in declared(options).values() if o.engine),
        ],
        bases=(EngineRules,),
        frozen=True,
    )
    made.__module__, made.__doc__ = __name__, EngineRules.__doc__
    return made


EngineOptions = engine_options_type()
