"""A worker's guard: a small process that ends what the worker leaves behind when it or its owner dies.

Two endings escaped the worker's own defences (see :func:`vecshm.worker.main.exit_with_parent`):
- An env stuck in native code that holds the GIL keeps the worker's watch thread from running,
  so under forkserver (no parent-death signal: the worker is the forkserver's child) a worker
  outlived an owner killed with SIGKILL, for good.
- Processes an env started (a simulator, a server) went to init when their worker died, whether
  by the parent-death signal, a crash or a kill: nothing alive knew of them.

So each worker leads a process group of its own, which the processes its envs start join, and
forks a guard before it builds any env. What leaves the group (a simulator started in a session of
its own, ``start_new_session=True``, so that the terminal's Ctrl-C does not reach it; a daemon
that detaches, and goes to init at once) is found by a mark: the worker puts ``VECSHM_WORKER`` in
its environment, which every program its envs start inherits, and which no other process carries.

The guard waits, in a process of its own, for the owner or the worker to die, or for the worker
to say it is exiting. Then it kills the worker if the owner died, and ends the rest of the group
and what carries the mark: SIGTERM, then SIGKILL after ``GRACE_SECONDS``. multiprocessing's own
helpers (an env's resource tracker or forkserver) are left to end by themselves, after cleaning up
after it. If the owner died, the guard also removes the owner's multiprocessing folder
(``/tmp/pymp-*``, its forkserver's socket), which the owner's exit handler would have removed. A
worker that exits normally waits for its guard, so the guard is reaped; one that dies leaves it
to init.

Out of reach: what leaves the group and is started with an environment of its own making
(``env=``, without the mark), or forks without starting a program and leaves the group.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import sys
import time
from collections.abc import Sequence

import psutil

__all__ = [
    "Guard",
    "start_guard",
    "end_group",
    "terminate_then_kill",
    "still_running",
    "alive",
    "is_mp_helper",
    "worker_mark",
    "mark_of",
    "GUARD_NAME",
    "MARK_VARIABLE",
]

GRACE_SECONDS = 1.0  # SIGTERM, then this long, then SIGKILL
POLL_SECONDS = 0.2  # where the kernel gives no process descriptors to wait on
GUARD_NAME = "vecshm-guard"  # the guard's name in the process table (Linux)
MARK_VARIABLE = "VECSHM_WORKER"  # in the environment of what a worker's envs start (worker_mark)
PR_SET_NAME = 15
# Why the guard wakes: the byte the worker sends on its pipe, or a death.
CLEANED_UP = b"c"  # the worker was asked to close: its owner ends what the envs left
LEFT_TO_GUARD = b"g"  # the worker is exiting on its own: the guard ends what the envs left
OWNER_DIED = b"o"
WORKER_DIED = b"w"


class Guard:
    """The worker's handle on its guard: ``stop`` at a normal exit, so that the worker reaps it."""

    def __init__(self, pid: int, bell: int) -> None:
        self.pid, self.bell = pid, bell

    def stop(self, owner_cleans_up: bool) -> None:
        """Stop the guard and wait for it. Unless the owner asked this worker to close (and then
        ends what the envs left running itself), the guard first ends the rest of the group."""
        try:
            os.write(self.bell, CLEANED_UP if owner_cleans_up else LEFT_TO_GUARD)
            os.close(self.bell)
            os.waitpid(self.pid, 0)
        except OSError:  # reaped or gone already
            pass


def worker_mark(pool_mark: str, worker_pid: int) -> str:
    """The value of ``MARK_VARIABLE`` in what the worker ``worker_pid`` of a pool starts: the
    pool's random ``pool_mark`` and the pid, so that each worker's guard ends its own envs' alone
    (a restarted worker's envs keep theirs) and nothing from another program matches."""
    return f"{pool_mark}.{worker_pid}"


def mark_of(pid: int) -> str | None:
    """The ``MARK_VARIABLE`` that process ``pid`` started with (:func:`worker_mark`), if any.

    A process's own changes after it started do not show: the worker that set the mark does not
    carry it, what it starts does. Another user's processes cannot be read, and carry none."""
    prefix = f"{MARK_VARIABLE}=".encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as file:
            environ = file.read()
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):  # gone meanwhile
            return None
        try:  # no /proc (macOS)
            return psutil.Process(pid).environ().get(MARK_VARIABLE)
        except (psutil.Error, OSError):
            return None
    except OSError:
        return None
    if prefix not in environ:  # most processes: no need to split
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace")
    return None


