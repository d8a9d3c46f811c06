"""The forkserver's last act: the multiprocessing folder of an owner that was killed goes with it.

Only multiprocessing's forkserver imports this module: vecshm adds it to what the server preloads
(:func:`vecshm.parent.processes.start_methods.preload_in_forkserver`). The owner's folder (``/tmp/pymp-*``) holds
the server's socket. multiprocessing removes it when the owner exits, which SIGKILL skips. While
the owner's workers run, their guards remove it (:mod:`vecshm.worker.guard`). An owner killed after it
closed its vec envs has no worker left to do that. Its forkserver outlives it until it reads that
the owner is gone, then exits normally, and removes the folder here. Not under Ray: Ray kills an
actor's child processes with it (``RAY_kill_child_processes_on_worker_exit``), this server among
them, so an RLlib env runner stopped with ``ray.kill`` still leaves its folder.
"""

from __future__ import annotations

import atexit
import os
import select
import shutil

__all__: list[str] = []


OWNER_EXIT_WAIT = 1.0  # seconds for an owner whose exit is under way to finish it


def _remove_the_folder_of_a_dead_owner(owner: int, server: int) -> None:
    from multiprocessing import forkserver

    if os.getpid() != server or not _has_exited(owner):
        return  # a process forked from the server, or the owner lives on (the folder is its own)
    address = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_address", None)
    folder = os.path.dirname(address) if isinstance(address, str) else ""
    if os.path.basename(folder).startswith("pymp-"):
        shutil.rmtree(folder, ignore_errors=True)


def _has_exited(owner: int) -> bool:
    """Whether ``owner``, this server's parent, has exited, waiting ``OWNER_EXIT_WAIT`` at most.

    The server reads that its owner is gone when the owner's files close, which comes before the
    kernel hands the server to a new parent: a parent pid that did not change yet says nothing. An
    owner that stopped the server and lives on (``ForkServer._stop()``) never exits in the wait."""
    if os.getppid() != owner:
        return True
    try:
        process = os.pidfd_open(owner)
    except ProcessLookupError:
        return True
    except (AttributeError, OSError):  # no pidfd (Linux before 5.3): the parent pid alone
        return False
    try:
        return bool(select.select([process], [], [], OWNER_EXIT_WAIT)[0])  # readable once it exited
    finally:
        os.close(process)


atexit.register(_remove_the_folder_of_a_dead_owner, os.getppid(), os.getpid())
