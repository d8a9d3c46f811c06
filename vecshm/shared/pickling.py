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

__all__ = ["Pickled", "PickledFactory", "can_pickle", "dumps", "factories_by_value"]


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


class Pickled:
    """A value cloudpickled where it is made and loaded only by the process that uses it.

    A Ray actor passes its envs' factories, and the arguments of SB3's calls on its envs, on to its
    vecshm workers so, and their results back: loading them would import their modules (PyTorch,
    for an SB3 script's envs or for ``env_is_wrapped(Monitor)``) in an actor that never uses them,
    while the worker that does imports them anyway.
    """

    def __init__(self, blob: bytes) -> None:
        self.blob = blob

    @classmethod
    def of(cls, value: Any) -> Pickled:
        return cls(cloudpickle.dumps(value))

    def load(self) -> Any:
        return cloudpickle.loads(self.blob)


class PickledFactory(Pickled):
    """An env factory that stays pickled until the process that builds the env calls it: ``blob``
    is :func:`factories_by_value` of one factory."""

    def __call__(self) -> Any:
        (factory,) = self.load()
        return factory()
