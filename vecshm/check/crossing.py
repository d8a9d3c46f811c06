"""What cannot cross to a worker process, named: the object inside a factory, a space or an info
that pickling refuses, and the path that leads to it.

A factory reaches a forkserver or spawn worker cloudpickled (``vecshm.shared.pickling``), and an
env's spaces and infos come back pickled. Pickle's own error says only ``cannot pickle
'_thread.lock' object``; this module looks inside the value (a function's closure, defaults and
the globals it reads, a partial's arguments, an object's attributes, a container's items) for the
innermost part that still fails, so the report can say "``env_fns[0]``, closure variable
``lock``: a ``_thread.lock``".
"""

from __future__ import annotations

import functools
import types
from collections.abc import Iterator
from typing import Any

from vecshm.shared.pickling import dumps

__all__ = ["crossing_failure"]

_DEPTH = 6  # how deep to look before naming what fails as it is


def crossing_failure(value: Any, name: str) -> str | None:
    """None if ``value`` pickles as vecshm sends it; else a sentence naming the part that does not
    (``name`` is how the report calls ``value``) and pickle's error for it."""
    error = _error(value)
    if error is None:
        return None
    path, culprit, error = _culprit(value, [name], error, _DEPTH)
    return f"{' -> '.join(path)} is a {_type_name(culprit)}, which cannot be pickled ({error})"


def _error(value: Any) -> str | None:
    try:
        dumps(value)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _culprit(value: Any, path: list[str], error: str, depth: int) -> tuple[list[str], Any, str]:
    """The innermost part of ``value`` that fails to pickle, with its path and its error."""
    if depth > 0:
        for label, part in _parts(value):
            part_error = _error(part)
            if part_error is not None:
                return _culprit(part, [*path, label], part_error, depth - 1)
    return path, value, error


def _parts(value: Any) -> Iterator[tuple[str, Any]]:
    """The parts pickling ``value`` pickles too, each with a label for the report."""
    if isinstance(value, functools.partial):
        yield "the partial's function", value.func
        yield from ((f"argument {i}", arg) for i, arg in enumerate(value.args))
        yield from ((f"keyword {key!r}", arg) for key, arg in value.keywords.items())
    elif isinstance(value, types.FunctionType):
        yield from _function_parts(value)
    elif isinstance(value, types.MethodType):
        yield "its object", value.__self__
    elif isinstance(value, dict):
        yield from ((f"[{key!r}]", item) for key, item in value.items())
    elif isinstance(value, (list, tuple, set, frozenset)):
        yield from ((f"[{i}]", item) for i, item in enumerate(value))
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        yield from ((f"attribute {key!r}", item) for key, item in vars(value).items())


def _function_parts(function: types.FunctionType) -> Iterator[tuple[str, Any]]:
    """What cloudpickle takes along with a function sent by value: its closure, its defaults and
    the globals its code names."""
    for cell_name, cell in zip(function.__code__.co_freevars, function.__closure__ or ()):
        try:
            yield f"closure variable {cell_name!r}", cell.cell_contents
        except ValueError:  # an empty cell
            continue
    yield from ((f"default {i}", default) for i, default in enumerate(function.__defaults__ or ()))
    for name in function.__code__.co_names:
        if name in function.__globals__:
            yield f"global {name!r}", function.__globals__[name]


def _type_name(value: Any) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
