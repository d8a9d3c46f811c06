"""Worker processes of one vec env: start-up handshake, liveness, and shutdown that always finishes.

``WorkerPool`` owns every OS resource (processes, sockets, doorbells, the segment). Its
``shutdown`` is idempotent and is also registered with ``weakref.finalize``, so a vec env that is
garbage-collected or still open at interpreter exit never leaves a process behind.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import secrets
import signal
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from multiprocessing import process as mp_process
from multiprocessing import reduction
from multiprocessing import util as mp_util
from multiprocessing.connection import Connection, wait
from typing import Any

import cloudpickle
import numpy as np
import psutil

from vecshm.buffers import Buffers, BufferSpec
from vecshm.errors import StepTimeoutError, WorkerDiedError, remote_error
from vecshm.guard import GUARD_NAME, is_mp_helper, mark_of, terminate_then_kill, worker_mark
from vecshm.memory import NamedSegment, Segment
from vecshm.pickling import factories_by_value
from vecshm.protocol import AutoReset, Command, Phase, receive_addressed
from vecshm.ring import UnitPipe
from vecshm.sync import new_doorbell
from vecshm.transport import Transport
from vecshm.worker import WorkerSpec, worker_main

__all__ = ["WorkerPool", "describe_envs", "describe_exit", "describe_worker", "end_processes"]

CLOSE_GRACE_SECONDS = 5.0
SPAWNED_GRACE_SECONDS = 1.0  # for processes the envs started and left running, once their workers are gone

_WORKER_PROCESSES: weakref.WeakSet[Any] = weakref.WeakSet()  # the Process of every worker started here


def _disown_workers() -> None:
    """In a process made by ``os.fork()``: forget the workers, which are not its children.

    multiprocessing lists them as children of the process that forked, and a copy made by
    ``os.fork()`` inherits that list: at its exit, multiprocessing would terminate them as its
    daemonic children, under the vec env of the process they belong to. (Its own children clear
    the list themselves.)
    """
    mp_process._children.difference_update(_WORKER_PROCESSES)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disown_workers)


def describe_envs(envs: Sequence[int]) -> str:
    """``envs 2-3`` for a contiguous run of envs, ``env 2`` for one."""
    return f"envs {envs[0]}-{envs[-1]}" if len(envs) > 1 else f"env {envs[0]}"


def describe_worker(w: int, envs: Sequence[int]) -> str:
    """``worker 1 (envs 2-3)``: a worker and the envs it hosts, for error messages."""
    return f"worker {w} ({describe_envs(envs)})"


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "is not responding"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name} (exit code {exitcode})"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


class WorkerPool:
    """Starts one process per slice of envs and tears them all down, whatever state they are in."""

    def __init__(
        self,
        env_fns: list[Any],
        slices: list[tuple[int, int]],
        *,
        lanes: list[tuple[int, int]] | None = None,
        context: mp.context.BaseContext,
        autoreset: AutoReset,
        reward_codes: bool,
        daemon: bool,
        spin_seconds: float,
        worker_settings: list[dict[str, Any]],
        transport: Transport,
        registry: bytes = b"",
    ) -> None:
        self.slices = slices  # per worker (what a command runs on): its envs
        # per process: the workers it hosts (by default one each); per worker: its process
        self.lanes = lanes if lanes is not None else [(w, w + 1) for w in range(len(slices))]
        self.process_of = [p for p, (a, b) in enumerate(self.lanes) for _ in range(a, b)]
        self.process_slices = [(slices[a][0], slices[b - 1][1]) for a, b in self.lanes]  # per process: its envs
        self.context = context
        self.transport = transport
        self.owner_pid = os.getpid()  # the workers watch it, and only it ends them (see shutdown)
        # A forked worker inherits the factories as they are, as SubprocVecEnv's and AsyncVectorEnv's
        # do: pickling them would refuse factories those accept under fork.
        method = context.get_start_method()
        forks = method == "fork"
        where = f"a {method} worker process"
        payloads = [env_fns[a:b] if forks else factories_by_value(env_fns, a, b, where) for a, b in self.process_slices]
        tempdir = _own_temp_dir() if method == "forkserver" else None
        self.mark = secrets.token_hex(8)  # what the envs start carries it (vecshm.guard.worker_mark)
        self.specs = [
            WorkerSpec(
                index=p,
                env_start=start,
                env_fns=payloads[p],
                conn=None,  # type: ignore[arg-type]  (set per process start)
                doorbell=new_doorbell(transport),
                done_bell=None,  # type: ignore[arg-type]
                autoreset=autoreset,
                reward_codes=reward_codes,
                spin_seconds=spin_seconds,
                settings=worker_settings[p],
                parent_pid=self.owner_pid,
                registry=registry,
                owner_tempdir=tempdir,
                pool_mark=self.mark,
                lanes=[(w, *slices[w]) for w in range(*self.lanes[p])],
            )
            for p, (start, _) in enumerate(self.process_slices)
        ]
        self.daemon = daemon
        self.doorbells = [spec.doorbell for spec in self.specs]
        self.done_bell = new_doorbell(transport)
        self.claims = UnitPipe()  # free units of the async ring (see vecshm.ring)
        self.processes: list[Any] = [None] * len(self.lanes)
        self.conns: list[Connection] = [None] * len(self.lanes)  # type: ignore[list-item]
        # per process: messages received for workers other than the one a recv waited for
        self._inbox: list[dict[int, deque[Any]]] = [{} for _ in self.lanes]
        self.buffers: Buffers | None = None
        self.segment: Segment | NamedSegment | None = None
        self.stuck: set[int] = set()
        self.built: set[int] = set()  # workers whose envs exist (they reported "ready")
        self.closed = False
        try:
            with _ctrl_c_after_the_starts():
                for p in range(len(self.lanes)):
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
            _WORKER_PROCESSES.add(process)
        except (OSError, EOFError) as exc:  # no process could be made (limits), or the forkserver is gone
            parent_conn.close()
            envs = self.process_envs(p)
            raise WorkerDiedError(
                f"{describe_worker(p, envs)} could not be started: {type(exc).__name__}: {exc}",
                envs,
                None,
            ) from exc
        finally:
            child_conn.close()
            spec.conn = None  # type: ignore[assignment]
        self.conns[p], self.processes[p] = parent_conn, process
        self._inbox[p] = {}

    def send(self, w: int, message: Any, during: Phase) -> None:
        """Send worker ``w`` a message (over its process's connection, addressed to it)."""
        self._send_process(self.process_of[w], (w, message), during)

    def _send_process(self, p: int, message: Any, during: Phase, handle: int | None = None) -> None:
        """Send process ``p`` a message, and then the descriptor ``handle`` if given. A process that
        died has closed its end: that is a ``WorkerDiedError`` naming it, not a ``BrokenPipeError``."""
        try:
            self.conns[p].send(message)
            if handle is not None:
                reduction.send_handle(self.conns[p], handle, self.processes[p].pid)
        except (BrokenPipeError, ConnectionResetError):
            self.raise_died(p, during)

    def ring(self, workers: list[int]) -> None:
        """Wake the processes hosting ``workers``, each once."""
        process_of, doorbells = self.process_of, self.doorbells
        for p in dict.fromkeys(process_of[w] for w in workers):
            doorbells[p].ring()

    # -- start-up ---------------------------------------------------------------------------------

    def collect_ready(self, deadline: float | None) -> list[tuple[Any, Any]]:
        """``(observation_space, action_space)`` of every env, in env order, once all exist.

        Waits on every process at once, so that the first construction error, or a dead process, is
        raised as soon as it happens rather than after the slower processes have built their envs
        (a simulator that takes 30 s to load would otherwise hide a typo for 30 s).
        """
        replies: list[Any] = [None] * len(self.lanes)
        for p, reply in self.replies(range(len(self.lanes)), deadline, Phase.CONSTRUCTION):
            if reply[0] == "error":
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
        for p in range(len(self.lanes)):
            self._send_segment(p, Phase.START_UP)
        for p in range(len(self.lanes)):
            self._recv_process(p, deadline, Phase.START_UP)
        if not keep_fd:
            self.segment.release_fd()
        self.buffers = Buffers(spec, self.segment)
        return self.buffers

    def _send_segment(self, p: int, during: Phase) -> None:
        """Tell process ``p`` where the segment is: its descriptor (native) or its name (portable)."""
        if isinstance(self.segment, NamedSegment):
            self._send_process(p, ("attach", self.buffer_spec, self.segment.name), during)
        else:
            self._send_process(p, ("attach", self.buffer_spec, None), during, handle=self.segment.fd)

    def restart(self, p: int, deadline: float | None) -> None:
        """Replace dead process ``p`` by a new one that builds the same envs and maps the segment."""
        old = self.processes[p]
        old.join(1.0)
        old.close()
        self.conns[p].close()
        self.conns[p] = self.processes[p] = None  # until the new one has started
        with _ctrl_c_after_the_starts():
            self._start_process(p)
        reply = self._recv_process(p, deadline, Phase.RESTART)
        if reply[0] == "error":
            raise remote_error(reply[1])
        self._send_segment(p, Phase.RESTART)
        self._recv_process(p, deadline, Phase.RESTART)

    # -- messages and liveness --------------------------------------------------------------------

    def recv(self, w: int, deadline: float | None, during: Phase) -> Any:
        """Receive what worker ``w`` sent; a dead process or a passed deadline raise instead of hanging.

        A process's workers share its connection: what arrives for the others waits for their recv.
        """
        p = self.process_of[w]
        return receive_addressed(self._inbox[p], w, lambda: self._recv_process(p, deadline, during))

    def _recv_process(self, p: int, deadline: float | None, during: Phase) -> Any:
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
                self.raise_timeout([w for p in pending for w in range(*self.lanes[p])], during)

    def env_indices(self, w: int) -> list[int]:
        """The envs of worker ``w``."""
        return list(range(*self.slices[w]))

    def process_envs(self, p: int) -> list[int]:
        """The envs process ``p`` hosts."""
        return list(range(*self.process_slices[p]))

    def raise_died(self, p: int, during: Phase, note: str = "") -> None:
        process = self.processes[p]
        process.join(1.0)
        envs = self.process_envs(p)
        running = self.running_env(p, during)
        running = "" if running is None else f"; env {running} was running"
        raise WorkerDiedError(
            f"{describe_worker(p, envs)} {describe_exit(process.exitcode)} during {during}{note}{running}. "
            "The vec env cannot continue; close() it and create a new one."
            + self._start_up_hint(process.exitcode, during),
            envs,
            process.exitcode,
        )

    def _start_up_hint(self, exitcode: int | None, during: Phase) -> str:
        """Why a worker that never reported may have died: the usual cause is a missing main guard."""
        method = self.context.get_start_method()
        if during is not Phase.CONSTRUCTION or exitcode != 1 or method == "fork":
            return ""
        main = getattr(sys.modules.get("__main__"), "__file__", None)
        script = f" ({main})" if main else ""
        return (
            f"\n\nWith start_method={method!r}, each worker first re-imports the main script{script}. A script "
            "that creates the vec env at module level makes every worker try to start workers of its own, and "
            "they exit (the worker's stderr shows multiprocessing's 'bootstrapping phase' RuntimeError). Put the "
            'code that creates the vec env under `if __name__ == "__main__":`, or use start_method="fork".'
        )

    def running_env(self, p: int, during: Phase) -> int | None:
        """The env process ``p`` was stepping or resetting (it records each before starting it), or
        None: between commands, or not yet started on one."""
        for w in range(*self.lanes[p]):
            running = self._running_env_of(w, during)
            if running is not None:
                return running
        return None

    def _running_env_of(self, w: int, during: Phase) -> int | None:
        """The env worker ``w`` was stepping or resetting, or None (see ``running_env``)."""
        if self.buffers is None or not during.runs_envs:
            return None
        env = int(self.buffers.progress[w])
        start, stop = self.slices[w]
        return env if start <= env < stop else None

    def raise_timeout(self, workers: list[int], during: Phase) -> None:
        """A ``StepTimeoutError`` naming, in each process with unfinished ``workers``, the env it was
        running (the others of its envs only wait behind that one), or, with none running, their envs."""
        processes: dict[int, list[int]] = {}
        for w in workers:
            processes.setdefault(self.process_of[w], []).append(w)
        self.stuck.update(processes)
        envs = []
        for p, waiting in processes.items():
            running = self.running_env(p, during)
            envs += [running] if running is not None else [i for w in waiting for i in self.env_indices(w)]
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
            spawned = self._spawned_by_envs()
            self._ask_to_close()
            self._reap()
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
                    conn.send(("close",))
                except OSError:
                    pass
            return
        for p, process in enumerate(self.processes):
            if process is not None and p not in self.stuck and process.exitcode is None:
                first, last = self.lanes[p]
                self.buffers.cmd[first:last] = Command.CLOSE
                self.buffers.cmd_seq[first:last] += 1
                self.doorbells[p].ring()

    def _spawned_by_envs(self) -> list[psutil.Process]:
        """The processes the envs started (a simulator, a server), found before the workers exit:
        once a worker is gone they belong to init, and nothing would end them. Those are the
        workers' descendants, and what carries a worker's mark (started in a session of its own
        by a launcher that exited: init's already; see vecshm.guard). multiprocessing's own helpers
        (a worker's resource tracker or forkserver) are left out: they end by themselves when
        their worker does, after cleaning up after it."""
        workers = [process.pid for process in self.processes if process is not None and process.exitcode is None]
        if not workers:
            return []
        marks = {worker_mark(self.mark, pid) for pid in workers}
        return [p for p in _descendants_or_marked(workers, marks) if not (is_mp_helper(p) or _is_guard(p))]

    def _reap(self) -> None:
        """Join within a grace period (the stuck workers terminated at once); terminate, then kill,
        whatever is still running."""
        started = [(w, process) for w, process in enumerate(self.processes) if process is not None]
        for w, process in started:
            if w in self.stuck:
                process.terminate()
        end_processes([process for _, process in started], CLOSE_GRACE_SECONDS)
        for _, process in started:
            process.close()


@contextlib.contextmanager
def _ctrl_c_after_the_starts() -> Iterator[None]:
    """Hold a Ctrl-C back until the worker processes have started, then raise it.

    Raised inside ``Process.start()`` (which waits for the forkserver to report the new pid), a
    ``KeyboardInterrupt`` would leave a worker running that the pool never learnt of: nothing
    would end it, and it would die on a broken pipe once its envs were built. Only the default
    handler, in the main thread, is replaced: a program's own SIGINT handler is left alone.
    """
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    interrupted: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if interrupted:
        raise KeyboardInterrupt


def end_processes(processes: Sequence[Any], grace: float) -> None:
    """Give ``processes`` ``grace`` seconds to exit; terminate, then kill, whatever is still running."""
    deadline = time.monotonic() + grace
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.exitcode is None:
            process.terminate()
            process.join(1.0)
        if process.exitcode is None:
            process.kill()
            process.join()


def _own_temp_dir() -> str | None:
    """multiprocessing's folder of this process (``/tmp/pymp-*``, where the forkserver's socket
    lives), if this process made it: multiprocessing removes it at our exit, which SIGKILL skips,
    and the workers' guards then remove it (see vecshm.guard). A folder inherited from a parent
    (a fork copies multiprocessing's settings) is the parent's, and is left alone."""
    tempdir = mp_util.get_temp_dir()
    ours = any(
        getattr(f, "_callback", None) is getattr(mp_util, "_remove_temp_dir", None)
        and getattr(f, "_pid", None) == os.getpid()
        and tempdir in (getattr(f, "_args", None) or ())
        for f in list(getattr(mp_util, "_finalizer_registry", {}).values())
    )
    return tempdir if ours else None


def _is_guard(process: psutil.Process) -> bool:
    """A worker's guard (see :mod:`vecshm.guard`): it ends by itself with its worker."""
    try:
        return process.name() == GUARD_NAME
    except psutil.Error:
        return False


def _descendants_or_marked(pids: Sequence[int], marks: set[str]) -> list[psutil.Process]:
    """Every descendant of ``pids``, and every other process that carries one of ``marks``
    (:func:`vecshm.guard.mark_of`), from one pass over the process table
    (``children(recursive=True)`` makes one per call: 56 ms for 32 workers on this 2-core
    machine, more where more runs)."""
    children: dict[int, list[psutil.Process]] = {}
    marked = {}
    for process in psutil.process_iter(["ppid"]):
        children.setdefault(process.info["ppid"], []).append(process)
        if mark_of(process.pid) in marks:
            marked[process.pid] = process
    found, stack = [], list(pids)
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            marked.pop(child.pid, None)
            stack.append(child.pid)
    return found + list(marked.values())


def as_env_list(env_fns: Any) -> list[Any]:
    fns = list(env_fns)
    for i, fn in enumerate(fns):
        if not callable(fn):
            raise TypeError(
                f"env_fns[{i}] is {type(fn).__name__}, not a callable that returns an env; "
                "pass factories, e.g. [lambda: gym.make('CartPole-v1') for _ in range(n)]"
            )
    if not fns:
        raise ValueError("env_fns is empty: a vec env needs at least one env factory")
    return fns


def split_envs(
    num_envs: int, envs_per_worker: int | None, num_cores: int, max_workers: int | None = None
) -> list[tuple[int, int]]:
    """Contiguous env slices, one per worker.

    ``envs_per_worker`` each (the last worker takes what is left: 5 envs by 2 give 2, 2 and 1), or,
    by default, spread as evenly as possible over the cores, and over at most ``max_workers``.
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
