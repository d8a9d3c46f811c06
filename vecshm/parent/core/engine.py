"""The API-neutral engine: starts the workers, and sends them commands.

The SB3 and Gymnasium facades are thin layers over this: they decide how results are shaped,
the engine decides how they travel. The engine starts the worker processes, maps the shared
segment and builds the parts every command uses; one of them, :class:`~vecshm.parent.core.commands.Commands`
(``engine.commands``), carries each command from the bells to its results. Where envs go is the
:class:`~vecshm.parent.plan.VecEnvPlan`; what a worker's death does is the failure policy's
(:mod:`vecshm.parent.core.restart`); rare calls are :mod:`vecshm.parent.core.calls`.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from vecshm.parent.control import ControlWords
from vecshm.parent.core.actions import ActionWriter
from vecshm.parent.core.balance import CoreBalance
from vecshm.parent.core.commands import Commands
from vecshm.parent.core.health import Health
from vecshm.parent.core.restart import EngineParts, failure_policy
from vecshm.parent.core.waiting import Waiter
from vecshm.parent.engine_options import EngineRules
from vecshm.parent.handback.results import ObservationSlots, ResultReader
from vecshm.parent.handback.ring import UnitRing, segment_spec
from vecshm.parent.plan import VecEnvPlan, as_env_list
from vecshm.parent.processes.pool import ProcessPool
from vecshm.parent.processes.start_methods import refuse_inside_worker_start_up
from vecshm.shared.affinity import check_cores, pin_calling_process, plan_worker_cores, usable_cores
from vecshm.shared.buffers import Buffers
from vecshm.shared.registry import snapshot_registry
from vecshm.shared.transport import choose_transport

__all__ = ["Engine"]


class Engine:
    """Workers, shared buffers and the handshake for one vec env."""

    def __init__(self, env_fns: Sequence[Callable[[], Any]], options: EngineRules) -> None:
        """Start the workers and map the shared segment."""
        refuse_inside_worker_start_up()
        fns = as_env_list(env_fns)
        self.options = options
        self.transport = choose_transport()
        parent_cores = None if options.pin_parent is None else check_cores(options.pin_parent, "pin_parent")
        context = options.context()
        self.num_envs = len(fns)
        self.start_method = context.get_start_method()
        self.timeout = options.step_timeout
        cores = usable_cores()
        self.plan = plan = VecEnvPlan.build(
            self.num_envs, options.envs_per_worker, len(cores), options.max_workers, options.async_batch,
        )  # fmt: skip
        self.worker_cores = plan_worker_cores(options.cpu_affinity, plan.num_processes)  # per process
        # With a worker process per core or more, the parent shares its core with a worker, which would
        # wait for the parent's side of a synchronous step (lending, then the wait) before it runs: the
        # run hands the core over as soon as the step's commands are out (docs/design.md, "Waiting
        # without burning cores"). Not for async batches: there the parent is a stage of the pipeline.
        own_core = plan.core_each(len(cores))
        self.hand_over_core = not own_core
        # (with a core each, the workers' spins need not yield: vecshm.shared.sync.spin_for)
        settings = [
            {
                "cpu_affinity": pinned,
                "limit_threads": options.limit_threads,
                "own_core": own_core,
                "stats": options.stats,  # (the workers time their envs' steps for vecshm.stats)
            }
            for pinned in self.worker_cores
        ]
        self.nbytes = 0  # the segment's size, once laid out
        registry = b"" if self.start_method == "fork" else snapshot_registry()
        self.pool = ProcessPool(fns, plan, options, context, settings, self.transport, registry)
        self.health = Health(self.pool.shutdown)  # shared with the waits, which fail it on a fatal error
        self._finalizer = weakref.finalize(self, self.pool.shutdown)
        try:
            self._start(len(cores))
        except BaseException:
            self.close()
            raise
        if parent_cores is not None:  # after the workers exist, so that none inherits it
            pin_calling_process(parent_cores, options.limit_threads)
        placed = options.cpu_affinity is not None or parent_cores is not None  # the caller's placement stays
        # the pool's method, not the engine's: the balance must not keep the engine alive
        self.balance = CoreBalance(
            cores, self.buffers.busy, self.pool.pids, not placed, self.waiter, options.balance_rules
        )

    def _start(self, num_cores: int) -> None:
        """Build the envs, lay out and map the segment, and set up waiting and the failure policy."""
        options, plan = self.options, self.plan
        deadline = None if options.start_seconds is None else time.monotonic() + options.start_seconds
        reported = self.pool.collect_ready(deadline)
        options.check_all_spaces(reported)
        self.env_spaces = reported  # every env's (observation_space, action_space), as its worker reported them
        self.observation_space, self.action_space = reported[0]
        self.spec = segment_spec(plan, self.observation_space, self.action_space, options)
        self.buffers: Buffers = self.pool.attach(self.spec, deadline, keep_fd=options.restarts)
        assert self.pool.words is not None  # (made with the buffers)
        self.words: ControlWords = self.pool.words  # the control words, written and read through it alone
        self.nbytes = self.spec.plan().size
        self.slots = ObservationSlots(self.buffers, options.lend_min_bytes)
        self.reader = ResultReader(self.buffers, self.observation_space, options.batch_dynamic)
        ring = (self.pool.claims, self.buffers, plan.num_lanes, options.restarts)  # (restarts: keep latest units)
        self.ring = UnitRing(*ring) if self.spec.ring_units else None
        self.actions = ActionWriter(self.action_space, self.spec, self.buffers)  # checks and writes actions
        self.waiter = Waiter(
            self.pool,
            self.words,
            options.parent_spin_seconds,
            num_cores,
            self.timeout,
            self.health,
            options.balance_rules.pause_seconds,
        )
        parts = EngineParts(plan, self.pool, self.words, self.waiter, self.reader, self.ring)
        self.policy = failure_policy(options, parts)
        # every command's trip, from the bells to the results (the only sender of commands)
        self.commands = Commands(plan, self.pool, self.words, self.waiter, self.policy, self.health, self.timeout)

    def check_usable(self) -> None:
        """Raise ``ClosedError`` after :meth:`close`, ``FailedError`` after a failure."""
        self.health.check_usable()

    def fail(self, error: BaseException) -> None:
        """The vec env cannot go on after ``error``: its workers are shut down, and it can only be closed."""
        self.health.fail(error)

    def close(self) -> None:
        self.health.close()
        for part in ("slots", "ring", "balance"):
            if getattr(self, part, None) is not None:
                getattr(self, part).close()
        self._finalizer()
