"""Exceptions vecshm raises in the caller. Every worker-side failure names the env and the command."""

from __future__ import annotations

import multiprocessing
import pickle
import traceback
from typing import Any

from gymnasium import error as gym_error

from vecshm.shared.pickling import dumps

__all__ = [
    "VecShmError",
    "ClosedError",
    "AlreadyPendingCallError",
    "NoAsyncCallError",
    "FailedError",
    "InvalidArgumentError",
    "SpaceMismatchError",
    "NotAParallelEnvError",
    "WorkerError",
    "WorkerDiedError",
    "ActorDiedError",
    "StepTimeoutError",
    "StatsOffError",
    "RemoteError",
    "remote_error",
    "remote_errors",
]


class VecShmError(Exception):
    """Base of every error vecshm raises itself."""


class ClosedError(VecShmError, RuntimeError, gym_error.ClosedEnvironmentError):
    """The vec env was closed; it cannot be used any more (also Gymnasium's ``ClosedEnvironmentError``)."""


class AlreadyPendingCallError(VecShmError, RuntimeError, gym_error.AlreadyPendingCallError):
    """An asynchronous call is pending; wait for it before starting another (also Gymnasium's error)."""

    def __init__(self, message: str, name: str = "") -> None:
        Exception.__init__(self, message)
        self.name = name


class NoAsyncCallError(VecShmError, RuntimeError, gym_error.NoAsyncCallError):
    """``*_wait`` was called without a matching ``*_async`` (also Gymnasium's error)."""

    def __init__(self, message: str, name: str = "") -> None:
        Exception.__init__(self, message)
        self.name = name


class FailedError(VecShmError, RuntimeError):
    """An earlier failure left the vec env unusable; only ``close()`` is allowed."""


class StatsOffError(VecShmError, RuntimeError):
    """``venv.stats`` of a vec env created without ``stats=True``: nothing was counted."""


class InvalidArgumentError(VecShmError, ValueError, AssertionError):
    """A bad argument to a wrapper; also an ``AssertionError`` where SB3 checks the same with ``assert``."""


class SpaceMismatchError(VecShmError, ValueError, RuntimeError, AssertionError, TypeError):
    """The envs of one vec env declare different spaces.

    Also a ``RuntimeError`` (AsyncVectorEnv's space check), a ``ValueError`` and a ``TypeError``
    (Gymnasium 1.4's ``batch_differing_spaces``: bounds or shapes that differ, spaces of different
    types) and an ``AssertionError`` (other Gymnasium versions'), so code written against any of
    them catches it.
    """


class NotAParallelEnvError(VecShmError, TypeError, AssertionError):
    """``vecshm.pettingzoo`` was given what is not a PettingZoo ``ParallelEnv``.

    Also an ``AssertionError``: SuperSuit's ``pettingzoo_env_to_vec_env_v1`` refuses the same with
    ``assert``, so code written against it catches this too.
    """


class WorkerError(VecShmError, RuntimeError):
    """An env raised inside a worker. ``env_index``, ``command`` and the remote traceback are kept."""

    env_index: int | None = None
    command: str = ""
    remote_type: str = ""
    remote_traceback: str = ""
    record: RemoteError | None = None  # what the worker sent, to pass the failure on (e.g. out of a Ray actor)
    errors: list[WorkerError] = []  # every env's failure in the same command, this one included


class WorkerDiedError(VecShmError, RuntimeError):
    """A worker process ended without being asked to (killed, crashed, exited)."""

    def __init__(self, message: str, env_indices: list[int], exitcode: int | None) -> None:
        super().__init__(message)
        self.env_indices = env_indices
        self.exitcode = exitcode


class ActorDiedError(WorkerDiedError):
    """A Ray actor hosting envs (``vecshm.ray.RayVecEnv``) died or its node was lost; ``env_indices`` are its envs."""


class StepTimeoutError(VecShmError, TimeoutError, multiprocessing.TimeoutError):
    """An env did not finish within the timeout (also ``multiprocessing.TimeoutError``, as Gymnasium raises)."""

    def __init__(self, message: str, env_indices: list[int]) -> None:
        super().__init__(message)
        self.env_indices = env_indices


class RemoteError:
    """A picklable record of an exception raised in a worker."""

    def __init__(self, exc: BaseException, env_index: int | None, command: str) -> None:
        self.exc_type = type(exc)
        self.type_name = f"{type(exc).__module__}.{type(exc).__qualname__}"
        self.message = str(exc)
        self.env_index = env_index
        self.command = command
        self.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))

    def __getstate__(self) -> dict[str, Any]:
        # The class travels as vecshm.shared.pickling sends any value (so a class from the main script
        # works too); failing that, the record travels without it.
        state = self.__dict__.copy()
        try:
            state["exc_type"] = dumps(self.exc_type)
        except Exception:
            state["exc_type"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        try:
            state["exc_type"] = pickle.loads(state["exc_type"]) if state["exc_type"] is not None else None
        except Exception:
            state["exc_type"] = None
        self.__dict__.update(state)


_HYBRIDS: dict[type, type] = {}


def _hybrid_class(exc_type: type | None) -> type[WorkerError]:
    """``WorkerError`` that is also an instance of the original type, so ``except ValueError`` works."""
    if exc_type is None or not issubclass(exc_type, Exception) or issubclass(exc_type, WorkerError):
        return WorkerError
    if exc_type not in _HYBRIDS:
        try:
            _HYBRIDS[exc_type] = type(f"WorkerError[{exc_type.__name__}]", (WorkerError, exc_type), {})
        except TypeError:  # incompatible C layouts (e.g. OSError subclasses)
            _HYBRIDS[exc_type] = WorkerError
    return _HYBRIDS[exc_type]


def remote_error(record: RemoteError, unit: str = "env") -> WorkerError:
    """The exception to raise in the caller for a worker-side failure."""
    where = f"{unit} {record.env_index}" if record.env_index is not None else "a worker"
    message = (
        f"{where} raised {record.type_name} during {record.command}: {record.message}\n\n"
        f"Worker traceback:\n{record.traceback}"
    )
    cls = _hybrid_class(record.exc_type)
    error = cls.__new__(cls, message)
    Exception.__init__(error, message)
    error.env_index = record.env_index
    error.command = record.command
    error.remote_type = record.type_name
    error.remote_traceback = record.traceback
    error.record = record
    return error


def remote_errors(records: list[RemoteError], unit: str = "env") -> WorkerError:
    """The exception to raise for several envs' failures in one command: the first env's, with
    every failure, in env order, in its ``errors`` (the Gymnasium facade logs and raises as
    AsyncVectorEnv does from these). ``unit``: what an env is called (the multi-agent facades' copies)."""
    ordered = sorted(records, key=lambda r: (r.env_index is None, r.env_index))
    errors = [remote_error(record, unit) for record in ordered]
    for error in errors:
        error.errors = errors
    return errors[0]
