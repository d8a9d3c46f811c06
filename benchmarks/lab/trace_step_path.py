"""Which of vecshm's files one step passes through: the check that the step path stays short.

Traces steps of 8 ``vecshm/Frames-v0`` envs (default options) with ``sys.setprofile`` in the
parent, on both facades, sync and async, and prints for each half of a step the vecshm files it
entered, in order, and how many calls it made into vecshm (the files any of ``STEPS`` steps
entered: a wait that finds its results, spins or sleeps crosses different ones; the fewest and the
most calls one made)::

    python benchmarks/lab/trace_step_path.py

The halves are: ``ShmVecEnv.step_async`` / ``ShmVectorEnv.step_async`` / ``send`` up to the last
doorbell woken (the actions are in the segment by then), and ``step_wait`` / ``recv`` up to the
arrays returned. Only the parent is traced: the workers' side of a step is one loop in one file.
A step is traced after a few untraced ones, so that caches (the checked env ids of async batches,
the spinner's history) are as in a running loop.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import vecshm
import vecshm.envs  # noqa: F401  (registers the vecshm/... ids)
from vecshm import ShmVecEnv, ShmVectorEnv

N_ENVS = 8
ENV_ID = "vecshm/Frames-v0"
ROOT = os.path.dirname(os.path.abspath(vecshm.__file__))
STEPS = 20  # traced steps per case: the files any of them crossed are listed
BELL_FUNCTIONS = ("wake",)  # a doorbell's ``wake``: the last call of the sending half


def _trace(call: Callable[[], Any], doorbell_file: str | None) -> tuple[list[str], int]:
    """The vecshm files ``call`` entered (in first-entry order), and its calls into vecshm.

    With ``doorbell_file``, what follows the last doorbell woken in that file is left out (the
    sending half ends there)."""
    events: list[tuple[str, str]] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            path = frame.f_code.co_filename
            if path.startswith(ROOT):
                events.append((os.path.relpath(path, os.path.dirname(ROOT)), frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    if doorbell_file is not None:
        woken = [k for k, (path, name) in enumerate(events) if path == doorbell_file and name in BELL_FUNCTIONS]
        if woken:
            events = events[: woken[-1] + 1]
    return list(dict.fromkeys(path for path, _ in events)), len(events)


def _bell_file() -> str:
    return os.path.relpath(sys.modules["vecshm.shared.sync"].__file__ or "", os.path.dirname(ROOT))


def _union(traces: list[tuple[list[str], int]]) -> tuple[list[str], int, int]:
    """The files any of ``traces`` entered (in first-entry order), and the fewest and the most
    calls one made (the fewest: a wait that found its results at once; the most: one that slept)."""
    files = list(dict.fromkeys(path for paths, _ in traces for path in paths))
    return files, min(calls for _, calls in traces), max(calls for _, calls in traces)


def trace_sync(venv: Any, actions: np.ndarray) -> dict[str, tuple[list[str], int, int]]:
    """``step_async`` up to the doorbells, then ``step_wait``, after a few untraced steps; over
    ``STEPS`` steps (a wait may find its results, spin, or sleep: each crosses other files)."""
    for _ in range(5):
        venv.step(actions)
    sends, waits = [], []
    for _ in range(STEPS):
        sends.append(_trace(lambda: venv.step_async(actions), _bell_file()))
        waits.append(_trace(venv.step_wait, None))
    return {"step_async": _union(sends), "step_wait": _union(waits)}


def trace_async(venv: Any, actions: np.ndarray) -> dict[str, tuple[list[str], int, int]]:
    """Async batches of half the envs: ``send`` of one batch, then ``recv`` of the next."""
    venv.async_reset()
    half = len(actions) // 2
    ids = venv.recv()[-1]
    for _ in range(6):
        venv.send(actions[:half], ids)
        ids = venv.recv()[-1]
    sends, recvs = [], []
    for _ in range(STEPS):
        sends.append(_trace(lambda: venv.send(actions[:half], ids), _bell_file()))  # noqa: B023
        got: dict[str, Any] = {}
        recvs.append(_trace(lambda: got.update(ids=venv.recv()[-1]), None))  # noqa: B023
        ids = got["ids"]
    return {"send": _union(sends), "recv": _union(recvs)}


def main() -> None:
    actions = np.zeros(N_ENVS, dtype=np.int64)
    fns = [lambda: __import__("gymnasium").make(ENV_ID) for _ in range(N_ENVS)]
    cases: list[tuple[str, Callable[[], Any], Callable[[Any], dict]]] = [
        ("ShmVecEnv sync", lambda: ShmVecEnv(fns), lambda v: (v.reset(), trace_sync(v, actions))[1]),
        ("ShmVectorEnv sync", lambda: ShmVectorEnv(fns), lambda v: (v.reset(seed=0), trace_sync(v, actions))[1]),
        ("ShmVecEnv async", lambda: ShmVecEnv(fns, batch_size=N_ENVS // 2), lambda v: trace_async(v, actions)),
        ("ShmVectorEnv async", lambda: ShmVectorEnv(fns, batch_size=N_ENVS // 2), lambda v: trace_async(v, actions)),
    ]
    for name, make, run in cases:
        venv = make()
        try:
            traced = run(venv)
        finally:
            venv.close()
        for half, (files, fewest, most) in traced.items():
            print(f"{name:<20} {half:<11} {len(files)} files, {fewest:3d}-{most:3d} calls: {' > '.join(files)}")


if __name__ == "__main__":
    main()
