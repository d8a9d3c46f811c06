"""Spaces as flat lists of array leaves.

A space is described once, as an ordered list of :class:`Leaf` (path, shape, dtype). Parent and
workers derive the same list from the same space, so both sides agree on the shared-memory layout
by construction. ``flatten`` turns one value of a space into its leaves, ``assemble`` builds a
value back from leaves; Dict and Tuple recurse, everything else is a leaf.

Fixed-size spaces (Box, Discrete, MultiDiscrete, MultiBinary) are array leaves that live in shared
memory. Every other space (Text, Sequence, Graph, OneOf, a user's own ``Space`` subclass) has no
fixed size, so it is a *dynamic* leaf: it keeps its space and its values travel pickled, per env,
while the fixed leaves around it stay in shared memory. So vecshm takes every space that
``AsyncVectorEnv(shared_memory=False)`` takes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import singledispatch
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = [
    "Leaf",
    "RowItems",
    "leaves",
    "flatten",
    "assemble",
    "merge_leaves",
    "tree_map",
    "check_leaf_value",
    "write_leaf",
]


@dataclass(frozen=True)
class Leaf:
    """One array of a space: where it sits in the nesting, and what one env's value looks like."""

    path: tuple[str | int, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    space: spaces.Space | None = None  # set only for a dynamic leaf, whose values are pickled

    @property
    def dynamic(self) -> bool:
        return self.space is not None

    @property
    def name(self) -> str:
        return "/".join(str(p) for p in self.path) or "<root>"

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def one_array(all_leaves: Sequence[Leaf]) -> bool:
    """Whether a space of these leaves is one fixed array (not nested in a Dict or Tuple): its
    values are written, read and kept as that array alone."""
    return len(all_leaves) == 1 and not all_leaves[0].dynamic and all_leaves[0].path == ()


@singledispatch
def leaves(space: spaces.Space, path: tuple[str | int, ...] = ()) -> list[Leaf]:
    """Flat leaves of ``space``, in a fixed order (Dict in key order, Tuple by index).

    A space without a fixed size (anything but the four array spaces, Dict and Tuple) is one
    dynamic leaf.
    """
    if not isinstance(space, spaces.Space):
        raise TypeError(f"expected a gymnasium Space at {'/'.join(map(str, path)) or 'the root'}, got {space!r}")
    return [Leaf(path, (), np.dtype(object), space)]


@leaves.register(spaces.Box)
@leaves.register(spaces.MultiDiscrete)
@leaves.register(spaces.MultiBinary)
def _array_leaves(space: spaces.Space, path: tuple[str | int, ...] = ()) -> list[Leaf]:
    return [Leaf(path, tuple(space.shape or ()), np.dtype(space.dtype))]


@leaves.register(spaces.Discrete)
def _discrete_leaves(space: spaces.Discrete, path: tuple[str | int, ...] = ()) -> list[Leaf]:
    return [Leaf(path, (), np.dtype(space.dtype))]


@leaves.register(spaces.Dict)
def _dict_leaves(space: spaces.Dict, path: tuple[str | int, ...] = ()) -> list[Leaf]:
    return [leaf for key, sub in space.spaces.items() for leaf in leaves(sub, (*path, key))]


@leaves.register(spaces.Tuple)
def _tuple_leaves(space: spaces.Tuple, path: tuple[str | int, ...] = ()) -> list[Leaf]:
    return [leaf for i, sub in enumerate(space.spaces) for leaf in leaves(sub, (*path, i))]


@singledispatch
def flatten(space: spaces.Space, value: Any) -> list[Any]:
    """The leaf values of one ``value`` of ``space``, in :func:`leaves` order."""
    return [value]


@flatten.register(spaces.Dict)
def _flatten_dict(space: spaces.Dict, value: Any) -> list[Any]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a dict for a Dict space, got {type(value).__name__}")
    missing = [key for key in space.spaces if key not in value]
    if missing:
        raise ValueError(f"Dict value is missing keys {missing}")
    return [v for key, sub in space.spaces.items() for v in flatten(sub, value[key])]


@flatten.register(spaces.Tuple)
def _flatten_tuple(space: spaces.Tuple, value: Any) -> list[Any]:
    if not isinstance(value, (tuple, list)) or len(value) != len(space.spaces):
        raise ValueError(f"expected a tuple of {len(space.spaces)} for a Tuple space, got {value!r:.80}")
    return [v for sub, item in zip(space.spaces, value) for v in flatten(sub, item)]


def assemble(space: spaces.Space, values: Sequence[Any] | Iterator[Any]) -> Any:
    """Rebuild the nested value of ``space`` from its leaf values (the inverse of ``flatten``)."""
    return _assemble(space, iter(values))


@singledispatch
def _assemble(space: spaces.Space, values: Iterator[Any]) -> Any:
    return next(values)


@_assemble.register(spaces.Dict)
def _assemble_dict(space: spaces.Dict, values: Iterator[Any]) -> dict[str, Any]:
    return {key: _assemble(sub, values) for key, sub in space.spaces.items()}


@_assemble.register(spaces.Tuple)
def _assemble_tuple(space: spaces.Tuple, values: Iterator[Any]) -> tuple[Any, ...]:
    return tuple(_assemble(sub, values) for sub in space.spaces)


def merge_leaves(all_leaves: Sequence[Leaf], fixed: Sequence[Any], dynamic: Sequence[Any]) -> list[Any]:
    """Leaf values in ``all_leaves`` order, from the fixed leaves' values and the dynamic leaves' values."""
    fixed_iter, dynamic_iter = iter(fixed), iter(dynamic)
    return [next(dynamic_iter) if leaf.dynamic else next(fixed_iter) for leaf in all_leaves]


def tree_map(fn: Callable[[Any], Any], value: Any) -> Any:
    """Apply ``fn`` to every array leaf of a nested dict/tuple value, keeping the structure."""
    if isinstance(value, dict):
        return {key: tree_map(fn, item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(tree_map(fn, item) for item in value)
    return fn(value)


def check_leaf_value(leaf: Leaf, value: Any) -> np.ndarray:
    """``value`` as an array that fits ``leaf``; ``ValueError`` saying why when it does not.

    Cheap on purpose (shape and dtype kind, no bounds): it runs for every env on every step.
    """
    array = np.asarray(value)
    if array.shape != leaf.shape:
        raise ValueError(f"value at {leaf.name} has shape {array.shape}, but the space declares {leaf.shape}")
    if array.dtype != leaf.dtype and not np.can_cast(array.dtype, leaf.dtype, casting="same_kind"):
        raise ValueError(f"value at {leaf.name} has dtype {array.dtype}, which does not fit the declared {leaf.dtype}")
    return array


class RowItems(list):
    """A leaf's value given row by row: one array per index of the leaf's first axis (the agents
    of a PettingZoo env's copy, :mod:`vecshm.pettingzoo.rows`). The worker writes each item into the
    segment where it belongs, so the rows are never stacked into an array of their own first."""


def write_leaf(leaf: Leaf, array: np.ndarray, row: int, value: Any) -> None:
    """Write ``value`` (an array, or :class:`RowItems`) of ``leaf`` into row ``row`` of ``array``
    (the leaf's array in the segment); ``ValueError`` saying why when it does not fit."""
    if type(value) is not RowItems:
        array[row] = check_leaf_value(leaf, value)
        return
    destination = array[row]  # (a view: the leaf has a first axis for the rows)
    if len(value) != leaf.shape[0]:
        raise ValueError(f"value at {leaf.name} has {len(value)} rows, but the space declares {leaf.shape[0]}")
    item_shape = leaf.shape[1:]
    for j, item in enumerate(value):
        array = np.asarray(item)
        if array.shape != item_shape or (
            array.dtype != leaf.dtype and not np.can_cast(array.dtype, leaf.dtype, casting="same_kind")
        ):
            raise ValueError(
                f"row {j} of {leaf.name} is {array.dtype}{list(array.shape)}, but the space declares "
                f"{leaf.dtype}{list(item_shape)}"
            )
        destination[j] = array
