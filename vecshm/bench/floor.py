"""Floor figures for this machine: a memcpy of one frame batch, and a wake-up round-trip."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from typing import Any

import numpy as np

from vecshm.shared.affinity import usable_cores

__all__ = ["memcpy_seconds", "semaphore_round_trip"]


def memcpy_seconds(nbytes: int, repeats: int = 200) -> float:
    """Median time to copy ``nbytes`` between two preallocated buffers."""
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _echo(ping: mp.synchronize.Semaphore, pong: mp.synchronize.Semaphore, core: int | None, n: int) -> None:
    if core is not None:
        os.sched_setaffinity(0, [core])
    for _ in range(n):
        ping.acquire()
        pong.release()


def semaphore_round_trip(same_core: bool, n: int = 2000) -> float | None:
    """Median-free mean round-trip (s) of a semaphore ping-pong between two processes; None if impossible."""
    cores = usable_cores()
    if not same_core and len(cores) < 2:
        return None
    context: Any = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    ping, pong = context.Semaphore(0), context.Semaphore(0)
    mine, theirs = (cores[0], cores[0]) if same_core else (cores[0], cores[1])
    child = context.Process(target=_echo, args=(ping, pong, theirs, n), daemon=True)
    child.start()
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, [mine])
    try:
        ping.release()
        pong.acquire()  # warm-up round
        start = time.perf_counter()
        for _ in range(n - 1):
            ping.release()
            pong.acquire()
        elapsed = time.perf_counter() - start
    finally:
        os.sched_setaffinity(0, previous)
        child.join(10)
    return elapsed / (n - 1)
