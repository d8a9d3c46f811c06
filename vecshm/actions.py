"""Actions checked once, at the boundary, before anything reaches a worker."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from vecshm.layout import Leaf, assemble, flatten

__all__ = ["batch_actions", "checked_actions", "is_per_env"]


def is_per_env(space: spaces.Space, actions: Any, count: int) -> bool:
    """Whether Dict/Tuple ``actions`` come as one value per env (SB3 style) rather than as one batch.

    Per env: a list (or, for Dict spaces, a tuple) of ``count`` dicts/tuples. A tuple for a Tuple
    space is Gymnasium's batch form (one array per subspace), never a list of envs.
    """
    per_env_type = dict if isinstance(space, spaces.Dict) else tuple if isinstance(space, spaces.Tuple) else None
    if per_env_type is None or not isinstance(actions, (list, tuple)) or len(actions) != count:
        return False
    if per_env_type is tuple and isinstance(actions, tuple):
        return False
    return all(isinstance(a, per_env_type) for a in actions)


def batch_actions(space: spaces.Space, actions: Any, count: int) -> Any:
    """Dict/Tuple actions given as one value per env (as SB3's DummyVecEnv accepts) -> one batch."""
    if not is_per_env(space, actions, count):
        return actions
    columns = zip(*(flatten(space, a) for a in actions))
    return assemble(space, [np.stack([np.asarray(v) for v in column]) for column in columns])


def checked_actions(leaf: Leaf, value: Any, count: int, space: spaces.Space) -> np.ndarray:
    """One leaf of a batch of actions as an array, or a ``ValueError`` a user can act on."""
    array = np.asarray(value)
    expected = (count, *leaf.shape)
    where = "" if not leaf.path else f" at {leaf.name}"
    if array.shape != expected:
        raise ValueError(
            f"actions{where} have shape {array.shape}, expected {expected} "
            f"({count} envs x action shape {leaf.shape} of {space})"
        )
    if leaf.dtype.kind in "iub":
        if array.dtype.kind not in "iub":
            raise ValueError(
                f"actions{where} have dtype {array.dtype}, but {space} takes integers; "
                "pass an integer array (e.g. actions.astype(np.int64))"
            )
    elif leaf.dtype.kind == "f" and array.dtype.kind not in "fiub":
        raise ValueError(f"actions{where} have dtype {array.dtype}, but {space} takes {leaf.dtype} values")
    if array.dtype.kind == "f":
        bad = ~np.isfinite(array)
        if bad.any():
            envs = np.flatnonzero(bad.reshape(count, -1).any(axis=1)).tolist()
            raise ValueError(f"actions{where} for envs {envs} contain NaN or inf; nothing was sent to the workers")
    return array
