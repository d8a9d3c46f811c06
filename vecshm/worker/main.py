"""The worker process: builds its slice of envs, maps the segment, and serves commands until told to stop.

The process's life lives here (start-up handshake, watching the parent, waiting for commands);
what one command does to the envs lives in :mod:`vecshm.worker.runner`. Observations never cross a pipe;
infos are pickled into a per-env arena row only when non-empty, and follow on the control socket
only when they do not fit.
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing import reduction
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import psutil

from vecshm.shared.affinity import apply_worker_settings
from vecshm.shared.buffers import NO_ENV, Buffers, BufferSpec
from vecshm.shared.errors import RemoteError
from vecshm.shared.memory import NamedSegment, Segment
from vecshm.shared.pickling import dumps
from vecshm.shared.protocol import AutoReset, Command, Message, Phase
from vecshm.shared.registry import adopt_registry
from vecshm.shared.sharing import ShareGrant, enter_worker
from vecshm.shared.step_times import PUBLISH_SECONDS
from vecshm.shared.sync import Doorbell, SocketDoorbell, Spinner, fence
from vecshm.shared.units import UnitPipe
from vecshm.worker.guard import alive, start_guard, worker_mark
from vecshm.worker.lane import Lane, LaneConnection
from vecshm.worker.runner import EnvRunner

__all__ = ["ProcessSpec", "worker_main"]

PARENT_CHECK_SECONDS = 0.5  # how often a worker checks that its parent is still alive
IDLE_SECONDS = 0.005  # asleep this long, a worker is idle: the caller works (vecshm.stats publishes then)
PR_SET_PDEATHSIG = 1
COMMANDS = {command.value: command for command in Command}  # a dict lookup, not an enum call per command


@dataclass
class ProcessSpec:
    """What a worker process needs to start; pickled once at start-up (env factories via cloudpickle)."""

    index: int
    env_start: int
    env_fns: bytes | list[Callable[[], gym.Env]]  # cloudpickled, or the factories themselves under fork
    conn: Connection
    doorbell: Doorbell | SocketDoorbell
    done_bell: Doorbell | SocketDoorbell
    autoreset: AutoReset
    reward_codes: bool  # record each reward's dtype (see vecshm.shared.buffers.REWARD_DTYPES)
    spin_seconds: float  # the longest spin, while the parent's turnaround is short
    loose_spin_seconds: float  # ... and after a longer one (see vecshm.parent.engine_options.WORKER_SPIN_SECONDS)
    settings: dict[str, Any]
    parent_pid: int
    registry: bytes = b""  # the parent's gymnasium registry entries (see vecshm.shared.registry)
    claims: UnitPipe | None = None  # free units of the async ring (see vecshm.parent.handback.ring)
    owner_tempdir: str | None = None  # the owner's multiprocessing folder (its forkserver's socket)
    pool_mark: str | None = None  # marks what the envs start (vecshm.worker.guard.worker_mark)
    shares: list[ShareGrant] = field(default_factory=list)  # the vecshm.share segments it may map
    # the lanes this process hosts, each ``(index, first env, end)``: the units commands run on
    # (one, all its envs, unless each env takes its own commands; see vecshm.parent.core.engine)
    lanes: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def hosted(self) -> slice:
        """The hosted lanes' indices, as a slice of the per-lane words."""
        return slice(self.lanes[0][0], self.lanes[-1][0] + 1)


def worker_main(spec: ProcessSpec) -> None:
    """Entry point of a worker process."""
    # Ctrl-C is the parent's to handle (it may reach a worker before it leaves the group below).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    mark = None if spec.pool_mark is None else worker_mark(spec.pool_mark, os.getpid())
    guard = start_guard(spec.parent_pid, spec.owner_tempdir, mark)  # first: while this process has one thread
    closed = False
    try:
        closed = _run(spec)
    finally:
        if guard is not None:
            guard.stop(owner_cleans_up=closed)


