"""``ShmVectorEnv(env_fns, worker=fn)``: a custom worker runs on Gymnasium's own pipe protocol.

A custom ``worker`` is a function that speaks ``AsyncVectorEnv``'s pipe protocol (commands and
results over a ``Pipe``, observations through Gymnasium's shared memory), usually Gymnasium's
``_async_worker`` with changes. vecshm's engine cannot host it: its workers are its own loop over a
shared segment. So such a vec env is Gymnasium's ``AsyncVectorEnv`` itself, under the class that
code asked for: every method, attribute (``parent_pipes``, ``processes``, ``error_queue``), error and
warning is ``AsyncVectorEnv``'s, and the custom worker gets exactly the pipes, shared memory and
semaphore it expects. What needs vecshm's engine (``send``/``recv`` batches, ``envs_per_worker``,
pinning, ``step_timeout``) is refused with an error that says why.

vecshm's reliability guarantees hold here too, where ``AsyncVectorEnv`` alone does not give them:
each worker process ends with the vec env's process (even when that one is killed), a worker process
that dies is a :class:`~vecshm.shared.errors.WorkerDiedError` naming its env and exit status instead of a
bare ``EOFError`` or ``BrokenPipeError`` from a pipe, and neither a failed constructor nor ``close()``
after such a death leaves a process behind.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any, NoReturn

from gymnasium.vector import AsyncVectorEnv, VectorEnv

from vecshm.parent.processes.lifetime import describe_exit, end_processes
from vecshm.shared.errors import FailedError, WorkerDiedError
from vecshm.vector.rules import ASYNC_SIGNATURE, check_worker_signature
from vecshm.vector.shm_vector_env import ShmVectorEnv
from vecshm.worker.main import exit_with_parent

__all__ = ["ShmVectorEnvOnPipes"]

_ENGINE_ONLY = (
    "`{}` needs vecshm's own worker loop; with a custom `worker` ShmVectorEnv runs Gymnasium's "
    "AsyncVectorEnv pipe protocol, which has no {}"
)


def _engine_defaults() -> dict[str, Any]:
    """vecshm's own keyword-only options of ``ShmVectorEnv`` and their defaults."""
    parameters = inspect.signature(ShmVectorEnv.__init__).parameters.values()
    return {p.name: p.default for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}


# How long a broken pipe waits for its worker process to be seen ended (it closes its pipe as it exits).
DEATH_GRACE_SECONDS = 2.0


class _PipeWorkerDiedError(WorkerDiedError, EOFError):
    """A worker died where ``AsyncVectorEnv`` raises ``EOFError``: code catching that still does."""


class _TiedToParent:
    """The custom worker, in a process that ends with the vec env's process (vecshm's orphan guard)."""

    def __init__(self, worker: Callable[..., None], parent_pid: int) -> None:
        self.worker = worker
        self.parent_pid = parent_pid

    def __call__(self, *args: Any) -> None:
        exit_with_parent(self.parent_pid)
        self.worker(*args)


