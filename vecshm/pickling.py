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

__all__ = ["dumps"]


def dumps(value: Any) -> bytes:
    """``value`` pickled, or cloudpickled where pickle refuses it; raises if neither can."""
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return cloudpickle.dumps(value)