def start_guard(owner_pid: int, owner_tempdir: str | None = None, mark: str | None = None) -> Guard | None:
    """Make this worker a process group's leader, put ``mark`` (:func:`worker_mark`) in its
    environment, and fork its guard; None where there is no ``fork`` (Windows). Call it while the
    process has one thread. ``owner_tempdir``: the owner's multiprocessing folder, removed if the
    owner dies (its own exit handler would have)."""
    if mark is not None:
        os.environ[MARK_VARIABLE] = mark
    if not hasattr(os, "fork") or not hasattr(os, "setpgid"):
        return None
    # Out of the terminal's foreground group, a write to it would stop the worker (SIGTTOU, under
    # `stty tostop`) and a read would stop it for good (SIGTTIN); ignored, the write goes through
    # and the read fails. What the envs start inherits both.
    for name in ("SIGTTOU", "SIGTTIN"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    try:
        os.setpgid(0, 0)
    except OSError:  # a session leader cannot: the guard still ends a worker its owner left
        pass
    worker = os.getpid()
    read_end, bell = os.pipe()
    pid = os.fork()
    if pid:
        os.close(read_end)
        return Guard(pid, bell)
    try:  # the guard: nothing here may return into the worker's code
        _guard(owner_pid, owner_tempdir, worker, read_end, mark)
    finally:
        os._exit(0)


def _guard(owner_pid: int, owner_tempdir: str | None, worker: int, stop: int, mark: str | None) -> None:
    os.setpgid(0, 0)  # out of the worker's group, which it ends
    _name_self()
    # the worker's sockets and sentinel pipe: its death must show at once
    os.closerange(3, stop)
    os.closerange(stop + 1, _max_fd())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ended = _wait(owner_pid, worker, stop)
    if ended == CLEANED_UP:
        return
    if ended == OWNER_DIED and os.getppid() == worker:  # still our parent: alive, maybe stuck holding its GIL
        try:
            os.kill(worker, signal.SIGKILL)
        except ProcessLookupError:
            pass
    end_group(worker, spare=worker, mark=mark)
    if ended == OWNER_DIED and owner_tempdir and os.path.basename(owner_tempdir).startswith("pymp-"):
        shutil.rmtree(owner_tempdir, ignore_errors=True)  # every guard of the owner may: the first wins


def _name_self() -> None:
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, GUARD_NAME.encode(), 0, 0, 0)
        except (OSError, AttributeError):
            pass


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (ValueError, OSError):
        return 4096


def _wait(owner_pid: int, worker: int, stop: int) -> bytes:
    """Wait until the owner or the worker has exited, or the worker stops the guard (a byte on
    ``stop``); which: ``OWNER_DIED``, ``WORKER_DIED``, or the byte the worker sent."""
    owner_fd = worker_fd = None
    if hasattr(os, "pidfd_open"):
        try:
            owner_fd, worker_fd = os.pidfd_open(owner_pid), os.pidfd_open(worker)
        except ProcessLookupError:
            return WORKER_DIED if psutil.pid_exists(owner_pid) else OWNER_DIED
        except OSError:  # no pidfd on this kernel: poll
            owner_fd = worker_fd = None
    if owner_fd is not None and worker_fd is not None:
        ready, _, _ = select.select([stop, owner_fd, worker_fd], [], [])
        if stop in ready:
            return os.read(stop, 1) or WORKER_DIED
        return OWNER_DIED if owner_fd in ready else WORKER_DIED
    try:
        owner = psutil.Process(owner_pid)
    except psutil.NoSuchProcess:
        return OWNER_DIED
    while os.getppid() == worker:
        if select.select([stop], [], [], POLL_SECONDS)[0]:
            return os.read(stop, 1) or WORKER_DIED
        if not alive(owner):
            return OWNER_DIED
    return WORKER_DIED


def end_group(group: int, spare: int, mark: str | None = None, grace: float = GRACE_SECONDS) -> None:
    """End every process of process group ``group``, or that carries ``mark``, but ``spare`` and
    multiprocessing's helpers: SIGTERM, then SIGKILL to those still running after ``grace`` seconds."""
    terminate_then_kill(_members(group, spare, mark), grace)
    for process in _members(group, spare, mark):  # any started meanwhile
        _signal(process, signal.SIGKILL)


def terminate_then_kill(processes: Sequence[psutil.Process], grace: float) -> None:
    """SIGTERM ``processes``, give them ``grace`` seconds, SIGKILL those left, and wait as long
    again. psutil checks each one is still the process it was (its start time), so a recycled pid
    is never hit."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for process in processes:
            _signal(process, signum)
        processes = still_running(processes, grace)


def still_running(processes: Sequence[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Those of ``processes`` still running after up to ``timeout`` seconds. A zombie counts as
    gone: these are not our children, and where nobody reaps orphans (a container whose first
    process is the training script) ``psutil.wait_procs`` would wait out the whole timeout."""
    deadline = time.monotonic() + timeout
    while True:
        running = [process for process in processes if alive(process)]
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.01)  # not our children: no exit to wait on, only the process table to read


def _members(group: int, spare: int, mark: str | None) -> list[psutil.Process]:
    """The running processes of ``group``, or that carry ``mark``, but ``spare``, this process
    and multiprocessing's helpers."""
    found = []
    for pid in psutil.pids():
        try:
            if pid in (spare, os.getpid()) or (os.getpgid(pid) != group and (mark is None or mark_of(pid) != mark)):
                continue
            process = psutil.Process(pid)
        except (OSError, psutil.Error):  # gone meanwhile
            continue
        if alive(process) and not is_mp_helper(process):
            found.append(process)
    return found


def alive(process: psutil.Process) -> bool:
    """Running and not a zombie (a recycled pid is not ``process``)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal(process: psutil.Process, signum: int) -> None:
    try:
        process.send_signal(signum)  # psutil checks the pid still names the same process
    except psutil.Error:
        pass


def is_mp_helper(process: psutil.Process) -> bool:
    """multiprocessing's resource tracker or forkserver (``python -c "from multiprocessing.X import main..."``)."""
    try:
        command = " ".join(process.cmdline())
    except psutil.Error:
        return False
    return "multiprocessing.resource_tracker" in command or "multiprocessing.forkserver" in command
