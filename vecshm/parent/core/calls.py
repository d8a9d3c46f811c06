"""Rare calls on some envs (``get_attr``, ``env_method``, ``render``, ...): pickled over the sockets.

They never touch the step path: the command's trip (:class:`~vecshm.parent.core.commands.Commands`)
starts a ``CALL`` command for the lanes hosting the envs with the arguments on each lane's
socket, and each lane answers on it, which this module reads.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from vecshm.parent.core.engine import Engine
from vecshm.shared.errors import VecShmError, remote_errors
from vecshm.shared.pickling import Pickled
from vecshm.shared.protocol import CallOp, Message, Phase

__all__ = ["call", "call_pickled"]


def call(engine: Engine, op: CallOp, env_ids: Sequence[int], *args: Any) -> list[Any]:
    """Run a rare operation on some envs of ``engine``; each env's result."""
    return [pickle.loads(blob) for blob in call_pickled(engine, op, env_ids, args)]


def call_pickled(engine: Engine, op: CallOp, env_ids: Sequence[int], args: tuple | Pickled) -> list[bytes]:
    """:func:`call` for a process that only passes arguments and results on (a Ray actor): the
    arguments may come still pickled (:class:`~vecshm.shared.pickling.Pickled`, loaded by the lanes),
    and each env's result is returned as its lane pickled it."""
    engine.check_usable()
    n = engine.num_envs
    ids = [int(i) for i in env_ids]
    for i in ids:
        if not -n <= i < n:
            raise IndexError(f"env index {i} is out of range for {n} envs")
    ids = [i % n for i in ids]  # negative indices count from the end, as in a list
    by_lane: dict[int, list[int]] = {}
    for i in ids:
        by_lane.setdefault(int(engine.plan.env_lane[i]), []).append(i)
    lanes = np.array(sorted(by_lane), dtype=np.int64)
    if len(lanes) == 0:
        return []
    during = Phase.of_call(op)
    engine.commands.call(lanes, {lane: (op, by_lane[lane], args) for lane in by_lane}, during)
    deadline = None if engine.timeout is None else time.monotonic() + engine.timeout
    results: dict[int, bytes] = {}
    records = []
    try:
        for lane in lanes.tolist():
            kind, payload = engine.pool.read_message(lane, deadline, during)
            if kind == Message.ERROR:
                records += payload
            else:
                results.update(zip(by_lane[lane], payload))  # pickled one by one (pickling.dumps)
    except VecShmError as failure:
        engine.fail(failure)
        raise
    if records:
        raise remote_errors(records)
    return [results[i] for i in ids]
