"""The worker process: builds its slice of envs, maps the segment, and serves commands until told to stop.

The process's life lives here (start-up handshake, watching the parent, waiting for commands);
what one command does to the envs lives in :mod:`vecshm.runner`. Observations never cross a pipe;
infos are pickled into a per-env arena slot only when non-empty, and follow on the control socket
only when they do not fit.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import reduction
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import gymnasium as gym
import psutil

from vecshm.affinity import apply_worker_settings
from vecshm.buffers import NO_ENV, Buffers, BufferSpec
from vecshm.errors import RemoteError
from vecshm.guard import alive, start_guard
from vecshm.memory import NamedSegment, Segment
from vecshm.pickling import dumps
from vecshm.protocol import AutoReset, Command, Phase
from vecshm.registry import adopt_registry
from vecshm.ring import UnitPipe
from vecshm.runner import EnvRunner
from vecshm.sync import Doorbell, SocketDoorbell, Spinner

__all__ = ["WorkerSpec", "worker_main"]

PARENT_CHECK_SECONDS = 0.5  # how often a worker checks that its parent is still alive
PR_SET_PDEATHSIG = 1


@dataclass
class WorkerSpec:
    """What a worker process needs to start; pickled once at start-up (env factories via cloudpickle)."""

    index: int
    env_start: int
    env_fns: bytes | list[Callable[[], gym.Env]]  # cloudpickled, or the factories themselves under fork
    conn: Connection
    doorbell: Doorbell | SocketDoorbell
    done_bell: Doorbell | SocketDoorbell
    autoreset: AutoReset
    reward_codes: bool  # record each reward's dtype (see vecshm.buffers.REWARD_DTYPES)
    spin_seconds: float
    settings: dict[str, Any]
    parent_pid: int
    registry: bytes = b""  # the parent's gymnasium registry entries (see vecshm.registry)
    claims: UnitPipe | None = None  # free units of the async ring (see vecshm.ring)
    owner_tempdir: str | None = None  # the owner's multiprocessing folder (its forkserver's socket)


def worker_main(spec: WorkerSpec) -> None:
    """Entry point of a worker process."""
    # Ctrl-C is the parent's to handle (it may reach a worker before it leaves the group below).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    guard = start_guard(spec.parent_pid, spec.owner_tempdir)  # first: while this process has one thread
    closed = False
    try:
        closed = _run(spec)
    finally:
        if guard is not None:
            guard.stop(owner_cleans_up=closed)


def _run(spec: WorkerSpec) -> bool:
    """Build the envs, attach the segment, serve commands; whether the vec env asked us to close
    (it then ends what the envs left running itself), rather than failed or went away."""
    parent = os.getppid()
    exit_with_parent(spec.parent_pid)
    conn = spec.conn
    apply_worker_settings(spec.settings)
    envs = _build_envs(spec)
    if envs is None:
        return False
    # vecshm.pickling: a Space subclass defined in the user's main script must come back too
    try:
        conn.send(("ready", dumps([(env.observation_space, env.action_space) for env in envs])))
    except (BrokenPipeError, ConnectionResetError):  # the vec env gave up on us while the envs were built
        _close_envs(envs)
        return False
    message = _recv_or_orphaned(conn, parent)
    if message is None or message[0] != "attach":
        _close_envs(envs)
        return message is not None and message[0] == "close"
    buffer_spec: BufferSpec = message[1]
    name: str | None = message[2]
    size = buffer_spec.plan().size
    segment = Segment.attach(reduction.recv_handle(conn), size) if name is None else NamedSegment.attach(name, size)
    buffers = Buffers(buffer_spec, segment)
    buffers.progress[spec.index] = NO_ENV  # the segment starts zeroed: env 0 is not running here
    # Commands start after "attached" reaches the parent; a restarted worker must not replay the
    # command its predecessor died in, so the first command to serve is the next one.
    seen = int(buffers.cmd_seq[spec.index])
    conn.send(("attached",))
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


def _build_envs(spec: WorkerSpec) -> list[gym.Env] | None:
    fns = cloudpickle.loads(spec.env_fns) if isinstance(spec.env_fns, bytes) else spec.env_fns
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
            try:
                spec.conn.send(("error", RemoteError(exc, index, Phase.CONSTRUCTION)))
            except (BrokenPipeError, ConnectionResetError):  # the vec env is gone already
                pass
            _close_envs(envs)
            return None
    return envs


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


def _recv_or_orphaned(conn: Connection, parent: int) -> Any:
    """Receive from the parent, or None if the parent died meanwhile."""
    while not conn.poll(PARENT_CHECK_SECONDS):
        if os.getppid() != parent:
            return None
    try:
        return conn.recv()
    except EOFError:
        return None


def _serve(spec: WorkerSpec, envs: list[gym.Env], buffers: Buffers, parent: int, seen: int) -> bool:
    """Run commands until CLOSE (True) or the parent is gone (False)."""
    runner = EnvRunner(spec, envs, buffers)
    spinner = Spinner(spec.spin_seconds)
    me = spec.index
    cmd_seq, busy = buffers.cmd_seq, buffers.busy
    busy_since = None
    while True:
        idle_since = time.perf_counter()
        if busy_since is not None:  # the command just run, for the parent's core balance (vecshm.balance)
            busy[me] += idle_since - busy_since
        if cmd_seq[me] == seen:
            spinner.spin(lambda seen=seen: cmd_seq[me] != seen)
        while cmd_seq[me] == seen:
            if not spec.doorbell.wait(PARENT_CHECK_SECONDS) and os.getppid() != parent:
                return False
        busy_since = time.perf_counter()
        spinner.record(busy_since - idle_since)
        seen = int(cmd_seq[me])
        command = Command(int(buffers.cmd[me]))
        if command is Command.CLOSE:
            return True
        runner.run(command, seen)
