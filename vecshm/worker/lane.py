"""One lane of a worker process: what its :class:`~vecshm.worker.runner.EnvRunner` needs, and its
end of the process's connection.

A lane is what a command runs on (see :mod:`vecshm.parent.plan`): a process hosts one lane, or
several when commands run env by env; each lane has its own command words and its own addressed
share of the process's connection.
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
    """A lane's end of its process's connection to the parent (``LaneConnection``)."""

    def send(self, message: Any) -> None: ...

    def recv(self) -> Any: ...


class Lane(NamedTuple):
    """One lane of a process (see :mod:`vecshm.parent.plan`): what its :class:`EnvRunner` needs."""

    number: int  # the lane's number: its command words in the segment
    env_start: int  # its first env
    conn: Connection
    done_bell: Bell  # the parent's doorbell
    claims: UnitPipe | None  # free units of the async ring
    autoreset: AutoReset
    reward_codes: bool  # record each reward's dtype (see vecshm.shared.buffers.REWARD_DTYPES)
    timed: bool = False  # time the envs' steps, and when each command is done (vecshm.stats)


class LaneConnection:
    """One lane's end of the process's connection: what it sends is addressed to it, and
    a ``recv`` keeps what arrives for the process's other lanes for theirs."""

    def __init__(self, conn: ProcessConnection, lane: int, inbox: dict[int, deque[Any]]) -> None:
        self.conn, self.lane, self.inbox = conn, lane, inbox

    def send(self, message: Any) -> None:
        self.conn.send((self.lane, message))

    def recv(self) -> Any:
        return receive_addressed(self.inbox, self.lane, self.conn.recv)
