"""One worker of a worker process: what its :class:`~vecshm.worker.runner.EnvRunner` needs, and its
end of the process's connection.

A process hosts one worker, or several when commands run env by env (see :mod:`vecshm.parent.plan`);
each worker has its own command words and its own addressed share of the process's connection.
"""

from __future__ import annotations

from collections import deque
from multiprocessing.connection import Connection as ProcessConnection
from typing import Any, NamedTuple, Protocol

from vecshm.shared.protocol import AutoReset, receive_addressed
from vecshm.shared.sync import Bell
from vecshm.shared.units import UnitPipe

__all__ = ["Lane", "LaneConnection"]


class Connection(Protocol):
    """A worker's end of its process's connection to the parent (``LaneConnection``)."""

    def send(self, message: Any) -> None: ...

    def recv(self) -> Any: ...


class Lane(NamedTuple):
    """One worker of a process (see :mod:`vecshm.parent.plan`): what its :class:`EnvRunner` needs."""

    worker: int  # the worker's number: its command words in the segment
    env_start: int  # its first env
    conn: Connection
    done_bell: Bell  # the parent's doorbell
    claims: UnitPipe | None  # free units of the async ring
    autoreset: AutoReset
    reward_codes: bool  # record each reward's dtype (see vecshm.shared.buffers.REWARD_DTYPES)
    timed: bool = False  # time the envs' steps, and when each command is done (vecshm.stats)


class LaneConnection:
    """One hosted worker's end of the process's connection: what it sends is addressed to it, and
    a ``recv`` keeps what arrives for the process's other workers for theirs."""

    def __init__(self, conn: ProcessConnection, worker: int, inbox: dict[int, deque[Any]]) -> None:
        self.conn, self.worker, self.inbox = conn, worker, inbox

    def send(self, message: Any) -> None:
        self.conn.send((self.worker, message))

    def recv(self) -> Any:
        return receive_addressed(self.inbox, self.worker, self.conn.recv)