def _run(spec: ProcessSpec) -> bool:
    """Build the envs, attach the segment, serve commands; whether the vec env asked us to close
    (it then ends what the envs left running itself), rather than failed or went away."""
    parent = os.getppid()
    exit_with_parent(spec.parent_pid)
    conn = spec.conn
    apply_worker_settings(spec.settings)
    enter_worker(spec.shares)  # before the factories, whose shared arrays map these
    envs = _build_envs(spec)
    if envs is None:
        return False
    # vecshm.shared.pickling: a Space subclass defined in the user's main script must come back too
    try:
        conn.send((Message.READY, dumps([(env.observation_space, env.action_space) for env in envs])))
    except (BrokenPipeError, ConnectionResetError):  # the vec env gave up on us while the envs were built
        _close_envs(envs)
        return False
    message = _read_or_orphaned(conn, parent)
    if message is None or message[0] != Message.ATTACH:
        _close_envs(envs)
        return message is not None and message[0] == Message.CLOSE
    buffer_spec: BufferSpec = message[1]
    name: str | None = message[2]
    size = buffer_spec.plan().size
    segment = Segment.attach(reduction.recv_handle(conn), size) if name is None else NamedSegment.attach(name, size)
    buffers = Buffers(buffer_spec, segment)
    buffers.progress[spec.hosted] = NO_ENV  # the segment starts zeroed: env 0 is not running here
    # Commands start after "attached" reaches the parent; a restarted worker must not replay the
    # command its predecessor died in, so the first command to serve is the next one.
    seen = buffers.cmd_seq[spec.hosted].tolist()
    conn.send((Message.ATTACHED,))
    try:
        return _serve(spec, envs, buffers, parent, seen)
    finally:
        _close_envs(envs)
        buffers.release()
        segment.close()


def exit_with_parent(parent_pid: int) -> None:
    """End this worker as soon as the vec env's process is gone, even if an env is stuck in step().

    A daemon thread polls the parent (pid reuse and zombies included) and hard-exits the process;
    where the parent is also our direct parent, the kernel's parent-death signal acts at once.
    """
    if os.getppid() == parent_pid and sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
    try:
        parent = psutil.Process(parent_pid)
    except psutil.NoSuchProcess:
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_CHECK_SECONDS)
            if not alive(parent):
                os._exit(1)

    threading.Thread(target=watch, name="vecshm-parent-watch", daemon=True).start()


def _build_envs(spec: ProcessSpec) -> list[gym.Env] | None:
    try:  # a factory's module may not import here (not installed on this node): the first env's error
        fns = cloudpickle.loads(spec.env_fns) if isinstance(spec.env_fns, bytes) else spec.env_fns
    except Exception as exc:
        _report_construction_error(spec, exc, spec.env_start)
        return None
    envs: list[gym.Env] = []
    for offset, fn in enumerate(fns):
        index = spec.env_start + offset
        try:
            env = _make_env(fn, spec.registry)
            if not isinstance(env, gym.Env):
                raise TypeError(f"the env factory returned {type(env).__name__}, not a gymnasium.Env")
            if any(env.unwrapped is other.unwrapped for other in envs):
                raise ValueError(
                    "the env factory returned an env instance that another factory already returned; "
                    "make each factory create a new env (e.g. `lambda: gym.make(env_id)`), "
                    "not `lambda: env`"
                )
            envs.append(env)
        except Exception as exc:
            _report_construction_error(spec, exc, index)
            _close_envs(envs)
            return None
    return envs


def _report_construction_error(spec: ProcessSpec, exc: Exception, index: int) -> None:
    try:
        spec.conn.send((Message.ERROR, RemoteError(exc, index, Phase.CONSTRUCTION)))
    except (BrokenPipeError, ConnectionResetError):  # the vec env is gone already
        pass


def _make_env(fn: Callable[[], gym.Env], registry: bytes) -> gym.Env:
    """``fn()``; if it asks for an id this process does not know, adopt the parent's registry and retry.

    Adopting only on a miss leaves a factory that registers its own ids (``import ale_py``) to do
    so undisturbed, without "Overriding environment" warnings.
    """
    try:
        return fn()
    except gym.error.UnregisteredEnv:
        if not adopt_registry(registry):
            raise
    return fn()


def _close_envs(envs: list[gym.Env]) -> None:
    for env in envs:
        try:
            env.close()
        except Exception:  # closing is best effort: the process is about to exit
            pass


def _read_or_orphaned(conn: Connection, parent: int) -> Any:
    """The parent's next message, or None if the parent died meanwhile."""
    while not conn.poll(PARENT_CHECK_SECONDS):
        if os.getppid() != parent:
            return None
    try:
        return conn.recv()
    except EOFError:
        return None


