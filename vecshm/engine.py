"""The API-neutral engine: sends commands to workers, waits for them, and reads raw results.

The SB3 and Gymnasium facades are thin layers over this: they decide how results are shaped,
the engine decides how they travel. A step is: validate and copy actions into shared memory,
write each worker's command word, ring its doorbell, then wait on one shared doorbell (after a
short, bounded spin) while watching worker sentinels and the optional deadline.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import platform
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any

import numpy as np
from gymnasium import spaces

from vecshm.actions import ActionWriter
from vecshm.affinity import check_cores, pin_calling_process, plan_worker_cores, usable_cores
from vecshm.balance import CoreBalance
from vecshm.buffers import Buffers, BufferSpec
from vecshm.errors import (
    ClosedError,
    FailedError,
    SpaceMismatchError,
    VecShmError,
    WorkerDiedError,
    remote_errors,
)
from vecshm.layout import leaves
from vecshm.pickling import Pickled
from vecshm.pool import WorkerPool, as_env_list, describe_exit, describe_worker, split_envs
from vecshm.protocol import AutoReset, CallOp, Command, Phase, Status
from vecshm.registry import snapshot_registry
from vecshm.results import NO_EXTRAS, Batch, Collected, Extras, ResultReader
from vecshm.ring import RING_MIN_UNIT_BYTES, UnitRing, ring_units
from vecshm.slots import DEFAULT_LENDABLE_SLOTS, ObservationSlots
from vecshm.start_methods import default_start_method, preload_in_forkserver
from vecshm.sync import DoneWatch, Spinner
from vecshm.transport import choose_transport

__all__ = ["Engine", "EngineState"]

DEFAULT_INFO_BYTES = 2048
MAX_RESTARTS_PER_WORKER = 20
DEFAULT_SPIN_SECONDS = 1e-3
OVERSUBSCRIBED_SPIN_SECONDS = 300e-6
# A worker waits for its next command while the learner computes actions. Spinning through that
# time takes cores from the learner (on 2 cores, SB3 PPO on CartPole ran 1.26x SubprocVecEnv end to
# end with 1 ms, 1.42x with this cap), while a loop with no learner work turns a step round mostly
# within it (zero-compute throughput: about 3% less). Only the automatic setting is capped.
WORKER_SPIN_SECONDS = 150e-6
WORKER_CHECK_SECONDS = 0.05  # how often a wait that found its results also looks for dead or late workers
SPIN_ARCHES = ("x86_64", "AMD64", "i686", "i386")  # total store order: spinning on words is safe


_OK = int(Status.OK)  # compared as a plain int: NumPy is slow to compare arrays with an IntEnum
_ERROR = int(Status.ERROR)


class EngineState(Enum):
    READY = "ready"
    FAILED = "failed"
    CLOSED = "closed"


def _context(start_method: str | None) -> mp.context.BaseContext:
    method = start_method or default_start_method()
    if method not in mp.get_all_start_methods():
        raise ValueError(
            f"cannot find context for {method!r}: start_method must be one of {mp.get_all_start_methods()}"
        )
    if method == "forkserver":
        preload_in_forkserver()
    return mp.get_context(method)


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


class Engine:
    """Workers, shared buffers and the handshake for one vec env."""

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Any]],
        *,
        autoreset: AutoReset,
        reward_codes: bool = False,
        start_method: str | None = None,
        envs_per_worker: int | None = None,
        info_bytes: int = DEFAULT_INFO_BYTES,
        timeout: float | None = None,
        daemon: bool = True,
        spin: float | None = None,
        cpu_affinity: Any = None,
        pin_parent: Sequence[int] | None = None,
        limit_threads: bool = True,
        on_worker_failure: str = "raise",
        check_spaces: Callable[[list[tuple[spaces.Space, spaces.Space]]], None] = check_same_layout,
        batch_dynamic: Callable[[spaces.Space, list[Any]], Any] = tuple_of_values,
        max_workers: int | None = None,
        async_batch: int | None = None,
    ) -> None:
        """Start the workers and map the shared segment.

        ``check_spaces`` gets every env's ``(observation_space, action_space)`` and raises if the
        facade's rule refuses them; ``batch_dynamic`` batches the per-env values of a dynamic leaf
        (see :mod:`vecshm.layout`) as the facade's peer does; ``max_workers`` caps the processes;
        ``reward_codes``: the workers record each reward's dtype, for ``Batch.stacked_rewards``;
        ``async_batch``: the size of the async batches to come (None: whole batches only).

        A *worker* here is what a command runs on: the envs it steps together, and publishes
        together when the last is done. By default a worker is a whole process's envs. For async
        batches that are not exactly one process's envs (not with the restart policy), each env is
        a worker of its own, and a process hosts several: it runs the commands of those that have
        one, one after the other, and publishes each env as soon as it is done, so that a batch
        fills env by env and a process steps whichever of its envs have their actions
        (``benchmarks/batch_model.py``). Where each batch is one process's envs, whole processes
        lose nothing to the batch structure and cost less per env.
        """
        if on_worker_failure not in ("raise", "restart"):
            raise ValueError(f"on_worker_failure must be 'raise' or 'restart', got {on_worker_failure!r}")
        if on_worker_failure == "restart" and autoreset is not AutoReset.SAME_STEP:
            raise ValueError("on_worker_failure='restart' needs same-step autoreset (the SB3 facade, ShmVecEnv)")
        self._restart_workers = on_worker_failure == "restart"
        self._restarts: dict[int, int] = {}
        # env of a restarted worker whose reset was not collected yet -> the last observation of its
        # lost episode; and the last piped observation leaves, which that observation may need
        self._restarting: dict[int, Any] = {}
        self._last_piped_obs: dict[tuple[str, int], bytes] = {}
        if getattr(mp.current_process(), "_inheriting", False):
            raise RuntimeError(
                "a vec env is being created while this process starts up as a worker: the main script creates "
                'it at module level. Put that code under `if __name__ == "__main__":`.'
            )
        fns = as_env_list(env_fns)
        self.transport = choose_transport()
        parent_cores = None if pin_parent is None else check_cores(pin_parent, "pin_parent")
        context = _context(start_method)
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
        if info_bytes < 0:
            raise ValueError(f"info_bytes must be >= 0, got {info_bytes}")
        self.num_envs = len(fns)
        self.start_method = context.get_start_method()
        self.timeout = timeout
        cores = usable_cores()
        self.process_slices = split_envs(self.num_envs, envs_per_worker, len(cores), max_workers)
        self.num_processes = len(self.process_slices)
        if self._commands_per_env(async_batch):
            self.slices = [(i, i + 1) for i in range(self.num_envs)]
            lanes = self.process_slices  # process p hosts the workers of its envs
        else:
            self.slices, lanes = self.process_slices, [(p, p + 1) for p in range(self.num_processes)]
        self._batch_dynamic = batch_dynamic
        self.num_workers = len(self.slices)
        self.env_worker = np.repeat(np.arange(self.num_workers), [b - a for a, b in self.slices])
        uniform = len({b - a for a, b in self.slices}) == 1  # every worker hosts as many envs
        self._env_table = np.arange(self.num_envs).reshape(self.num_workers, -1) if uniform else None
        self.all_workers = np.arange(self.num_workers)
        self._spin_seconds = self._spin_budget(spin)
        worker_spin = self._spin_seconds if spin is not None else min(self._spin_seconds, WORKER_SPIN_SECONDS)
        self._spinner = Spinner(self._spin_seconds)
        self._cores = len(cores)
        self.worker_cores = plan_worker_cores(cpu_affinity, self.num_processes)  # per process
        settings = [{"cpu_affinity": placement, "limit_threads": limit_threads} for placement in self.worker_cores]
        self._state = EngineState.READY
        self._failure = ""
        self.pool = WorkerPool(
            fns,
            self.slices,
            lanes=lanes,
            context=context,
            autoreset=autoreset,
            reward_codes=reward_codes,
            daemon=daemon,
            spin_seconds=worker_spin,
            worker_settings=settings,
            transport=self.transport,
            registry=b"" if self.start_method == "fork" else snapshot_registry(),
        )
        self._finalizer = weakref.finalize(self, self.pool.shutdown)
        try:
            self._start(info_bytes, check_spaces)
        except BaseException:
            self.close()
            raise
        if parent_cores is not None:  # after the workers exist, so that none inherits it
            pin_calling_process(parent_cores, limit_threads)
        placed = cpu_affinity is not None or parent_cores is not None  # the caller's placement stays as it is
        pool = self.pool  # not self: the balance must not keep the engine alive

        def worker_pids() -> list[int]:
            return [process.pid for process in pool.processes]

        self.balance = CoreBalance(cores, self.buffers.busy, worker_pids, enabled=not placed)

    def _start(self, info_bytes: int, check_spaces: Callable[[list[Any]], None]) -> None:
        deadline = None if self.timeout is None else time.monotonic() + max(self.timeout, 60.0)
        reported = self.pool.collect_ready(deadline)
        check_spaces(reported)
        self.env_spaces = reported  # every env's (observation_space, action_space), as its worker reported them
        self.observation_space, self.action_space = reported[0]
        unit_rows = self._ring_unit_rows(leaves(self.observation_space))
        self.spec = BufferSpec(
            self.observation_space,
            self.action_space,
            self.num_envs,
            self.num_workers,
            info_bytes,
            obs_slots=1 + DEFAULT_LENDABLE_SLOTS,
            ring_units=ring_units(self.num_workers) if unit_rows else 0,
            unit_rows=unit_rows,
        )
        if check_spaces is not check_same_layout:
            check_same_layout(reported)  # whatever the facade accepts, the shared layout needs this
        self.buffers: Buffers = self.pool.attach(self.spec, deadline, keep_fd=self._restart_workers)
        self._slots = ObservationSlots(self.buffers)
        self._reader = ResultReader(self.buffers, self.observation_space, self._batch_dynamic)
        self.ring = UnitRing(self.pool.claims, self.buffers, self.num_workers) if unit_rows else None
        self._action_writer = ActionWriter(self.action_space, self.spec, self.buffers)
        self._previous_slot = np.zeros(self.num_workers, dtype=np.int64)  # per worker: slot of the command before
        self._sentinels = {process.sentinel: p for p, process in enumerate(self.pool.processes)}  # -> process
        self._watch = DoneWatch(self.transport, self.pool.done_bell, list(self._sentinels))
        self._next_worker_check = 0.0
        self._sent_at = [0.0] * self.num_workers  # per worker: when its command was submitted (with a timeout)

    def _ring_unit_rows(self, obs_leaves: list[Any]) -> int:
        """Rows per unit of the async ring (see :mod:`vecshm.ring`), or 0 to copy async batches instead.

        Units hold one worker's envs, so every worker must host as many. A worker restart loses the
        unit its predecessor claimed, so the restart policy copies; so do observations too small
        for lending to pay.
        """
        env_bytes = sum(leaf.nbytes for leaf in obs_leaves if not leaf.dynamic)
        if self._env_table is None or self._restart_workers or not hasattr(os, "set_blocking"):
            return 0
        rows = self._env_table.shape[1]
        return rows if env_bytes and rows * env_bytes >= RING_MIN_UNIT_BYTES else 0

    def _commands_per_env(self, async_batch: int | None) -> bool:
        """Whether each env takes commands of its own (see ``__init__``)."""
        if async_batch is None or not 0 < async_batch < self.num_envs or self._restart_workers:
            return False
        return any(stop - start != async_batch for start, stop in self.process_slices)

    def _spin_budget(self, spin: float | None) -> float:
        """Longest busy-wait before sleeping, for the parent and each worker (the spinners adapt below it)."""
        if spin is not None:
            return max(0.0, float(spin))
        if platform.machine() not in SPIN_ARCHES:
            return 0.0
        return DEFAULT_SPIN_SECONDS

    # -- state ------------------------------------------------------------------------------------

    def check_usable(self) -> None:
        if self._state is EngineState.CLOSED:
            raise ClosedError("this vec env is closed; create a new one")
        if self._state is EngineState.FAILED:
            raise FailedError(f"this vec env failed earlier and can only be closed: {self._failure}")

    def _fail(self, error: BaseException) -> None:
        self._state = EngineState.FAILED
        self._failure = str(error).split("\n", 1)[0]
        self.pool.shutdown()

    def close(self) -> None:
        self._state = EngineState.CLOSED
        if hasattr(self, "_slots"):
            self._slots.close()
        if getattr(self, "ring", None) is not None:
            self.ring.close()
        if hasattr(self, "balance"):
            self.balance.close()
        self._finalizer()

    @property
    def nbytes(self) -> int:
        return self.spec.plan().size if hasattr(self, "spec") else 0

    # -- actions ----------------------------------------------------------------------------------

    def send_step(self, actions: Any, copy: bool) -> None:
        """Write one row of ``actions`` per env and start a step on every worker; ``wait_all``
        returns its results (``copy``: observations the caller owns; else views of slot 0)."""
        dynamic = self.write_actions(actions)
        self.balance.release()  # every worker runs at once: every core for them
        self.start_step(self.all_workers, self._batch_slot(copy), dynamic)

    def send_reset(self, requests: list[dict[str, Any] | None], copy: bool) -> None:
        """Start a reset of every worker (see :meth:`send_resets`); ``wait_all`` returns its results."""
        self.balance.release()
        self.send_resets(requests, self.all_workers, self._batch_slot(copy))

    def _batch_slot(self, copy: bool) -> int:
        """Where a whole batch's observations go: a free slot that ``wait_all`` lends with them
        (``copy``), else slot 0, which its views share with the next command."""
        return self._slots.acquire() if copy else 0

    def write_actions(self, actions: Any, env_ids: np.ndarray | None = None) -> dict[int, list[Any]] | None:
        """Check ``actions`` (one row per env in ``env_ids``, default every env) and write their
        fixed leaves into the envs' rows; the dynamic leaves' values by env, to travel with the
        command, or None. Nothing is written when the check fails."""
        dynamic = self._action_writer.write(actions, env_ids)
        if dynamic is None:
            return None
        return dict(zip(range(self.num_envs) if env_ids is None else env_ids.tolist(), dynamic))

    def start_step(self, workers: np.ndarray, slot: int, dynamic: dict[int, list[Any]] | None) -> None:
        """Step ``workers`` on the actions written for their envs; their dynamic leaves leave ``dynamic``."""
        self.submit(Command.STEP, workers, slot)
        if dynamic is None:
            return
        for w in workers.tolist():
            self._send(w, {i: dynamic.pop(i) for i in range(*self.slices[w])}, Phase.STEP)

    # -- hot commands -----------------------------------------------------------------------------

    def submit(self, command: Command, workers: np.ndarray, slot: int = 0) -> None:
        """Start ``command`` on ``workers``; observations go to ``slot`` (0, a lendable slot, or ``ring.CLAIM``)."""
        b = self.buffers
        ids = workers.tolist()
        if workers is self.all_workers:  # whole-array writes
            self._previous_slot[:] = b.obs_slot
            b.obs_slot[:] = slot
            b.cmd[:] = int(command)
            b.cmd_seq += 1
        else:  # an async batch's few workers: word by word (fancy indexing costs 0.5 us a write)
            for w in ids:
                self._previous_slot[w] = b.obs_slot[w]
                b.obs_slot[w] = slot
                b.cmd[w] = int(command)
                b.cmd_seq[w] += 1
        if self.timeout is not None:  # when each command started, for the timeout of commands others outrun
            now = time.monotonic()
            for w in ids:
                self._sent_at[w] = now
        self.pool.ring(ids)

    def send_resets(self, requests: list[dict[str, Any] | None], workers: np.ndarray, slot: int = 0) -> None:
        """Start a reset; ``requests[i]`` holds the keywords for env ``i``'s ``reset``, or None to keep its observation.

        The facade chooses the keywords as its peer does (AsyncVectorEnv always passes ``seed`` and
        ``options``; SubprocVecEnv passes ``options`` only when there are some).
        """
        self.submit(Command.RESET, workers, slot)
        for w in workers.tolist():
            start, stop = self.slices[w]
            self._send(w, requests[start:stop], Phase.RESET)

    def _send(self, w: int, message: Any, during: Phase) -> None:
        """Send worker ``w`` what its command needs. A worker that died while idle has closed its
        end: that is a ``WorkerDiedError`` naming it (not a ``BrokenPipeError``), unless the restart
        policy will replace it at the next wait, which gives its envs a reset of their own."""
        try:
            self.pool.send(w, message, during)
        except WorkerDiedError as error:
            if self._restart_workers and during.runs_envs:
                return
            self._fail(error)
            raise

    def wait_all(self, during: Phase, timeout: float | None = None) -> Batch:
        """Wait for the command every worker was sent (:meth:`send_step`, :meth:`send_reset`); its results."""
        slot = int(self.buffers.obs_slot[0])
        try:
            collected = self.collect(self.all_workers, during, timeout=timeout)
        except BaseException:
            self._slots.release(slot)  # nobody will read it; the workers finish before their next command
            raise
        return Batch(self._reader, None, collected.extras, self._slots.lend(slot) if slot > 0 else None)

    def batch(self, env_ids: np.ndarray, extras: Extras, fixed: list[np.ndarray] | None = None) -> Batch:
        """The results of ``env_ids``, collected with ``extras`` (an async batch may bring its ``fixed`` leaves)."""
        return Batch(self._reader, env_ids, extras, fixed)

    def collect(
        self, workers: np.ndarray, during: Phase, need: int | None = None, timeout: float | None = None
    ) -> Collected:
        """Wait until ``need`` (default: all) of ``workers`` finished their command; exactly those
        (the first ``need`` found finished, in the order of ``workers``), with their envs' extras.

        ``timeout`` overrides the engine's own for this wait; passing it is fatal like any timeout.
        """
        need = len(workers) if need is None else need
        b = self.buffers
        expected = b.cmd_seq[workers]  # updated in place should a worker be restarted

        def finished() -> np.ndarray | None:
            done = workers[b.done_seq[workers] == expected]
            return done[:need] if len(done) >= need else None

        return self._collect(workers, expected, during, timeout, finished)

    def collect_units(self, units: np.ndarray, workers: np.ndarray, timeout: float | None = None) -> Collected:
        """Wait until the ring's ``units`` hold finished steps (see :mod:`vecshm.ring`); the workers
        that wrote them, in unit order. ``workers`` are those in flight, one of which will claim
        each unit; one that fails claims none, so its error ends the wait."""
        b, ring = self.buffers, self.ring
        expected = b.cmd_seq[workers]

        def written() -> np.ndarray | None:
            # A failed worker claims no unit, so others could fill every batch while its error
            # waits unseen: the error comes first, once its worker has published it.
            if _ERROR in b.status[workers].tolist():
                failed = (b.done_seq[workers] == expected) & (b.status[workers] == _ERROR)
                if np.count_nonzero(failed):
                    return workers[failed]
            return ring.owners(units)

        return self._collect(workers, expected, Phase.STEP, timeout, written)

    def _collect(
        self,
        workers: np.ndarray,
        expected: np.ndarray,
        during: Phase,
        timeout: float | None,
        ready: Callable[[], np.ndarray | None],
    ) -> Collected:
        """Wait until ``ready()`` names finished workers, then read their sockets (errors raise).

        A restarted worker's envs end their lost episode once its reset is collected, which an
        async wait may leave to a later one.
        """
        try:
            done = self._wait(workers, expected, during, self.timeout if timeout is None else timeout, ready)
            restarted = self._restarts_of(done, during) if self._restarting else {}
            piped = self._gather(done, during)
        except VecShmError as error:
            self._fail(error)
            raise
        except KeyboardInterrupt:
            # The workers finish their command on their own; close() shuts them down afterwards.
            raise
        if self._restart_workers and self.spec.obs_dynamic:
            self._keep_piped_obs(done, piped)
        return Collected(done, Extras(piped, restarted) if piped or restarted else NO_EXTRAS)

    def _wait(
        self,
        workers: np.ndarray,
        expected: np.ndarray,
        during: Phase,
        timeout: float | None,
        ready: Callable[[], np.ndarray | None],
    ) -> np.ndarray:
        b = self.buffers
        result = ready()
        if result is not None:  # already there (async batches often find finished workers)
            self._check_workers(during)
            return result

        def check() -> bool:
            nonlocal result
            result = ready()
            return result is not None

        started = time.perf_counter()
        # With a free core the parent may spin up to the full budget; when every core has a busy
        # worker, a spinning parent would steal from them, so only short waits are spun.
        limit = None if len(workers) < self._cores else OVERSUBSCRIBED_SPIN_SECONDS
        if self._spinner.spin(check, limit):
            self._waited(started)
            self._check_workers(during)
            return result
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            ended = self._watch.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
            self.pool.done_bell.take()
            if check():
                self._waited(started)
                self._check_workers(during)
                return result
            for fd in ended:
                p = self._sentinels[fd]
                if not (self._restart_workers and during.runs_envs):
                    self.pool.raise_died(p, during)
                w = self._restart(p, during, deadline)
                expected[workers == w] = b.cmd_seq[w]
            if deadline is not None and time.monotonic() >= deadline:
                pending = workers[b.done_seq[workers] != expected]
                self.pool.raise_timeout(pending.tolist(), during)

    def _waited(self, started: float) -> None:
        """A wait that began at ``started`` has ended: the spinner learns its length, and
        the core balance (see :mod:`vecshm.balance`) that the parent was not working meanwhile."""
        waited = time.perf_counter() - started
        self._spinner.record(waited)
        self.balance.waited(waited)

    def _check_workers(self, during: Phase) -> None:
        """Every ``WORKER_CHECK_SECONDS``, look for a dead worker, or one whose command has run
        past the timeout, even though results keep coming.

        Async batches take whichever workers finish first: without this, the others could fill
        every batch while a dead or hung worker's envs silently drop out. (With the restart policy
        a death is handled when a wait blocks, where the restarted envs' episodes can be ended in
        order.)
        """
        now = time.monotonic()
        if now < self._next_worker_check:
            return
        self._next_worker_check = now + WORKER_CHECK_SECONDS
        if not self._restart_workers:
            for fd in self._watch.wait(0):
                self.pool.raise_died(self._sentinels[fd], during)
        if self.timeout is not None:
            b = self.buffers
            running = np.flatnonzero(b.done_seq != b.cmd_seq).tolist()
            late = [w for w in running if now - self._sent_at[w] > self.timeout]
            if late:
                self.pool.raise_timeout(late, during)

    def _restart(self, p: int, during: Phase, deadline: float | None) -> int:
        """Replace dead process ``p``, reset its envs, and end their episodes (restart policy, under
        which a process hosts one worker); that worker."""
        w = self.pool.lanes[p][0]
        self._restarts[w] = self._restarts.get(w, 0) + 1
        if self._restarts[w] > MAX_RESTARTS_PER_WORKER:
            self.pool.raise_died(p, during, f" (after {MAX_RESTARTS_PER_WORKER} restarts, giving up)")
        envs = self.pool.env_indices(w)
        process = self.pool.processes[p]
        process.join(1.0)
        warnings.warn(
            f"{describe_worker(w, envs)} {describe_exit(process.exitcode)} during {during}; "
            f"restarting it from its env factories (restart {self._restarts[w]}); its envs' episodes end as truncated",
            RuntimeWarning,
            stacklevel=4,
        )
        self._watch.remove(process.sentinel)
        del self._sentinels[process.sentinel]
        last_slot = int(self._previous_slot[w])
        for i in envs:  # the last observation we have ends the lost episode
            self._restarting[i] = self._reader.observation_of(i, last_slot, self._last_piped_obs)
        self.pool.restart(p, deadline)
        sentinel = self.pool.processes[p].sentinel
        self._sentinels[sentinel] = p
        self._watch.add(sentinel)
        self.send_resets([{}] * self.num_envs, np.array([w]), int(self.buffers.obs_slot[w]))
        return w

    def _restarts_of(self, done: np.ndarray, during: Phase) -> dict[int, Any]:
        """The envs of ``done`` whose worker was restarted for this command (their reset is now
        collected), with the last observation of their lost episode, which ends as truncated."""
        arrived = {i: self._restarting.pop(i) for i in self.env_ids_of(done).tolist() if i in self._restarting}
        if arrived and during is Phase.STEP:
            self.buffers.truncated[list(arrived)] = True
        return arrived

    def _keep_piped_obs(self, done: np.ndarray, piped: dict[tuple[str, int], bytes]) -> None:
        """Keep the observation leaves ``done`` piped, in case a restart must end their episodes with them."""
        renewed = set(self.env_ids_of(done).tolist())
        kept = {key: v for key, v in self._last_piped_obs.items() if key[1] not in renewed}
        self._last_piped_obs = kept | {key: v for key, v in piped.items() if key[0] == "obs"}

    def _gather(self, done: np.ndarray, during: Phase) -> dict[tuple[str, int], bytes]:
        """Read what finished workers left on their sockets: piped values (returned), or an env's error."""
        statuses = self.buffers.status[done].tolist()
        if statuses.count(_OK) == len(statuses):
            return {}
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        piped: dict[tuple[str, int], bytes] = {}
        records = []
        for w, status in zip(done.tolist(), statuses):
            if status == Status.OK_PIPED_INFOS:
                piped.update(self.pool.recv(w, deadline, during))
            elif status == Status.ERROR:
                records += self.pool.recv(w, deadline, during)
        if records:
            raise remote_errors(records)
        return piped

    # -- async batches: workers in flight, results taken as they come ---------------------------

    def env_ids_of(self, workers: np.ndarray) -> np.ndarray:
        """The envs ``workers`` host, worker by worker (a new array; one index when workers host as many)."""
        if self._env_table is not None:
            return self._env_table[workers].reshape(-1)
        return np.concatenate([np.arange(*self.slices[w]) for w in workers.tolist()])

    # -- rare calls -------------------------------------------------------------------------------

    def call(self, op: CallOp, env_ids: Sequence[int], *args: Any) -> list[Any]:
        """Run a rare operation on some envs (arguments and results are pickled over the sockets)."""
        return [pickle.loads(blob) for blob in self.call_pickled(op, env_ids, args)]

    def call_pickled(self, op: CallOp, env_ids: Sequence[int], args: tuple | Pickled) -> list[bytes]:
        """:meth:`call` for a process that only passes arguments and results on (a Ray actor): the
        arguments may come still pickled (:class:`~vecshm.pickling.Pickled`, loaded by the workers),
        and each env's result is returned as its worker pickled it."""
        self.check_usable()
        ids = [int(i) for i in env_ids]
        for i in ids:
            if not -self.num_envs <= i < self.num_envs:
                raise IndexError(f"env index {i} is out of range for {self.num_envs} envs")
        ids = [i % self.num_envs for i in ids]  # negative indices count from the end, as in a list
        by_worker: dict[int, list[int]] = {}
        for i in ids:
            by_worker.setdefault(int(self.env_worker[i]), []).append(i)
        workers = np.array(sorted(by_worker), dtype=np.int64)
        if len(workers) == 0:
            return []
        self.submit(Command.CALL, workers)
        for w in workers.tolist():
            self._send(w, (op, by_worker[w], args), Phase.of_call(op))
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        results: dict[int, bytes] = {}
        records = []
        try:
            for w in workers.tolist():
                kind, payload = self.pool.recv(w, deadline, Phase.of_call(op))
                if kind == "error":
                    records += payload
                else:
                    results.update(zip(by_worker[w], payload))  # pickled one by one (pickling.dumps)
        except VecShmError as failure:
            self._fail(failure)
            raise
        if records:
            raise remote_errors(records)
        return [results[i] for i in ids]
