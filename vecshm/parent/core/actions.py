"""Actions checked once, at the boundary, before anything reaches a worker."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from vecshm.parent.handback.delivery import host_arrays
from vecshm.shared.buffers import Buffers, BufferSpec, action_dtypes, scalar_rows_allowed
from vecshm.shared.layout import Leaf, assemble, flatten

__all__ = ["ActionWriter", "batch_actions", "checked_actions", "is_per_env"]


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
        _check_finite(array, where)
    return array


def _check_finite(array: np.ndarray, where: str) -> None:
    bad = ~np.isfinite(array)
    if bad.any():
        envs = np.flatnonzero(bad.reshape(len(array), -1).any(axis=1)).tolist()
        raise ValueError(f"actions{where} for envs {envs} contain NaN or inf; nothing was sent to the workers")


class ActionWriter:
    """Checks a batch of actions once and writes it into the segment's action leaves.

    Rows keep the caller's dtype (see ``vecshm.shared.buffers.ACTION_DTYPES``): each leaf's bytes are
    written through the view of that dtype, and the per-env dtype codes are rewritten only when
    they change. Leaves without a fixed size come back as values, one list per env, to travel
    with the command.
    """

    def __init__(self, space: spaces.Space, spec: BufferSpec, buffers: Buffers) -> None:
        self.space = space
        self.spec = spec
        self.buffers = buffers
        self.structured = isinstance(space, (spaces.Dict, spaces.Tuple))
        # per fixed leaf, worked out once: dtype -> code, whether one scalar per env may stand for
        # a one-element row, and the views the codes index
        self.codes = [{dtype: code for code, dtype in enumerate(action_dtypes(leaf))} for leaf in spec.action_fixed]
        self.scalar_rows_ok = [scalar_rows_allowed(leaf) for leaf in spec.action_fixed]
        self.written: list[int | None] = [None] * len(spec.action_fixed)  # the code every env holds, if one
        # A whole batch of one array, as the last one was (shape, dtype, the code of the view it went
        # to): the next such batch needs only its values checked (floats) and copied (see ``write``).
        # (A code, not the view: nothing here may keep the segment mapped after close.)
        self._repeat: tuple[tuple[int, ...], np.dtype, int] | None = None

    def write(self, actions: Any, env_ids: np.ndarray | None = None) -> dict[int, list[Any]] | None:
        """Check ``actions`` (one row per env in ``env_ids``, default every env) and write their
        fixed leaves into the envs' rows; the dynamic leaves' values by env, to travel with the
        command, or None. Nothing is written when the check fails."""
        repeat = self._repeat
        if repeat is not None and env_ids is None and type(actions) is np.ndarray:
            shape, dtype, code = repeat
            if actions.shape == shape and actions.dtype == dtype:  # what the full checks passed last time
                if dtype.kind == "f":
                    _check_finite(actions, "")
                self.buffers.actions[0][code][...] = actions
                return None
        count = self.spec.num_envs if env_ids is None else len(env_ids)
        if not isinstance(actions, np.ndarray):
            actions = host_arrays(actions)  # torch tensors, on any device
        if not self.structured and _is_scalar(actions):
            raise TypeError(
                f"Unable to iterate over the following elements: {actions!r}. A vector env takes one action "
                f"per env ({count} here), e.g. an array of shape ({count}, ...), not a single action"
            )
        if self.structured:
            actions = batch_actions(self.space, actions, count)
            try:
                values = flatten(self.space, actions)
            except ValueError as exc:
                raise ValueError(f"actions do not match the action space {self.space}: {exc}") from None
        else:  # one leaf: what flatten would return, without its dispatch (a microsecond a step)
            values = [actions]
        if not self.spec.action_dynamic:
            self._write_fixed(values, count, env_ids)
            return None
        leaves = self.spec.action_leaves
        self._write_fixed([v for leaf, v in zip(leaves, values) if not leaf.dynamic], count, env_ids)
        dynamic = []
        for leaf, value in zip(leaves, values):
            if leaf.dynamic:
                if _is_scalar(value) or len(value) != count:
                    raise ValueError(f"actions at {leaf.name} must hold one value per env ({count}), got {value!r:.80}")
                dynamic.append(value)
        ids = range(self.spec.num_envs) if env_ids is None else env_ids.tolist()
        return {i: list(per_env) for i, per_env in zip(ids, zip(*dynamic))}

    def _write_fixed(self, values: list[Any], count: int, env_ids: np.ndarray | None) -> None:
        b = self.buffers
        rows = slice(None) if env_ids is None else env_ids
        for i, (leaf, value) in enumerate(zip(self.spec.action_fixed, values)):
            scalar_rows = self.scalar_rows_ok[i] and np.shape(value) == (count,)
            array = checked_actions(
                leaf, np.reshape(value, (count, *leaf.shape)) if scalar_rows else value, count, self.space
            )
            codes = self.codes[i]
            if array.dtype in codes:
                code = codes[array.dtype]
            else:  # a dtype without a view of its own: the space's dtype carries it
                array, code = array.astype(leaf.dtype), codes[leaf.dtype]
            if scalar_rows:
                array, code = array.reshape(count), code + len(codes)
            b.actions[i][code][rows] = array
            if env_ids is not None or self.written[i] != code:
                b.action_code_columns[i][rows] = code
                self.written[i] = code if env_ids is None else None
        # A whole batch of one array written as given (not reshaped from scalar rows, nor converted)
        # needs only its values checked next time (see ``write``).
        self._repeat = None
        if env_ids is None and len(values) == 1 and not self.structured and not self.spec.action_dynamic:
            value = values[0]
            if type(value) is np.ndarray and value.dtype == array.dtype and value.shape == array.shape:
                self._repeat = (value.shape, value.dtype, code)


def _is_scalar(value: Any) -> bool:
    """One value rather than a batch (a number, a string, a 0-d array): what a vector env cannot split."""
    if isinstance(value, np.ndarray):
        return value.ndim == 0
    return isinstance(value, (int, float, complex, bool, str, bytes, np.generic)) or not hasattr(value, "__len__")
