"""The first place where two results differ, bit for bit: the path to it and both values.

Equal means what the lockstep tests mean by it: the same structure, the same array shapes, dtypes
and bytes, and for everything else the same type and value (an env's Python ``int`` must not come
back as ``np.int64``). NaNs compare equal to NaNs, since bit-identical runs give the same NaNs.
An object whose class compares by identity alone (a lock, a generator) is equal to any other of its
type: no two runs, and no two processes, could hold the same one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Difference", "first_difference", "shown"]

Path = tuple[Any, ...]


@dataclass(frozen=True)
class Difference:
    """Where two values part: ``path`` into both (keys, indices; for an array, the first index
    that differs), what differs (``what``: values, dtype, shape, type, keys, length), and both
    values at that point."""

    path: Path
    what: str
    ours: Any
    reference: Any

    def where(self) -> str:
        """The path as Python would index it: ``["final_obs"][1]``."""
        return "".join(f"[{part!r}]" for part in self.path)


def first_difference(ours: Any, reference: Any, path: Path = (), values: bool = True) -> Difference | None:
    """The first difference between ``ours`` and ``reference``, depth first, or None if they are
    equal. With ``values`` false only the structure counts: keys, lengths, types, shapes and dtypes."""
    if isinstance(reference, dict) or isinstance(ours, dict):
        return _dict_difference(ours, reference, path, values)
    if isinstance(reference, (tuple, list)) and not isinstance(ours, np.ndarray):
        if not isinstance(ours, (tuple, list)) or len(ours) != len(reference):
            return Difference(path, "length", ours, reference)
        pairs = ((i, a, b) for i, (a, b) in enumerate(zip(ours, reference)))
        return next((d for i, a, b in pairs if (d := first_difference(a, b, (*path, i), values))), None)
    if isinstance(ours, np.ndarray) or isinstance(reference, np.ndarray):
        return _array_difference(np.asarray(ours), np.asarray(reference), path, values)
    if type(ours) is not type(reference):
        return Difference(path, "type", ours, reference)
    if _equal_only_to_itself(ours):  # a lock, a generator: the type is all that can compare
        return None
    if not values or ours == reference or (ours != ours and reference != reference):
        return None
    return Difference(path, "values", ours, reference)


def _equal_only_to_itself(value: Any) -> bool:
    """Whether ``value``'s class keeps ``object``'s identity comparison."""
    return all("__eq__" not in vars(cls) for cls in type(value).__mro__[:-1])


def _dict_difference(ours: Any, reference: Any, path: Path, values: bool) -> Difference | None:
    if not (isinstance(ours, dict) and isinstance(reference, dict)) or list(ours) != list(reference):
        keys = [list(side) if isinstance(side, dict) else side for side in (ours, reference)]
        return Difference(path, "keys", *keys)
    found = (first_difference(ours[key], reference[key], (*path, key), values) for key in reference)
    return next((d for d in found if d is not None), None)


def _array_difference(ours: np.ndarray, reference: np.ndarray, path: Path, values: bool) -> Difference | None:
    if ours.shape != reference.shape:
        return Difference(path, "shape", ours, reference)
    if ours.dtype != reference.dtype:
        return Difference(path, "dtype", ours, reference)
    if ours.dtype == object:
        for index in np.ndindex(ours.shape):
            found = first_difference(ours[index], reference[index], (*path, *index), values)
            if found is not None:
                return found
        return None
    if not values or ours.tobytes() == reference.tobytes():
        return None
    if ours.ndim == 0:
        return Difference(path, "values", ours, reference)
    # the first row (along the first axis) that differs: for a batch, the env
    row = next(i for i in range(len(ours)) if ours[i].tobytes() != reference[i].tobytes())
    return Difference((*path, row), "values", ours[row], reference[row])


def shown(value: Any, width: int = 100) -> str:
    """A short, one-line picture of ``value`` with its type, for a report."""
    if isinstance(value, np.ndarray):
        body = np.array2string(value, threshold=8, edgeitems=2, max_line_width=10_000).replace("\n", "")
        text = f"{body} ({value.dtype}{list(value.shape)})"
    else:
        text = f"{value!r} ({type(value).__name__})"
    return text if len(text) <= width else text[: width - 3] + "..."