class ShmVectorEnvOnPipes(AsyncVectorEnv, ShmVectorEnv, runs_custom_workers=True):
    """What ``ShmVectorEnv(..., worker=fn)`` returns: ``AsyncVectorEnv`` with ``fn`` as its worker.

    ``AsyncVectorEnv`` comes first in the method order, so its methods and state rules apply; the
    class is still a ``ShmVectorEnv`` for ``isinstance`` and reads as one in ``repr``.
    """

    processes: list[Any] | None = None  # AsyncVectorEnv's own list (shadows the engine's property)
    closed = False  # VectorEnv's start, which AsyncVectorEnv keeps (the kernel's: closed until its run is up)
    _failure: str | None = None  # why the vec env can only be closed: a worker process died
    _interrupted = False  # a call was interrupted (Ctrl-C): close() cannot trust the envs to answer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """``AsyncVectorEnv``'s arguments as the installed Gymnasium takes them; vecshm's own
        keyword-only options are refused unless left at their defaults."""
        defaults = _engine_defaults()
        for name in [name for name in kwargs if name in defaults]:
            value = kwargs.pop(name)
            if value is not defaults[name] and value != defaults[name]:
                raise ValueError(_ENGINE_ONLY.format(name, "such option"))
        if "max_concurrency" not in ASYNC_SIGNATURE.parameters and kwargs.get("max_concurrency", 0) is None:
            del kwargs["max_concurrency"]  # a Gymnasium without it: None asks for nothing it lacks
        try:
            arguments = ASYNC_SIGNATURE.bind(self, *args, **kwargs).arguments
        except TypeError as error:
            raise TypeError(f"ShmVectorEnv.__init__() {error}") from None
        worker = arguments["worker"]
        check_worker_signature(worker)  # AsyncVectorEnv's check, before it sees the wrapped worker
        self._worker_name = getattr(worker, "__qualname__", repr(worker))
        arguments["worker"] = _TiedToParent(worker, os.getpid())
        try:
            AsyncVectorEnv.__init__(**arguments)
        except BaseException:  # AsyncVectorEnv leaves its started workers running here
            self._end_processes()
            self.closed = True
            raise
        finally:
            self.worker = worker

    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """``AsyncVectorEnv``'s close; where a worker's pipe is broken, every process is ended anyway."""
        if self._failure is not None:  # the processes were ended when the failure was seen
            return
        try:
            AsyncVectorEnv.close_extras(self, timeout, terminate or self._interrupted)
        except (OSError, EOFError):
            self._end_processes()

    def _end_processes(self) -> None:
        """End every worker process now (terminated, killed if that does not end it) and close the pipes."""
        end_processes(self.processes or [], grace=0.0)
        for pipe in getattr(self, "parent_pipes", []):
            if pipe is not None:
                pipe.close()

    def _raise_if_a_worker_died(self, call: str, error: BaseException) -> None:
        """Raise a ``WorkerDiedError`` naming the dead workers' envs if ``error`` (a broken pipe) came
        from a worker process that ended; return where every worker is still running."""
        processes = self.processes or []
        ended = wait([p.sentinel for p in processes], timeout=DEATH_GRACE_SECONDS)
        dead = [i for i, p in enumerate(processes) if p.sentinel in ended]
        if not dead:
            return
        for i in dead:  # its sentinel closes as it exits, a moment before it can be reaped
            processes[i].join(DEATH_GRACE_SECONDS)
        cls = _PipeWorkerDiedError if isinstance(error, EOFError) else WorkerDiedError
        causes = "; ".join(f"env {i}'s worker process {describe_exit(processes[i].exitcode)}" for i in dead)
        # The other pipes may hold unread results: nothing more can be said over them, as in the engine
        self._failure = causes
        self._end_processes()
        raise cls(
            f"{causes} during {call} (custom `worker` {self._worker_name!r}). "
            "The vec env cannot continue; close() it and create a new one.",
            dead,
            processes[dead[0]].exitcode,
        ) from error

    def __repr__(self) -> str:
        """Gymnasium's ``VectorEnv`` text, under the name the caller used (``ShmVectorEnv(num_envs=4)``)."""
        return ShmVectorEnv.__name__ + VectorEnv.__repr__(self).removeprefix(type(self).__name__)

    def async_reset(self, seed: Any = None, options: Any = None) -> NoReturn:
        raise NotImplementedError(_ENGINE_ONLY.format("async_reset", "async batches (send/recv)"))

    def send(self, actions: Any, env_ids: Any = None) -> NoReturn:
        raise NotImplementedError(_ENGINE_ONLY.format("send", "async batches (send/recv)"))

    def recv(self, timeout: float | None = None) -> NoReturn:
        raise NotImplementedError(_ENGINE_ONLY.format("recv", "async batches (send/recv)"))


def _naming_dead_workers(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` of ``AsyncVectorEnv``, with a pipe broken by a dead worker raised as ``WorkerDiedError``."""

    @functools.wraps(method)
    def calling(self: ShmVectorEnvOnPipes, *args: Any, **kwargs: Any) -> Any:
        if self._failure is not None and not self.closed:
            raise FailedError(f"this vec env failed earlier and can only be closed: {self._failure}")
        try:
            return method(self, *args, **kwargs)
        except (OSError, EOFError) as error:
            self._raise_if_a_worker_died(method.__name__, error)
            raise
        except KeyboardInterrupt:
            self._interrupted = True
            raise

    return calling


def _marking_interrupts(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` of ``AsyncVectorEnv`` (one that calls a ``*_async`` and then its ``*_wait``), with
    a Ctrl-C anywhere inside it marking the vec env interrupted: one that lands between the two
    calls leaves a call pending, which ``close()`` would otherwise wait for."""

    @functools.wraps(method)
    def calling(self: ShmVectorEnvOnPipes, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except KeyboardInterrupt:
            self._interrupted = True
            raise

    return calling


# Every AsyncVectorEnv method that writes to or reads from the workers' pipes (the others go through these).
for _name in (
    "reset_async",
    "reset_wait",
    "step_async",
    "step_wait",
    "call_async",
    "call_wait",
    "set_attr",
    "_check_spaces",
):
    setattr(ShmVectorEnvOnPipes, _name, _naming_dead_workers(getattr(AsyncVectorEnv, _name)))
for _name in ("reset", "step", "call"):  # get_attr and render go through call
    setattr(ShmVectorEnvOnPipes, _name, _marking_interrupts(getattr(AsyncVectorEnv, _name)))
