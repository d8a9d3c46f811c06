"""Waiting for lanes: a bounded spin, then a sleep that a dead process or a deadline also ends.

A command returns a :class:`~vecshm.parent.control.Ticket` (:mod:`vecshm.parent.control`), which the
run object holds while the call is pending and hands back to :meth:`Waiter.wait`. A wait ends when
``ready`` names finished lanes; a worker process that died meanwhile is handed to the failure
policy's hook (``on_death``, given by :class:`~vecshm.parent.core.commands.Commands`, which owns
the command's trip) as a value, which either raises or returns the ticket to keep waiting on.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np

from vecshm.parent.control import ControlWords, Ready, Ticket
from vecshm.parent.core.health import Health
from vecshm.parent.processes.pool import ProcessPool
from vecshm.shared.sync import DoneWatch, Spinner, fence

__all__ = ["OnDeath", "Waiter", "WaitObserver", "OVERSUBSCRIBED_SPIN_SECONDS", "WORKER_CHECK_SECONDS"]

OVERSUBSCRIBED_SPIN_SECONDS = 300e-6
WORKER_CHECK_SECONDS = 0.05  # how often a wait that found its results also looks for dead or late lanes
TURNAROUND_CAP = 0.01  # the most one turnaround counts for in the average the worker processes read


class WaitObserver(Protocol):
    """What a benchmark or a profiler may watch (``venv.observer = ...``): each wait for lanes,
    and each sleep inside one (a wake-up that finds the results short sleeps again)."""

    def wait_started(self) -> None: ...

    def slept(self, seconds: float) -> None: ...

    def wait_ended(self, seconds: float) -> None: ...


OnDeath = Callable[[int, Ticket, "float | None"], Ticket]  # process, ticket, deadline -> the ticket renewed


class Waiter:
    """The parent's waits for one pool of worker processes (see the module's docstring).

    ``waited_seconds`` adds up the time spent waiting, and ``pauses`` counts the times the parent
    was away for longer than ``pause_seconds`` between two waits, for the core balance
    (:mod:`vecshm.parent.core.balance`).
    """

    def __init__(
        self,
        pool: ProcessPool,
        words: ControlWords,
        spin_seconds: float,
        cores: int,
        timeout: float | None,
        health: Health,
        pause_seconds: float,
    ) -> None:
        assert pool.buffers is not None, "the pool maps the segment before anyone waits on it"
        self.pool = pool
        self.plan = pool.plan
        self.health = health
        self.words = words
        self.buffers = pool.buffers
        self.timeout = timeout
        self.cores = cores
        self.spinner = Spinner(spin_seconds)
        self.own_core = self.plan.core_each(cores)
        self.sentinels = {process.sentinel: p for p, process in enumerate(pool.processes)}  # -> process
        self.watch = DoneWatch(pool.transport, pool.done_bell, list(self.sentinels))
        self.waited_seconds = 0.0
        self.pause_seconds = pause_seconds
        self.pauses = 0
        self.observer: WaitObserver | None = None
        self._next_check = 0.0
        self._ended = 0.0  # when the last wait ended
        self._turnaround = 0.0  # (the segment's word, which only this wait writes)
        self._unrecorded: float | None = None  # the length of the last wait, not yet given to the spinner

    def wait(self, ticket: Ticket, timeout: float | None, ready: Ready, on_death: OnDeath) -> tuple[np.ndarray, Ticket]:
        """Wait until ``ready(ticket)`` names finished lanes; those, and the ticket as it ended
        (``on_death`` renews it when it restarts a lane)."""
        observer = self.observer
        if observer is not None:
            observer.wait_started()
        started = time.perf_counter()
        if self._unrecorded is not None:  # the last wait's length, for this one's spin
            self.spinner.record(self._unrecorded)
            self._unrecorded = None
        # the parent's turnaround since the last wait, for the worker processes' spin (vecshm.worker.main);
        # a long pause (a learner's update) counts as TURNAROUND_CAP, so its mark fades in a few steps
        away = started - self._ended
        self._turnaround = turnaround = 0.8 * self._turnaround + 0.2 * min(away, TURNAROUND_CAP)
        self.buffers.turnaround[0] = turnaround
        if away > self.pause_seconds:
            self.pauses += 1
        result = ready(ticket)
        if result is None:  # (async batches often find finished lanes: no wait to learn from)
            result, ticket = self._block(ticket, timeout, ready, on_death)
            self._ended = ended = time.perf_counter()
            # (the spinner learns it at the next wait: the results go back to the caller first)
            self._unrecorded = waited = ended - started
            self.waited_seconds += waited
        else:
            self._ended = ended = time.perf_counter()
        if observer is not None:
            observer.wait_ended(ended - started)
        if started >= self._next_check:
            self._check(ticket, started, on_death)
        return result, ticket

    def _block(
        self, ticket: Ticket, timeout: float | None, ready: Ready, on_death: OnDeath
    ) -> tuple[np.ndarray, Ticket]:
        result = None

        def check() -> bool:
            nonlocal result
            result = ready(ticket)
            return result is not None

        # With a core to itself (fewer lanes than cores), the parent spins the whole budget whenever
        # waits are short enough to spin at all: an outlier that outlasted a budget near the average
        # would cost a wake-up (50-75 us here) and no one else needs the core. When every core has
        # a busy lane, a spinning parent would steal from them, so only short waits are spun.
        if len(ticket.lanes) < self.cores:
            # (without yields only where nothing of the caller's may want this core: no other thread)
            polite = not self.own_core or threading.active_count() > 1
            spun = self.spinner.spin(check, None, self.spinner.max_seconds, polite=polite)
        else:
            spun = self.spinner.spin(check, OVERSUBSCRIBED_SPIN_SECONDS)
        if spun:
            return result, ticket  # type: ignore[return-value]
        return self._sleep_until_ready(ticket, timeout, ready, on_death)

    def wait_rare(
        self, ticket: Ticket, timeout: float | None, ready: Ready, on_death: OnDeath
    ) -> tuple[np.ndarray, Ticket]:
        """:meth:`wait` for a rare call's ``ticket``: asleep on the done bell at once. A call is no
        step: a spin would take the core its lanes need to answer, and its length would teach the
        step's spin, the lanes' turnaround and the core balance nothing true about steps."""
        result = ready(ticket)
        if result is not None:
            return result, ticket
        return self._sleep_until_ready(ticket, timeout, ready, on_death)

    def _sleep_until_ready(
        self, ticket: Ticket, timeout: float | None, ready: Ready, on_death: OnDeath
    ) -> tuple[np.ndarray, Ticket]:
        """Sleep on the done bell and the processes' sentinels until ``ready`` names finished
        lanes; a death goes to ``on_death``, a passed ``timeout`` raises."""
        result = None

        def check() -> bool:
            nonlocal result
            result = ready(ticket)
            return result is not None

        with self.asleep():
            deadline = None if timeout is None else time.monotonic() + timeout
            while not check():
                slept = time.perf_counter()
                ended = self.watch.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
                if self.observer is not None:
                    self.observer.slept(time.perf_counter() - slept)
                self.pool.done_bell.take()
                if check():
                    break
                for fd in ended:
                    ticket = on_death(self.sentinels[fd], ticket, deadline)
                if deadline is not None and time.monotonic() >= deadline:
                    self.pool.raise_timeout(self.words.unfinished(ticket).tolist(), ticket.phase)
        return result, ticket  # type: ignore[return-value]

    @contextlib.contextmanager
    def asleep(self) -> Iterator[None]:
        """While the parent may sleep on the done bell: its asleep word is up, so the lanes' processes ring it
        (vecshm.shared.sync). Nested (a restart's wait within a wait), it leaves the word up."""
        word = self.buffers.parent_asleep
        was = word.item(0)
        word[0] = 1
        fence()  # (written before the lanes' words are read again)
        try:
            yield
        finally:
            word[0] = was

    def _check(self, ticket: Ticket, now_perf: float, on_death: OnDeath) -> None:
        """Every ``WORKER_CHECK_SECONDS``, look for a dead process (handed to ``on_death``: the
        failure policy raises, or restarts it), or one of ``ticket``'s whose command has run past
        the timeout, even though results keep coming.

        Async batches take whichever lanes finish first: without this, the others could fill
        every batch while a dead or hung lane's envs silently drop out.
        """
        self._next_check = now_perf + WORKER_CHECK_SECONDS
        for fd in self.watch.wait(0):
            if fd in self.sentinels:  # (not a process an earlier one's restart already replaced)
                on_death(self.sentinels[fd], ticket, None)
        if self.timeout is not None:
            lanes = ticket.lanes
            late = self.words.running(lanes) & (time.monotonic() - np.asarray(ticket.sent_at) > self.timeout)
            if np.count_nonzero(late):
                self.pool.raise_timeout(lanes[late].tolist(), ticket.phase)

    def unwatch(self, sentinel: int) -> None:
        """Stop watching a dead process (before its sentinel is closed and its number reused)."""
        self.watch.remove(sentinel)
        del self.sentinels[sentinel]

    def watch_process(self, p: int) -> None:
        """Watch process ``p`` (a restarted lane's new process)."""
        sentinel = self.pool.processes[p].sentinel
        self.sentinels[sentinel] = p
        self.watch.add(sentinel)
