"""The lanes' control words on the parent's side, and the tickets that record a command.

Each lane has words in the segment (:mod:`vecshm.shared.buffers`): its command, the slot its
observations go to (and the one before), and the command's sequence number, which the parent
writes; and its done sequence number, status and progress (the env it is running), which the
lane writes. On the parent's side only :class:`ControlWords` writes or reads them: the engine
submits commands through it, async batches make their tickets with it, a wait asks it which
lanes finished, the failure policy what a dead process was doing, and the pool's shutdown writes
the last command (close) with it.

A command returns a :class:`Ticket`, the record of what was sent: which lanes, the sequence
number each will publish when done, where the observations go, and when. The caller holds it
while the command is pending and hands it back to the wait, so nothing about a pending command
lives anywhere else.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from vecshm.parent.plan import VecEnvPlan
from vecshm.shared.buffers import Buffers
from vecshm.shared.protocol import Command, Phase, Status
from vecshm.shared.sync import Bell, wake_sleepers

__all__ = ["ControlWords", "Ready", "Ticket", "new_ticket"]

_ERROR = int(Status.ERROR)  # compared as a plain int: NumPy is slow to compare arrays with an IntEnum


class Ticket(NamedTuple):
    """One command in flight: ``lanes`` publish ``expected`` (their command's sequence numbers)
    when done; ``slot`` is where their observations go; ``sent_at`` is when it was sent (per
    lane, or one time for all), for the timeout."""

    lanes: np.ndarray
    expected: np.ndarray
    slot: int
    phase: Phase
    sent_at: float | np.ndarray


# ``new_ticket((lanes, expected, slot, phase, sent_at))``: a Ticket made without running the
# Python ``__new__`` a NamedTuple has (one is made per command, on the step path).
new_ticket: Callable[[tuple[Any, ...]], Ticket] = functools.partial(tuple.__new__, Ticket)

Ready = Callable[[Ticket], "np.ndarray | None"]  # a ticket's lanes whose results may be read, or None


class UnitOwners(Protocol):
    """The async ring, as far as a wait for its units needs it (:class:`vecshm.parent.handback.ring.UnitRing`)."""

    def owners(self, units: np.ndarray) -> np.ndarray | None: ...


class ControlWords:
    """The one writer and reader of the lanes' control words on the parent's side."""

    def __init__(self, buffers: Buffers, plan: VecEnvPlan, doorbells: Sequence[Bell], timed: bool) -> None:
        """``doorbells``: each process's (a restart keeps its process's); ``timed``: commands record
        when they were sent (a ``step_timeout`` is set)."""
        self._b, self._plan, self._doorbells, self._timed = buffers, plan, doorbells, timed
        # ``(prev_slot, obs_slot, cmd)`` as every lane holds them, when a whole batch wrote them last
        # (None: unknown, after async batches and close()). A whole batch that would write the same
        # words rewrites none of them.
        self._held: tuple[int | None, int, Command] | None = None
        self._all_finished = self._finished(None)  # (the sync step's, made once)
        self._process_word = [first for first, _ in plan.process_lanes]  # process p's asleep word: its first lane's
        # the command counters a whole batch writes next, worked out after the last one's bells (off
        # the step's path: 0.5 us); None when another command wrote counters since
        self._next_whole: np.ndarray | None = None

    # -- writing ----------------------------------------------------------------------------------

    def submit(self, command: Command, lanes: np.ndarray, slot: int, phase: Phase) -> Ticket:
        """Start ``command`` on ``lanes``; observations go to ``slot`` (0, a lendable slot, or
        ``ring.CLAIM``). Each lane's command word, slot and sequence number are written before
        its doorbell rings: the segment is the record of what was sent."""
        b = self._b
        if lanes is self._plan.all_lanes:  # whole-array writes
            held = self._held
            if held != (slot, slot, command):
                b.prev_slot[:] = b.obs_slot
                b.obs_slot[:] = slot
                b.cmd[:] = int(command)
                self._held = (None if held is None else held[1], slot, command)
            expected = b.cmd_seq + 1 if self._next_whole is None else self._next_whole
            b.cmd_seq[...] = expected  # (an Ellipsis write: 0.2 us less than a slice's)
            self._wake(range(len(self._doorbells)))
            self._next_whole = expected + 1
        else:  # an async batch's few lanes: word by word (fancy indexing costs 0.5 us a write)
            self._held = self._next_whole = None
            ids = lanes.tolist()
            for lane in ids:
                b.prev_slot[lane] = b.obs_slot[lane]
                b.obs_slot[lane] = slot
                b.cmd[lane] = int(command)
                b.cmd_seq[lane] += 1
            expected = b.cmd_seq[lanes]
            process_of = self._plan.process_of
            self._wake(dict.fromkeys(process_of[lane] for lane in ids))
        return new_ticket((lanes, expected, slot, phase, time.monotonic() if self._timed else 0.0))

    def _wake(self, processes: Iterable[int]) -> None:
        """Ring the doorbells of ``processes`` that sleep on them, their commands written (see
        :mod:`vecshm.shared.sync`)."""
        wake_sleepers(processes, self._doorbells, self._process_word, self._b.asleep)

    def close(self, p: int) -> None:
        """Ask process ``p``'s lanes to close their envs and exit (their last command)."""
        first, last = self._plan.process_lanes[p]
        self._held = self._next_whole = None
        self._b.cmd[first:last] = Command.CLOSE
        self._b.cmd_seq[first:last] += 1
        self._doorbells[p].wake()

    # -- tickets ----------------------------------------------------------------------------------

    def ticket(self, lanes: np.ndarray, slot: int, phase: Phase, sent_at: float | np.ndarray) -> Ticket:
        """The ticket of the commands ``lanes`` were sent last (async batches start lanes a few
        at a time, and wait for any of those in flight)."""
        return new_ticket((lanes, self._b.cmd_seq[lanes], slot, phase, sent_at))

    def renewed(self, ticket: Ticket, lane: int) -> Ticket:
        """``ticket`` with ``lane`` now expected to publish its latest command (it was restarted
        and sent a reset)."""
        expected = ticket.expected.copy()
        expected[ticket.lanes == lane] = self._b.cmd_seq[lane]
        return ticket._replace(expected=expected)

    # -- reading ----------------------------------------------------------------------------------

    def finished(self, need: int | None = None) -> Ready:
        """``ready`` for a wait: the first ``need`` (default: all) of a ticket's lanes to have
        finished, in the ticket's order, once that many have."""
        return self._all_finished if need is None else self._finished(need)

    def _finished(self, need: int | None) -> Ready:
        # (the buffers, not their view: a function kept for good must not keep the segment mapped)
        b, every = self._b, self._plan.all_lanes
        asked: list[Any] = [None, None]  # the whole batch's ticket looked at last, and its counters as a list

        def finished(ticket: Ticket) -> np.ndarray | None:
            done_seq, lanes = b.done_seq, ticket.lanes
            if lanes is every and need is None:  # a whole batch (a sync step): compare the words as lists
                if asked[0] is not ticket:  # (a spin asks of one ticket many times)
                    asked[:] = ticket, ticket.expected.tolist()
                return lanes if done_seq.tolist() == asked[1] else None
            n = len(lanes) if need is None else need
            done = lanes[done_seq[lanes] == ticket.expected]
            return done[:n] if len(done) >= n else None

        return finished

    def units_written(self, ring: UnitOwners, units: np.ndarray) -> Ready:
        """``ready`` for a wait: the lanes that wrote the ring's ``units`` (see
        :mod:`vecshm.parent.handback.ring`), in unit order, once every unit holds a finished step.
        The ticket's lanes are those in flight, one of which will claim each unit; one that fails
        claims none, so its error ends the wait: others could fill every batch while it waited unseen."""
        b = self._b

        def written(ticket: Ticket) -> np.ndarray | None:
            lanes = ticket.lanes
            if _ERROR in b.status[lanes].tolist():
                failed = (b.done_seq[lanes] == ticket.expected) & (b.status[lanes] == _ERROR)
                if np.count_nonzero(failed):
                    return lanes[failed]
            return ring.owners(units)

        return written

    def unfinished(self, ticket: Ticket) -> np.ndarray:
        """The lanes of ``ticket`` that have not published its command yet."""
        return ticket.lanes[self._b.done_seq[ticket.lanes] != ticket.expected]

    def running(self, lanes: np.ndarray) -> np.ndarray:
        """Whether each of ``lanes`` is running its latest command (a mask)."""
        return self._b.done_seq[lanes] != self._b.cmd_seq[lanes]

    def done(self, lane: int, expected: int) -> bool:
        """Whether ``lane`` has published the command numbered ``expected``."""
        return int(self._b.done_seq[lane]) == expected

    def statuses(self, lanes: np.ndarray) -> list[int]:
        """The status each of ``lanes`` published with its last command (:class:`Status`)."""
        if lanes is self._plan.all_lanes:
            return self._b.status.tolist()
        return self._b.status[lanes].tolist()

    def slot(self, lane: int) -> int:
        """Where ``lane``'s latest command writes its observations."""
        return int(self._b.obs_slot[lane])

    def last_command(self, lane: int) -> tuple[int, bool]:
        """Where ``lane``'s command before its latest wrote its observations, and whether its
        latest is a reset (what a restart needs to end, or redo, what was lost)."""
        return int(self._b.prev_slot[lane]), int(self._b.cmd[lane]) == Command.RESET

    def env_running(self, lane: int) -> int:
        """The env ``lane`` is running (``NO_ENV`` between envs), as it records before each."""
        return int(self._b.progress[lane])
