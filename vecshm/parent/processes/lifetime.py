"""The worker processes as OS processes: how they are described in errors, started without
losing one to a Ctrl-C, and ended (with whatever the envs started) however they are left.

Every vec env's pool uses these; nothing here knows about commands or the segment.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from multiprocessing import process as mp_process
from multiprocessing import util as mp_util
from typing import Any

import psutil

from vecshm.shared.protocol import Phase
from vecshm.worker.guard import GUARD_NAME, is_mp_helper, mark_of, worker_mark

__all__ = [
    "WORKER_PROCESSES",
    "ctrl_c_after_the_starts",
    "describe_envs",
    "describe_exit",
    "describe_process",
    "descendants_or_marked",
    "end_processes",
    "is_guard",
    "own_temp_dir",
    "reap",
    "spawned_by_envs",
    "start_up_hint",
]

WORKER_PROCESSES: weakref.WeakSet[Any] = weakref.WeakSet()  # the Process of every worker started here


def _disown_workers() -> None:
    """In a process made by ``os.fork()``: forget the workers, which are not its children.

    multiprocessing lists them as children of the process that forked, and a copy made by
    ``os.fork()`` inherits that list: at its exit, multiprocessing would terminate them as its
    daemonic children, under the vec env of the process they belong to. (Its own children clear
    the list themselves.)
    """
    mp_process._children.difference_update(WORKER_PROCESSES)  # type: ignore[attr-defined]  # private, no stub


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disown_workers)


def describe_envs(envs: Sequence[int]) -> str:
    """``envs 2-3`` for a contiguous run of envs, ``env 2`` for one."""
    return f"envs {envs[0]}-{envs[-1]}" if len(envs) > 1 else f"env {envs[0]}"


def describe_process(p: int, envs: Sequence[int]) -> str:
    """``worker 1 (envs 2-3)``: worker process ``p`` and the envs it hosts, for error messages (users
    know the processes as workers: SubprocVecEnv's word, and ``processes``' entries)."""
    return f"worker {p} ({describe_envs(envs)})"


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "is not responding"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name} (exit code {exitcode})"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


@contextlib.contextmanager
def ctrl_c_after_the_starts() -> Iterator[None]:
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


def own_temp_dir() -> str | None:
    """multiprocessing's folder of this process (``/tmp/pymp-*``, where the forkserver's socket
    lives), if this process made it: multiprocessing removes it at our exit, which SIGKILL skips,
    and the workers' guards then remove it (see vecshm.worker.guard). A folder inherited from a parent
    (a fork copies multiprocessing's settings) is the parent's, and is left alone."""
    tempdir = mp_util.get_temp_dir()
    ours = any(
        getattr(f, "_callback", None) is getattr(mp_util, "_remove_temp_dir", None)
        and getattr(f, "_pid", None) == os.getpid()
        and tempdir in (getattr(f, "_args", None) or ())
        for f in list(getattr(mp_util, "_finalizer_registry", {}).values())
    )
    return tempdir if ours else None


def is_guard(process: psutil.Process) -> bool:
    """A worker's guard (see :mod:`vecshm.worker.guard`): it ends by itself with its worker."""
    try:
        return process.name() == GUARD_NAME
    except psutil.Error:
        return False


def descendants_or_marked(pids: Sequence[int], marks: set[str]) -> list[psutil.Process]:
    """Every descendant of ``pids``, and every other process that carries one of ``marks``
    (:func:`vecshm.worker.guard.mark_of`), from one pass over the process table
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


def start_up_hint(method: str, exitcode: int | None, during: Phase) -> str:
    """Why a worker started with ``method`` that died before it reported (``exitcode`` 1, during
    ``during``) may have died: the usual cause is a missing main guard."""
    if during is not Phase.CONSTRUCTION or exitcode != 1 or method == "fork":
        return ""
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main is not None and not os.path.isfile(main):  # python - < train.py: nothing to import
        return (
            f"\n\nWith start_method={method!r}, each worker first imports the main script, and this one "
            f'({main}) is no file: it was fed on standard input. Run it from a file, or use start_method="fork".'
        )
    script = f" ({main})" if main else ""
    return (
        f"\n\nWith start_method={method!r}, each worker first re-imports the main script{script}. A script "
        "that creates the vec env at module level makes every worker try to start workers of its own, and "
        "they exit (the worker's stderr shows multiprocessing's 'bootstrapping phase' RuntimeError). Put the "
        'code that creates the vec env under `if __name__ == "__main__":`, or use start_method="fork".'
    )


def spawned_by_envs(processes: Sequence[Any], mark: str) -> list[psutil.Process]:
    """The processes the envs of ``processes`` (worker processes, None where not started) started (a
    simulator, a server), found before the workers exit: once a worker is gone they belong to init,
    and nothing would end them. Those are the workers' descendants, and what carries a worker's mark
    (started in a session of its own by a launcher that exited: init's already; see
    vecshm.worker.guard). multiprocessing's own helpers (a worker's resource tracker or forkserver)
    are left out: they end by themselves when their worker does, after cleaning up after it."""
    workers = [process.pid for process in processes if process is not None and process.exitcode is None]
    if not workers:
        return []
    marks = {worker_mark(mark, pid) for pid in workers}
    return [p for p in descendants_or_marked(workers, marks) if not (is_mp_helper(p) or is_guard(p))]


def reap(processes: Sequence[Any], stuck: set[int], grace: float) -> None:
    """Join ``processes`` (None where not started) within ``grace`` seconds, those numbered in
    ``stuck`` terminated at once; terminate, then kill, whatever is still running."""
    started = [(p, process) for p, process in enumerate(processes) if process is not None]
    for p, process in started:
        if p in stuck:
            process.terminate()
    end_processes([process for _, process in started], grace)
    for _, process in started:
        process.close()
