"""Ray actors as resources: counting the nodes, finding calls still unanswered, and ending actors
so that nothing of theirs outlives the vec env (their processes, their forkservers' folders)."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

import psutil
import ray

__all__ = ["CLOSE_TIMEOUT", "alive_nodes", "unanswered", "end_actors", "close_actors"]

CLOSE_TIMEOUT = 10.0  # seconds for an actor to close its vec env before it is killed


def unanswered(calls: dict[int, Any], wait: float) -> list[int]:
    """The actors (keys of ``calls``, actor -> its call's ref) whose call is still unanswered after
    up to ``wait`` seconds."""
    if not calls:
        return []
    answered = ray.wait(list(calls.values()), num_returns=len(calls), timeout=wait)[0]
    return [k for k, ref in calls.items() if ref not in answered]


def alive_nodes() -> int:
    return max(1, sum(1 for node in ray.nodes() if node.get("Alive")))


def end_actors(actors: Sequence[Any], hosts: Sequence[Any], busy: Sequence[int] = ()) -> None:
    """End every actor of ``actors`` (None: never started); on this host (``hosts``: what each
    reported, its pid and host among it), return once their processes are gone.

    Idle actors exit through Ray's graceful path (``__ray_terminate__``), which runs their
    ``atexit`` handlers: that is where multiprocessing removes the ``/tmp/pymp-*`` folder holding
    the socket of the actor's forkserver, which ``ray.kill`` would leave behind, one per actor
    and vec env. ``busy`` actors (still in a call: a hung env, an actor never placed) and any
    actor that has not exited within ``CLOSE_TIMEOUT`` are killed.
    """
    live = {k: actor for k, actor in enumerate(actors) if actor is not None}
    ending = {k: actor.__ray_terminate__.remote() for k, actor in live.items() if k not in busy}
    still_there = unanswered(ending, wait=CLOSE_TIMEOUT)
    for k, actor in live.items():
        if k not in ending or k in still_there:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass
    here = socket.gethostname()
    local = [h["pid"] for h in hosts if isinstance(h, dict) and h["host"] == here]
    processes = []
    for pid in local:
        try:
            processes.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _, stuck = psutil.wait_procs(processes, timeout=CLOSE_TIMEOUT)
    for process in stuck:  # an exit handler that hangs
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(stuck, timeout=CLOSE_TIMEOUT)


def close_actors(actors: list[Any], hosts: Sequence[Any], busy: list[int], ask: bool) -> None:
    """End ``actors`` (on ``hosts``): those not ``busy`` in a call are first asked to close their vec
    env (``ask``; not after a failure), and given ``CLOSE_TIMEOUT`` seconds to; then each is ended."""
    if not ray.is_initialized():  # ray.shutdown() already ended the actors
        return
    closing = {k: a.close.remote() for k, a in enumerate(actors) if a is not None and k not in busy} if ask else {}
    try:
        busy = busy + unanswered(closing, wait=CLOSE_TIMEOUT)  # their close did not return
    except Exception:
        pass
    end_actors(actors, hosts, busy)
