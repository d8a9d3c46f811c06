"""EnvPool-style asynchronous batches: step some envs, take back whichever finish first.

``send(actions, env_ids)`` and ``recv()`` work on envs: ``recv`` returns the first ``batch_size``
envs to finish, and ``send`` takes any of the envs the caller holds. A *lane* (the engine's unit
of commands) steps its envs together: one env, where batches are not one process's envs (see
:mod:`vecshm.parent.plan`), else a process's envs. So a lane starts once every one of its envs
has its action (until then the actions wait, written into the envs' rows), and a lane that
finishes may leave some of its envs for the next ``recv``. Each env still sees exactly the actions
it was sent, in order, so per-env results are the same as in a synchronous run.

Where the engine has a ring (see :mod:`vecshm.parent.handback.ring`) and every lane hosts as many envs, lanes
write their observations in the order they finish, and ``recv`` lends the batch's rows as they lie,
in that order; a batch may end inside one lane's rows, and the next starts with the rest.
Otherwise the lanes write into slot 0, where a finished env's results stay until its lane runs
again, which needs the env back from the caller; ``recv`` copies them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from vecshm.parent.control import Ticket
from vecshm.parent.core.engine import Engine
from vecshm.parent.handback.extras import NO_SIDE_RESULTS, SideResults
from vecshm.parent.handback.results import Batch
from vecshm.parent.handback.ring import UnitRing, units_spanned
from vecshm.shared.errors import AlreadyPendingCallError, NoAsyncCallError
from vecshm.shared.protocol import Phase
from vecshm.shared.slices import slice_sizes
from vecshm.shared.units import CLAIM

__all__ = ["AsyncBatches"]

ENV_IDS_CACHE = 1024  # distinct env id lists remembered once checked (see AsyncBatches._checked)


class Unreturned(NamedTuple):
    """Envs whose step is done but that ``recv`` has not returned yet, oldest first (a lane's envs
    may fill more than one batch), and what they left beside the segment. A value: the ids
    and their extras change together or not at all."""

    env_ids: np.ndarray
    extras: SideResults

    def added(self, env_ids: np.ndarray, extras: SideResults) -> Unreturned:
        return Unreturned(np.concatenate([self.env_ids, env_ids]), self.extras.merged(extras))

    def taken(self, n: int) -> tuple[np.ndarray, SideResults, Unreturned]:
        """The oldest ``n`` envs, their extras, and what is left."""
        env_ids = self.env_ids[:n]
        mine, rest = self.extras.split(env_ids.tolist())
        return env_ids, mine, Unreturned(self.env_ids[n:], rest)


NOTHING_UNRETURNED = Unreturned(np.empty(0, dtype=np.int64), NO_SIDE_RESULTS)


class AsyncBatches:
    """Where every env is (with the caller, waiting for its lane, in flight, finished), and the
    send/recv protocol over an :class:`Engine`."""

    def __init__(self, engine: Engine, batch_size: int | None) -> None:
        n, plan = engine.num_envs, engine.plan
        self.engine, self.plan, self.words = engine, plan, engine.words
        self.commands = engine.commands  # (every command's trip: start, wait, collect)
        self.sizes = slice_sizes(plan.lane_slices)
        self.in_flight = np.zeros(plan.num_lanes, dtype=bool)  # lanes running a command
        self.with_caller = np.ones(n, dtype=bool)  # envs whose results the caller holds: these may be sent
        self.staged = np.zeros(plan.num_lanes, dtype=np.int64)  # per lane: envs whose actions wait
        self.has_staged = False  # whether any actions wait (a synchronous call then drops them)
        self.staged_dynamic: dict[int, list[Any]] = {}  # the waiting actions' dynamic leaves, by env
        self.finished = NOTHING_UNRETURNED  # envs finished but not yet returned
        self.active = False  # envs in flight or finished but not yet returned (a synchronous call must wait)
        self.started = np.zeros(plan.num_lanes, dtype=np.int64)  # per lane: when it last started
        self.sent_at = np.zeros(plan.num_lanes)  # per lane: when its command was sent (with a timeout)
        self._starts = 0
        self._ids: dict[tuple[tuple[int, ...], bytes], tuple[np.ndarray, np.ndarray, bool]] = {}
        if batch_size is None:
            batch_size = n
        elif not isinstance(batch_size, (int, np.integer)) or not 1 <= batch_size <= n:
            raise ValueError(f"batch_size must be an int with 1 <= batch_size <= num_envs={n}, got {batch_size!r}")
        self.batch_size = int(batch_size)
        size = int(self.sizes[0])
        # A unit holds one lane's envs, a row each: the ring needs lanes hosting as many envs.
        self.ring = engine.ring if bool((self.sizes == size).all()) else None
        self.slot = 0 if self.ring is None else CLAIM  # where lanes write an async command's observations
        if self.ring is not None:
            self.ring.use(units_spanned(self.batch_size, size))
        # with envs left in flight, the parent works while lanes step (see vecshm.parent.core.balance)
        self._balance = engine.balance if self.batch_size < n else None

    def _ticket(self, pending: np.ndarray) -> Ticket:
        """The command ``pending`` lanes run: the segment records each one's sequence number."""
        sent_at = 0.0 if self.engine.timeout is None else self.sent_at[pending]
        return self.words.ticket(pending, self.slot, Phase.STEP, sent_at)

    def reset(self, requests: list[dict[str, Any] | None]) -> None:
        """Reset every env; the results come back through ``recv`` like step results."""
        self.drain()
        ticket = self.commands.reset(requests, self.slot, self.plan.all_lanes)
        self.sent_at[:] = ticket.sent_at
        self.in_flight[:] = self.active = True
        self.with_caller[:] = False
        self.started[:] = self._starts = 0

    def send(self, actions: Any, env_ids: Any) -> np.ndarray:
        """Give ``env_ids`` (envs the caller holds) one row of ``actions`` each; start every lane
        that now has actions for all its envs."""
        env_ids, lanes, whole = self._checked(env_ids)
        held = self.with_caller[env_ids]
        if np.count_nonzero(held) < len(held):
            raise AlreadyPendingCallError(
                f"envs {env_ids[~held].tolist()} were sent already and not yet returned by recv(); "
                "recv() them before sending again",
                "send",
            )
        dynamic = self.engine.actions.write(actions, env_ids)  # checked first: nothing changes if it raises
        self.with_caller[env_ids] = False
        if not whole:  # some lanes may still wait for actions for their other envs
            self.staged += np.bincount(self.plan.env_lane[env_ids], minlength=len(self.staged))
            lanes = lanes[self.staged[lanes] == self.sizes[lanes]]
            self.staged[lanes] = 0
            self.has_staged = np.count_nonzero(self.staged) > 0
        if dynamic is not None:
            self.staged_dynamic.update(dynamic)
        if len(lanes):
            ticket = self.commands.step(lanes, self.slot, self.staged_dynamic if dynamic is not None else None)
            if self.engine.timeout is not None:
                self.sent_at[lanes] = ticket.sent_at
            self.in_flight[lanes] = self.active = True
            self._starts += 1
            self.started[lanes] = self._starts
        return env_ids

    def recv(self, timeout: float | None = None) -> Batch:
        """Wait for the first ``batch_size`` envs to finish (fewer if fewer are out); their results
        (from the ring, with their fixed observation leaves lent)."""
        pending, finished, ring = self.in_flight.nonzero()[0], self.finished, self.ring
        left = len(finished.env_ids)
        # with a ring, every lane hosts ``unit_rows`` envs
        out = left + (len(pending) * ring.unit_rows if ring is not None else int(self.sizes[pending].sum()))
        if out == 0:
            raise NoAsyncCallError(self._nothing_out(), "recv")
        need = min(self.batch_size, out)
        balance = self._balance
        if balance is not None and balance.rules.clock() >= balance.due:
            balance.tick()
        if ring is not None:
            if left == 0 and need % ring.unit_rows == 0:  # whole units (of whole lanes): nothing left over
                done, extras = self._collect_units(ring, ring.next_units(need // ring.unit_rows), pending, timeout)
                self.active = np.count_nonzero(self.in_flight) > 0  # (nothing was left in ``finished``)
                env_ids = self.plan.env_table[done].reshape(-1)  # (with a ring, every lane hosts as many)
                self.with_caller[env_ids] = True
                if len(done) > 1:
                    self._returned(env_ids, done)
                return Batch(self.engine.reader, env_ids, extras, ring.take(need))
            return self._recv_inside_units(ring, pending, finished, need, timeout)
        while len(finished.env_ids) < need:
            pending = self.in_flight.nonzero()[0]
            pending = pending[np.argsort(self.started[pending], kind="stable")]  # the longest out come first
            fewest = -(-(need - len(finished.env_ids)) // int(self.sizes[pending].max()))  # lanes that may do
            done, extras = self.commands.collect(self._ticket(pending), timeout, self.words.finished(fewest))
            done = np.sort(done)
            self.in_flight[done] = False
            finished = self.finished = finished.added(self.plan.env_ids_of(done), extras)
        env_ids, extras, self.finished = finished.taken(need)
        self.active = np.count_nonzero(self.in_flight) > 0 or len(self.finished.env_ids) > 0
        self.with_caller[env_ids] = True
        return Batch(self.engine.reader, env_ids, extras, None)

    def _recv_inside_units(
        self, ring: UnitRing, pending: np.ndarray, finished: Unreturned, need: int, timeout: float | None
    ) -> Batch:
        """The next ``need`` rows of ``ring`` where a batch starts or ends inside a unit, in the
        order lanes finished: first those left in a unit an earlier batch ended inside (their
        lane was collected then, and they wait in ``finished``), then the units of lanes in flight."""
        left = len(finished.env_ids)
        if need > left:
            units = ring.next_units(ring.units_for(need))
            done, extras = self._collect_units(ring, units[1:] if left else units, pending, timeout)
            finished = self.finished = finished.added(self.plan.env_ids_of(done), extras)
        env_ids, extras, self.finished = finished.taken(need)
        self.active = np.count_nonzero(self.in_flight) > 0 or len(self.finished.env_ids) > 0
        self.with_caller[env_ids] = True
        return Batch(self.engine.reader, env_ids, extras, ring.take(need))

    def _collect_units(
        self, ring: UnitRing, units: np.ndarray, pending: np.ndarray, timeout: float | None
    ) -> tuple[np.ndarray, SideResults]:
        """Collect the lanes in flight (``pending``) that write the ring's ``units``, in unit
        order, and their extras; they are no longer in flight."""
        done, extras = self.commands.collect(self._ticket(pending), timeout, self.words.units_written(ring, units))
        if ring.keep_latest:
            ring.collected(units, done)
        self.in_flight[done] = False
        return done, extras

    def drain(self) -> None:
        """Finish and drop whatever is in flight, and any actions waiting (before a synchronous call)."""
        pending = self.in_flight.nonzero()[0]
        if len(pending):
            self.commands.collect(self._ticket(pending))
            self.in_flight[:] = False
            if self.ring is not None:
                self.ring.discard(len(pending))
        self.finished = NOTHING_UNRETURNED
        self.active = False
        self.forget_staged()
        self.with_caller[:] = True
        if self.ring is not None:
            self.ring.rebuild()  # nothing in flight: the free units go back in ring order

    def forget_staged(self) -> None:
        """Drop the actions waiting for other envs of their lanes (a synchronous step or reset
        gives every env a new command); those envs are the caller's again.

        Only while nothing is in flight or finished (not ``active``): every env the caller does
        not hold is then one whose action waits.
        """
        if self.has_staged:
            self.with_caller[:] = True
            self.staged[:] = 0
            self.staged_dynamic.clear()
            self.has_staged = False

    def _nothing_out(self) -> str:
        message = "recv() was called with no envs in flight; send() or async_reset() first"
        waiting = np.flatnonzero(self.staged > 0)
        if len(waiting) == 0:
            return message
        held = np.flatnonzero(self.with_caller & np.isin(self.plan.env_lane, waiting))
        return (
            f"{message}. Envs wait for their worker's other envs: a worker steps the envs it hosts together, "
            f"so send actions for envs {held.tolist()} too"
        )

    def _checked(self, env_ids: Any) -> tuple[np.ndarray, np.ndarray, bool]:
        """``env_ids`` as an array, the lanes hosting them, and whether they are exactly those
        lanes' envs.

        An async loop sends back the batches ``recv`` returned, so the same few id lists come again
        and again: each is checked once, then answered from a small cache (read-only arrays).
        """
        ids = np.asarray(env_ids, dtype=np.int64)
        key = (ids.shape, ids.tobytes())
        found = self._ids.get(key)
        if found is None:
            found = self.check_ids(ids)
            self._remember(key, found)
        return found

    def _returned(self, env_ids: np.ndarray, lanes: np.ndarray) -> None:
        """Remember a batch of whole lanes that ``recv`` returns as already checked.

        Batches of several lanes come in many orders (8 of 16 lanes: thousands), which a
        cache of checked lists would mostly miss; when the caller sends the batch back, the ids
        are known to be valid without checking them (12 us for 32 envs, on 2 cores)."""
        key = (env_ids.shape, env_ids.tobytes())
        if key in self._ids:  # few lanes: few orders, soon all remembered
            return
        ids = env_ids.copy()
        lanes = np.sort(lanes)
        for array in (ids, lanes):
            array.flags.writeable = False
        self._remember(key, (ids, lanes, True))

    def _remember(self, key: tuple[tuple[int, ...], bytes], found: tuple[np.ndarray, np.ndarray, bool]) -> None:
        if len(self._ids) >= ENV_IDS_CACHE:
            self._ids.clear()
        self._ids[key] = found

    def remembered(self, env_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool] | None:
        """What the cache of checked id lists holds for ``env_ids`` (None: not checked yet)."""
        return self._ids.get((env_ids.shape, env_ids.tobytes()))

    def check_ids(self, env_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
        """``env_ids`` checked (in range, none twice), the lanes hosting them, and whether they are
        exactly those lanes' envs; the arrays read-only. Raises for ids ``send`` cannot take."""
        n = self.engine.num_envs
        if env_ids.ndim != 1 or len(env_ids) == 0:
            raise ValueError(f"env_ids must be a non-empty 1-d list of env indices, got {env_ids!r}")
        if env_ids.min() < 0 or env_ids.max() >= n:
            raise IndexError(f"env_ids {env_ids.tolist()} out of range for {n} envs")
        counts = np.bincount(env_ids, minlength=n)
        if np.count_nonzero(counts) != len(env_ids):
            again = np.flatnonzero(counts > 1).tolist()
            raise ValueError(f"env_ids {env_ids.tolist()} name envs {again} more than once")
        lanes = np.flatnonzero(np.bincount(self.plan.env_lane[env_ids], minlength=len(self.sizes)))
        whole = int(self.sizes[lanes].sum()) == len(env_ids)
        ids = env_ids.copy()
        for array in (ids, lanes):
            array.flags.writeable = False
        return ids, lanes, whole
