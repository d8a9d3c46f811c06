"""Whether a vec env can go on: running, failed (and why), or closed.

The engine and its waits share one :class:`Health`: a wait that meets an error the vec env cannot
recover from fails it there (its workers are shut down), and every later call but ``close`` is
refused with the first line of that error.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from vecshm.shared.errors import ClosedError, FailedError

__all__ = ["Health", "EngineState"]


class EngineState(Enum):
    READY = "ready"
    FAILED = "failed"
    CLOSED = "closed"


class Health:
    """The state of one engine; ``shutdown`` stops its workers (the pool's, not the engine's:
    it must not keep the engine alive)."""

    def __init__(self, shutdown: Callable[[], None]) -> None:
        self.state = EngineState.READY
        self.usable = True  # READY: what the step path checks, an attribute read (the rest only when not)
        self.failure = ""  # the first line of the error that failed it
        self._shutdown = shutdown

    def check_usable(self) -> None:
        """Raise ``ClosedError`` after :meth:`close`, ``FailedError`` after :meth:`fail`."""
        if self.state is EngineState.CLOSED:
            raise ClosedError("this vec env is closed; create a new one")
        if self.state is EngineState.FAILED:
            raise FailedError(f"this vec env failed earlier and can only be closed: {self.failure}")

    def fail(self, error: BaseException) -> None:
        """The vec env cannot go on after ``error``: its workers are shut down, and it can only be closed."""
        self.state, self.usable = EngineState.FAILED, False
        self.failure = str(error).split("\n", 1)[0]
        self._shutdown()

    def close(self) -> None:
        self.state, self.usable = EngineState.CLOSED, False
