"""Worker processes of one vec env: start-up handshake, liveness, and shutdown that always finishes.

``ProcessPool`` owns every OS resource (processes, sockets, doorbells, the segment). Its
``shutdown`` is idempotent and is also registered with ``weakref.finalize``, so a vec env that is
garbage-collected or still open at interpreter exit never leaves a process behind.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import secrets
import time
from collections import deque
from collections.abc import Iterable, Iterator
from multiprocessing import reduction
from multiprocessing.connection import Connection, wait
from typing import Any

import cloudpickle

from vecshm.parent.control import ControlWords
from vecshm.parent.engine_options import EngineRules
from vecshm.parent.plan import VecEnvPlan
from vecshm.parent.processes.lifetime import (
    WORKER_PROCESSES,
    ctrl_c_after_the_starts,
    describe_exit,
    describe_process,
    own_temp_dir,
    reap,
    spawned_by_envs,
    start_up_hint,
)
from vecshm.shared import sharing
from vecshm.shared.buffers import Buffers, BufferSpec
from vecshm.shared.errors import StepTimeoutError, WorkerDiedError, remote_error
from vecshm.shared.memory import NamedSegment, Segment
from vecshm.shared.pickling import factories_by_value
from vecshm.shared.protocol import Message, Phase, receive_addressed
from vecshm.shared.sync import new_doorbell
from vecshm.shared.transport import Transport
from vecshm.shared.units import UnitPipe
from vecshm.worker.guard import terminate_then_kill
from vecshm.worker.main import ProcessSpec, worker_main

__all__ = ["ProcessPool"]

CLOSE_GRACE_SECONDS = 5.0
SPAWNED_GRACE_SECONDS = 1.0  # for processes the envs started and left running, once their workers are gone


class ProcessPool:
    """Starts one process per slice of envs and tears them all down, whatever state they are in."""

    def __init__(
        self,
        env_fns: list[Any],
        plan: VecEnvPlan,
        options: EngineRules,
        context: mp.context.BaseContext,
        worker_settings: list[dict[str, Any]],
        transport: Transport,
        registry: bytes = b"",
    ) -> None:
        """Start a process per slice of ``plan``, each building its envs from ``env_fns``; ``options``
        give their autoreset mode, reward codes, daemon flag and spin; ``registry``: the parent's
        Gymnasium registry, for processes that do not inherit it."""
        self.plan = plan
        slices, self.process_lanes, self.process_of = plan.lane_slices, plan.process_lanes, plan.process_of
        self.context = context
        self.transport = transport
        self.owner_pid = os.getpid()  # the workers watch it, and only it ends them (see shutdown)
        # A forked worker inherits the factories as they are, as SubprocVecEnv's and AsyncVectorEnv's
        # do: pickling them would refuse factories those accept under fork.
        method = context.get_start_method()
        forks = method == "fork"
        where = f"a {method} worker process"
        # vecshm.share: the segments the factories' arrays name go to every process (and stay, for a
        # restarted one's), noted while the factories are pickled, or named by those that pickled them
        with sharing.collecting() as shared:
            payloads = [
                env_fns[a:b] if forks else factories_by_value(env_fns, a, b, where) for a, b in plan.process_slices
            ]
        shared.update(token for fn in env_fns for token in getattr(fn, "shares", ()))
        self.shares = sharing.hold(shared)
        tempdir = own_temp_dir() if method == "forkserver" else None
        self.mark = secrets.token_hex(8)  # what the envs start carries it (vecshm.worker.guard.worker_mark)
        self.specs = [
            ProcessSpec(
                index=p,
                env_start=start,
                env_fns=payloads[p],
                conn=None,  # type: ignore[arg-type]  # set per process start
                doorbell=new_doorbell(transport),
                done_bell=None,  # type: ignore[arg-type]
                autoreset=options.autoreset,
                reward_codes=options.reward_codes,
                spin_seconds=options.worker_spin_seconds[0],
                loose_spin_seconds=options.worker_spin_seconds[1],
                settings=worker_settings[p],
                parent_pid=self.owner_pid,
                registry=registry,
                owner_tempdir=tempdir,
                pool_mark=self.mark,
                shares=self.shares,
                lanes=[(lane, *slices[lane]) for lane in range(*self.process_lanes[p])],
            )
            for p, (start, _) in enumerate(plan.process_slices)
        ]
        self.daemon = options.daemon
        self._timed = options.step_timeout is not None  # commands record when they were sent
        self.doorbells = [spec.doorbell for spec in self.specs]
        self.done_bell = new_doorbell(transport)
        self.claims = UnitPipe()  # free units of the async ring (see vecshm.parent.handback.ring)
        self.processes: list[Any] = [None] * len(self.process_lanes)
        self.conns: list[Connection] = [None] * len(self.process_lanes)  # type: ignore[list-item]
        # per process: messages received for workers other than the one a recv waited for
        self._inbox: list[dict[int, deque[Any]]] = [{} for _ in self.process_lanes]
        self.buffers: Buffers | None = None
        self.words: ControlWords | None = None  # with the buffers: the one writer of the control words
        self.segment: Segment | NamedSegment | None = None
        self.stuck: set[int] = set()
        self.built: set[int] = set()  # workers whose envs exist (they reported "ready")
        self.closed = False
        try:
            with ctrl_c_after_the_starts():
                for p in range(len(self.process_lanes)):
                    self._start_process(p)
        except BaseException:
            self.shutdown()  # the workers already started: none outlives a failed start
            raise

    def _start_process(self, p: int) -> None:
        parent_conn, child_conn = self.context.Pipe(duplex=True)
        spec = self.specs[p]
        spec.conn, spec.done_bell, spec.claims = child_conn, self.done_bell, self.claims
        process = self.context.Process(target=worker_main, args=(spec,), daemon=self.daemon, name=f"vecshm-worker-{p}")
        try:
            process.start()
            WORKER_PROCESSES.add(process)
        except (OSError, EOFError) as exc:  # no process could be made (limits), or the forkserver is gone
            parent_conn.close()
            envs = self.plan.process_envs(p)
            raise WorkerDiedError(
                f"{describe_process(p, envs)} could not be started: {type(exc).__name__}: {exc}",
                envs,
                None,
            ) from exc
        finally:
            child_conn.close()
            spec.conn = None  # type: ignore[assignment]
        self.conns[p], self.processes[p] = parent_conn, process
        self._inbox[p] = {}

    def pids(self) -> list[int]:
        """The worker processes' pids now (a restarted worker has a new one)."""
        return [process.pid for process in self.processes]

    def write_message(self, lane: int, message: Any, during: Phase) -> None:
        """Write ``lane`` a message (on its process's connection, addressed to the lane)."""
        self._write_to_process(self.process_of[lane], (lane, message), during)

    def _write_to_process(self, p: int, message: Any, during: Phase, handle: int | None = None) -> None:
        """Write process ``p`` a message, and then the descriptor ``handle`` if given. A process that
        died has closed its end: that is a ``WorkerDiedError`` naming it, not a ``BrokenPipeError``."""
        try:
            self.conns[p].send(message)
            if handle is not None:
                reduction.send_handle(self.conns[p], handle, self.processes[p].pid)
        except (BrokenPipeError, ConnectionResetError):
            self.raise_died(p, during)

    # -- start-up ---------------------------------------------------------------------------------

    def collect_ready(self, deadline: float | None) -> list[tuple[Any, Any]]:
        """``(observation_space, action_space)`` of every env, in env order, once all exist.

        Waits on every process at once, so that the first construction error, or a dead process, is
        raised as soon as it happens rather than after the slower processes have built their envs
        (a simulator that takes 30 s to load would otherwise hide a typo for 30 s).
        """
        replies: list[Any] = [None] * len(self.process_lanes)
        for p, reply in self.replies(range(len(self.process_lanes)), deadline, Phase.CONSTRUCTION):
            if reply[0] == Message.ERROR:
                raise remote_error(reply[1])
            self.built.add(p)
            replies[p] = reply
        return [env_spaces for reply in replies for env_spaces in cloudpickle.loads(reply[1])]

    def attach(self, spec: BufferSpec, deadline: float | None, keep_fd: bool = False) -> Buffers:
        """Create the segment, hand its descriptor to every process, and close it once all have mapped it.

        ``keep_fd`` keeps the descriptor so that a restarted process can map the segment too.
        """
        self.buffer_spec = spec
        size = spec.plan().size
        self.segment = Segment(size) if self.transport.native else NamedSegment(size)
        for p in range(len(self.process_lanes)):
            self._write_segment(p, Phase.START_UP)
        for p in range(len(self.process_lanes)):
            self.read_from_process(p, deadline, Phase.START_UP)
        if not keep_fd:
            self.segment.release_fd()
        self.buffers = Buffers(spec, self.segment)
        self.words = ControlWords(self.buffers, self.plan, self.doorbells, self._timed)
        return self.buffers

    def _write_segment(self, p: int, during: Phase) -> None:
        """Tell process ``p`` where the segment is: its descriptor (native) or its name (portable)."""
        if isinstance(self.segment, NamedSegment):
            self._write_to_process(p, (Message.ATTACH, self.buffer_spec, self.segment.name), during)
        else:
            self._write_to_process(p, (Message.ATTACH, self.buffer_spec, None), during, handle=self.segment.fd)

    def restart(self, p: int, deadline: float | None) -> None:
        """Replace dead process ``p`` by a new one that builds the same envs and maps the segment."""
        old = self.processes[p]
        old.join(1.0)
        old.close()
        self.conns[p].close()
        self.conns[p] = self.processes[p] = None  # until the new one has started
        with ctrl_c_after_the_starts():
            self._start_process(p)
        reply = self.read_from_process(p, deadline, Phase.RESTART)
        if reply[0] == Message.ERROR:
            raise remote_error(reply[1])
        self._write_segment(p, Phase.RESTART)
        self.read_from_process(p, deadline, Phase.RESTART)

    # -- messages and liveness --------------------------------------------------------------------

    def read_message(self, lane: int, deadline: float | None, during: Phase) -> Any:
        """Read what ``lane`` wrote; a dead process or a passed deadline raise instead of hanging.

        A process's lanes share its connection: what arrives for the others waits for their read.
        """
        p = self.process_of[lane]
        return receive_addressed(self._inbox[p], lane, lambda: self.read_from_process(p, deadline, during))

    def read_from_process(self, p: int, deadline: float | None, during: Phase) -> Any:
        """The next message process ``p`` wrote, for whichever of its lanes (start-up, a restart)."""
        return next(self.replies([p], deadline, during))[1]

    def replies(self, processes: Iterable[int], deadline: float | None, during: Phase) -> Iterator[tuple[int, Any]]:
        """``(p, message)``: the next message of each of ``processes``, in the order they arrive; a
        dead process or a passed deadline raise instead of hanging."""
        pending = list(processes)
        while pending:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = set(wait([self.conns[p] for p in pending] + [self.processes[p].sentinel for p in pending], timeout))
            for p in list(pending):
                if self.conns[p] in ready:
                    try:
                        message = self.conns[p].recv()
                    except EOFError:
                        self.raise_died(p, during)
                    pending.remove(p)
                    yield p, message
                elif self.processes[p].sentinel in ready:
                    self.raise_died(p, during)
            if pending and deadline is not None and time.monotonic() >= deadline:
                self.raise_timeout([lane for p in pending for lane in range(*self.process_lanes[p])], during)

    def raise_died(self, p: int, during: Phase, note: str = "") -> None:
        process = self.processes[p]
        process.join(1.0)
        envs = self.plan.process_envs(p)
        running = self.running_env(p, during)
        running = "" if running is None else f"; env {running} was running"
        raise WorkerDiedError(
            f"{describe_process(p, envs)} {describe_exit(process.exitcode)} during {during}{note}{running}. "
            "The vec env cannot continue; close() it and create a new one."
            + start_up_hint(self.context.get_start_method(), process.exitcode, during),
            envs,
            process.exitcode,
        )

    def running_env(self, p: int, during: Phase) -> int | None:
        """The env process ``p`` was stepping or resetting (it records each before starting it), or
        None: between commands, or not yet started on one."""
        for lane in range(*self.process_lanes[p]):
            running = self._running_env_of(lane, during)
            if running is not None:
                return running
        return None

    def _running_env_of(self, lane: int, during: Phase) -> int | None:
        """The env ``lane`` was stepping or resetting, or None (see ``running_env``)."""
        if self.words is None or not during.runs_envs:
            return None
        env = self.words.env_running(lane)
        start, stop = self.plan.lane_slices[lane]
        return env if start <= env < stop else None

    def raise_timeout(self, lanes: list[int], during: Phase) -> None:
        """A ``StepTimeoutError`` naming, in each process with unfinished ``lanes``, the env it was
        running (the others of its envs only wait behind that one), or, with none running, their envs."""
        processes: dict[int, list[int]] = {}
        for lane in lanes:
            processes.setdefault(self.process_of[lane], []).append(lane)
        self.stuck.update(processes)
        envs = []
        for p, waiting in processes.items():
            running = self.running_env(p, during)
            envs += [running] if running is not None else [i for lane in waiting for i in self.plan.lane_envs(lane)]
        raise StepTimeoutError(
            f"env(s) {envs} did not finish {during} within the timeout; the vec env can only be closed now",
            envs,
        )

    # -- shutdown ---------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Ask every worker to close its envs, then make sure each process is gone.

        In a process forked from the owner (``os.fork()``), this pool is a copy: closing it there,
        explicitly, by garbage collection or at the copy's exit, only drops the copy's descriptors
        and mapping. Asking the workers to close would stop the owner's vec env under it.
        """
        if self.closed:
            return
        self.closed = True
        if os.getpid() == self.owner_pid:
            spawned = spawned_by_envs(self.processes, self.mark)
            self._ask_to_close()
            reap(self.processes, self.stuck, CLOSE_GRACE_SECONDS)
            terminate_then_kill(spawned, SPAWNED_GRACE_SECONDS)
        for conn in self.conns:
            if conn is not None:  # None: a worker whose start failed
                conn.close()
        for bell in [*self.doorbells, self.done_bell]:
            bell.close()
        self.claims.close()  # before the buffers go: lent async batches then give nothing back
        if self.buffers is not None:
            self.buffers.release()
        if self.segment is not None:
            self.segment.close()
        sharing.release(self.shares)
        self.shares = []

    def _ask_to_close(self) -> None:
        if self.buffers is None:  # still in the start-up handshake
            for p, conn in enumerate(self.conns):
                if conn is None:
                    continue
                if self.segment is not None or (p not in self.built and not conn.poll()):
                    # A worker reads "close" only between building its envs and mapping the
                    # segment. One still building (start-up failed elsewhere, or Ctrl-C), or one
                    # sent the segment (it may be waiting for commands already), is ended at once,
                    # as a stuck one is.
                    self.stuck.add(p)
                    continue
                try:
                    conn.send((Message.CLOSE,))
                except OSError:
                    pass
            return
        for p, process in enumerate(self.processes):
            if process is not None and p not in self.stuck and process.exitcode is None:
                self.words.close(p)