def _serve(spec: ProcessSpec, envs: list[gym.Env], buffers: Buffers, parent: int, seen: list[int]) -> bool:
    """Run commands until CLOSE (True) or the parent is gone (False).

    Each hosted lane has its own command words; a pass runs the command of every one that has
    a new one, in order, and the next pass picks up what arrived meanwhile.
    """
    inbox: dict[int, deque[Any]] = {}
    timed = bool(spec.settings.get("stats"))  # (vecshm.stats)
    rules = (spec.autoreset, spec.reward_codes, timed)
    runners = [
        EnvRunner(
            Lane(w, start, LaneConnection(spec.conn, w, inbox), spec.done_bell, spec.claims, *rules),
            envs[start - spec.env_start : stop - spec.env_start],
            buffers,
        )
        for w, start, stop in spec.lanes
    ]
    spinner = Spinner(spec.spin_seconds)
    first = spec.hosted.start
    cmd, busy = buffers.cmd, buffers.busy
    mine = buffers.cmd_seq[spec.hosted]
    new_commands = _command_watch(mine, seen)
    busy_since = None
    # the envs' step times, copied into the segment every PUBLISH_SECONDS and once idle (vecshm.shared.step_times)
    publish_at = 0.0 if timed else math.inf

    def publish() -> None:
        for runner in runners:
            runner.publish_step_times()

    while True:
        idle_since = time.perf_counter()
        if busy_since is not None:  # the commands just run, for the parent's core balance (vecshm.parent.core.balance)
            busy[first] += idle_since - busy_since
        if idle_since >= publish_at:
            publish()
            publish_at = idle_since + PUBLISH_SECONDS
        pending = _wait_for_commands(spec, spinner, new_commands, parent, buffers, publish if timed else None)
        if pending is None:
            return False
        busy_since = time.perf_counter()
        for j in pending:
            seq = mine.item(j)
            command = COMMANDS[cmd.item(first + j)]
            if command is Command.CLOSE:
                return True
            runners[j].run(command, seq)
        for j in pending:  # once every published result is out: resets done ahead hold up no env
            runners[j].reset_ended_ahead()
        spinner.record(busy_since - idle_since)  # (the wait just ended, recorded off the commands' path)


def _command_watch(mine: np.ndarray, seen: list[int]) -> Callable[[], list[int]]:
    """A function that returns which hosted workers (offsets) have a new command since it last
    looked (``mine``: their command counters; ``seen``: the counts already served)."""
    if len(seen) == 1:  # one worker per process: a word to compare
        last = seen[0]

        def one() -> list[int]:
            nonlocal last
            if mine[0] == last:
                return []
            last = int(mine[0])
            return [0]

        return one
    served = list(seen)

    def several() -> list[int]:
        now = mine.tolist()  # a few words: comparing lists beats numpy's per-call overhead
        if now == served:
            return []
        changed = [j for j, (count, last) in enumerate(zip(now, served)) if count != last]
        served[:] = now
        return changed

    return several


def _wait_for_commands(
    spec: ProcessSpec,
    spinner: Spinner,
    new_commands: Callable[[], list[int]],
    parent: int,
    buffers: Buffers,
    before_sleep: Callable[[], None] | None,
) -> list[int] | None:
    """Spin, then sleep on the doorbell, until some hosted worker has a new command: which; None
    once the parent is gone. The spin covers the recent waits (``spinner``) up to the full budget
    while the parent's ``turnaround`` is within the loose one (a tight loop: the waits are the
    other workers' steps and the parent's own work), and at least the loose one then, so that the
    parent's occasional slow turn costs no wake-up; up to the loose one when the caller works in
    between (a learner keeps its cores). Before it sleeps it raises its asleep words, so that the
    parent rings (vecshm.shared.sync); once asleep for ``IDLE_SECONDS`` it calls ``before_sleep``, if any
    (not before every nap: in a tight loop on shared cores a worker naps every few steps, and a
    publish there cost frames 5%)."""
    pending = new_commands()
    if pending:
        return pending

    def found() -> bool:
        pending.extend(new_commands())
        return bool(pending)

    loose, polite = spec.loose_spin_seconds, not spec.settings.get("own_core", False)
    if buffers.turnaround.item(0) <= loose:
        spinner.spin(found, None, loose, polite)
    else:
        spinner.spin(found, loose, polite=polite)
    if pending:
        return pending
    asleep = buffers.asleep[spec.hosted]
    asleep[...] = 1
    fence()  # the asleep words written before the commands are read again
    pending = new_commands()
    if not pending and before_sleep is not None:
        if not spec.doorbell.wait(IDLE_SECONDS):
            before_sleep()  # (idle: the envs' step times, fresh for a snapshot taken while the caller works)
        pending = new_commands()
    while not pending:
        if not spec.doorbell.wait(PARENT_CHECK_SECONDS) and os.getppid() != parent:
            return None
        pending = new_commands()
    asleep[...] = 0
    return pending
