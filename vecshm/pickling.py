"""How a worker pickles what it sends the parent beside the segment.

Plain pickle first (fast, and classes travel by name). A class defined in the user's main script
cannot: under forkserver or spawn it reaches the worker by value (the env factories are
cloudpickled), and the worker's ``__main__`` is the script imported again, whose classes are other
objects. Such values go cloudpickled, by value, and cloudpickle's class tracking hands the parent
back its own classes. Either way the parent loads them with ``pickle.loads``.
"""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle

__all__ = ["PickledFactory", "can_pickle", "dumps", "factories_by_value"]


def dumps(value: Any) -> bytes:
    """``value`` pickled, or cloudpickled where pickle refuses it; raises if neither can."""
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return cloudpickle.dumps(value)


def can_pickle(value: Any) -> bool:
    """Whether cloudpickle can pickle ``value`` (a factory that holds a lock or an open file cannot)."""
    try:
        cloudpickle.dumps(value)
    except Exception:
        return False
    return True


def factories_by_value(env_fns: list[Any], start: int, stop: int, how: str, can_fork: bool = True) -> bytes:
    """``env_fns[start:stop]`` cloudpickled, for a process that does not inherit them (``how`` says
    which: "a forkserver worker process", "Ray actor 1"; ``can_fork``: whether forking it instead
    is a way out).

    A factory that cannot be pickled is named in the error, which keeps pickle's own type: the
    bare ``cannot pickle '_thread.lock' object`` says neither which env nor what to do.
    """
    try:
        return cloudpickle.dumps(env_fns[start:stop])
    except Exception as error:
        culprit = next((i for i in range(start, stop) if not can_pickle(env_fns[i])), start)
        message = (
            f"env_fns[{culprit}] cannot be sent to {how}: {type(error).__name__}: {error}. A factory travels "
            "there by value (cloudpickle), so it must not hold a lock, an open file or socket, or a live env: "
            "create those inside the factory"
        )
        if can_fork:
            message += ", or fork the workers (start_method='fork', context='fork'): they inherit the factories"
        try:
            named = type(error)(message)
        except Exception:
            raise error from None
        raise named from error


class PickledFactory:
    """An env factory that stays pickled until the process that builds the env calls it.

    A Ray actor passes its envs' factories on to its vecshm workers this way, without loading them:
    loading imports the factory's modules (PyTorch, for envs defined beside an SB3 script), which
    the actor never uses and the worker that builds the env imports anyway. ``blob`` is
    :func:`factories_by_value` of one factory.
    """

    def __init__(self, blob: bytes) -> None:
        self.blob = blob

    def __call__(self) -> Any:
        (factory,) = cloudpickle.loads(self.blob)
        return factory()
