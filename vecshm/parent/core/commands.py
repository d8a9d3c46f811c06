"""A command's whole trip, from "actions written" to "results in hand", written once.

Every command the parent sends (a step, a reset, a call; of every lane, as a whole batch, or of
a few, as an async batch) travels the same way, and :class:`Commands` is the one owner of it:

1. **start** (:meth:`Commands.step`, :meth:`Commands.reset`, :meth:`Commands.call`): each lane's
   command word is written and its doorbell woken (:class:`~vecshm.parent.control.ControlWords`,
   which returns the command's :class:`~vecshm.parent.control.Ticket`), then what the command needs
   beside the segment goes on the socket of the lane's process (a step's dynamic action leaves, a reset's
   keywords, a call's arguments);
2. **wait** (:meth:`Commands.collect`): until ``ready`` names finished lanes of the ticket, after a
   short bounded spin (:class:`~vecshm.parent.core.waiting.Waiter`);
3. **collect**: read what the finished lanes left on their processes' sockets (an env's error raises here,
   and an error the vec env cannot recover from fails it first), and return them with those extras:
   a call's answers are such extras, each env's piped by ``(Arena.ANSWER, env)``.

Who asks decides only which lanes run and where their observations land: a whole batch
(:class:`~vecshm.parent.core.run.VecRun`) starts every lane and collects them all, async batches
(:class:`~vecshm.parent.core.batching.AsyncBatches`) start the lanes whose envs have actions and
collect the first to finish. Each makes its :class:`~vecshm.parent.handback.results.Batch` from
what :meth:`Commands.collect` returns. A rare call (:meth:`VecRun.call
<vecshm.parent.core.run.VecRun.call>`) starts the lanes hosting its envs and collects them all.

A worker process's death hooks in at four named points of the trip, where the failure policy
(:mod:`vecshm.parent.core.restart`) is asked and answers with values, never by calling back:

- *a step of lanes rebuilt while idle* (:meth:`FailurePolicy.take_rebuilt`): the resets those
  lanes get instead, which this module sends;
- *a lane whose process is found dead when sent its message* (:meth:`FailurePolicy.forgives`): whether the next
  wait will replace it;
- *a death seen in a wait* (:meth:`FailurePolicy.on_death`): raise, or the resets the rebuilt
  lane's envs get, which this module sends before the wait goes on with the renewed ticket;
- and *results collected* (:meth:`FailurePolicy.ended`, :meth:`FailurePolicy.seen`): the lost
  episodes that end now, and what a later restart would need.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from vecshm.parent.control import ControlWords, Ready, Ticket
from vecshm.parent.core.health import Health
from vecshm.parent.core.restart import FailurePolicy, Redo
from vecshm.parent.core.waiting import Waiter
from vecshm.parent.handback.extras import NO_SIDE_RESULTS, CollectedLanes, SideResults, new_collected_lanes
from vecshm.parent.plan import VecEnvPlan
from vecshm.parent.processes.pool import ProcessPool
from vecshm.shared.errors import VecShmError, WorkerDiedError, WorkerError, remote_errors
from vecshm.shared.protocol import Command, Phase, Status

__all__ = ["Commands"]

_OK = int(Status.OK)  # compared as a plain int: NumPy is slow to compare arrays with an IntEnum


class Commands:
    """Starts commands on lanes and carries each to its collected results (see the module)."""

    def __init__(
        self,
        plan: VecEnvPlan,
        pool: ProcessPool,
        words: ControlWords,
        waiter: Waiter,
        policy: FailurePolicy,
        health: Health,
        timeout: float | None,
    ) -> None:
        self.plan, self.pool, self.words, self.waiter = plan, pool, words, waiter
        self.policy, self.health, self.timeout = policy, health, timeout
        self._all_finished = words.finished()  # (a whole batch's ``ready``, made once)

    # -- start ------------------------------------------------------------------------------------

    def step(self, lanes: np.ndarray, slot: int, dynamic: dict[int, list[Any]] | None) -> Ticket:
        """Step ``lanes`` on the actions written for their envs; their dynamic leaves leave ``dynamic``.
        Lanes rebuilt while idle are sent their envs' resets instead (the policy's ``take_rebuilt``)."""
        policy = self.policy
        if policy.rebuilt and not policy.rebuilt.isdisjoint(lanes.tolist()):
            return self._step_with_rebuilt(lanes, slot, dynamic)
        ticket = self.words.submit(Command.STEP, lanes, slot, Phase.STEP)
        if dynamic is not None:
            for lane in lanes.tolist():
                self._write_message(lane, {i: dynamic.pop(i) for i in range(*self.plan.lane_slices[lane])}, Phase.STEP)
        return ticket

    def _step_with_rebuilt(self, lanes: np.ndarray, slot: int, dynamic: dict[int, list[Any]] | None) -> Ticket:
        """The step of ``lanes``, the rebuilt among them reset instead (their actions dropped); one
        ticket for all."""
        redone = self.policy.take_rebuilt(lanes, slot, dynamic)
        for redo in redone:
            self._redo(redo)
        reset = {redo.lane for redo in redone}
        others = np.array([lane for lane in lanes.tolist() if lane not in reset], dtype=np.int64)
        if len(others):
            self.step(others, slot, dynamic)
        return self.words.ticket(lanes, slot, Phase.STEP, time.monotonic())

    def reset(self, requests: list[dict[str, Any] | None], slot: int, lanes: np.ndarray) -> Ticket:
        """Start a reset of ``lanes``; ``requests[i]``: env ``i``'s ``reset`` keywords (as the
        facade's peer passes them), or None to keep its observation (rewritten into ``slot``)."""
        if self.policy.rebuilt:
            requests = self.policy.reset_rebuilt(lanes, requests)
        ticket = self.words.submit(Command.RESET, lanes, slot, Phase.RESET)
        for lane in lanes.tolist():
            self._write_message(lane, requests[slice(*self.plan.lane_slices[lane])], Phase.RESET)
        return ticket

    def call(self, lanes: np.ndarray, messages: dict[int, Any], during: Phase) -> Ticket:
        """Start a rare call on ``lanes``, ``messages[lane]`` on each lane's socket (which envs,
        what operation, its arguments). :meth:`collect` returns the envs' answers, piped by
        ``(Arena.ANSWER, env)``, as a step's large infos are."""
        ticket = self.words.submit(Command.CALL, lanes, 0, during)
        for lane in lanes.tolist():
            self._write_message(lane, messages[lane], during)
        return ticket

    def _redo(self, redo: Redo) -> None:
        """Send a rebuilt lane its envs' resets (the policy's answer), into ``redo.slot``."""
        every_env: list[Any] = [None] * self.plan.num_envs
        every_env[slice(*self.plan.lane_slices[redo.lane])] = redo.requests
        self.reset(every_env, redo.slot, np.array([redo.lane]))

    def _write_message(self, lane: int, message: Any, during: Phase) -> None:
        """Write ``lane`` what its command needs beside the segment. A lane whose process died while
        idle finds its end closed: that is a ``WorkerDiedError`` naming it (not a ``BrokenPipeError``),
        unless the failure policy will replace it at the next wait, which gives its envs a reset of
        their own."""
        try:
            self.pool.write_message(lane, message, during)
        except WorkerDiedError as error:
            if self.policy.forgives(error, during):
                return
            self.health.fail(error)
            raise

    # -- wait and collect -------------------------------------------------------------------------

    def collect(
        self, ticket: Ticket, timeout: float | None = None, ready: Ready | None = None, rare: bool = False
    ) -> CollectedLanes:
        """Wait until ``ready`` names finished lanes of ``ticket`` (default: all of them; or the
        first few, or the ring's units written), then read their sockets (errors raise); those
        lanes, with their extras. ``timeout`` (None: the vec env's) bounds the wait. A restarted
        lane's envs end their lost episode once its reset is collected (maybe later). ``rare``: the
        ticket is a rare call's (:meth:`call`), whose wait does not spin, whose collect ends no lost
        episode and holds no step's results, and whose envs' errors leave the vec env usable."""
        policy = self.policy
        try:
            done, ticket = (self.waiter.wait_rare if rare else self.waiter.wait)(
                ticket,
                self.timeout if timeout is None else timeout,
                self._all_finished if ready is None else ready,
                self._on_death,
            )
            ended = policy.restarting and not rare
            restarted = policy.ended(self.plan.env_ids_of(done), ticket.phase) if ended else {}
            piped = self._gather(done, ticket.phase)
        except VecShmError as error:
            # an env's error in a rare call leaves the vec env usable, as SubprocVecEnv's; a death,
            # a timeout, or an error in a step or reset fails it
            if not rare or not isinstance(error, WorkerError):
                self.health.fail(error)
            raise
        if policy.watches_results and not rare:
            policy.seen(self.plan.env_ids_of(done), piped)
        return new_collected_lanes((done, SideResults(piped, restarted) if piped or restarted else NO_SIDE_RESULTS))

    def _on_death(self, p: int, ticket: Ticket, deadline: float | None) -> Ticket:
        """Process ``p`` died during ``ticket``'s command: the policy raises, or rebuilds it and
        names the resets its unfinished lanes get; the ticket then expects those."""
        for redo in self.policy.on_death(p, ticket, deadline):
            self._redo(redo)
            ticket = self.words.renewed(ticket, redo.lane)
        return ticket

    def _gather(self, done: np.ndarray, during: Phase) -> dict[tuple[Any, int], bytes]:
        """Read what finished lanes left on their sockets: piped values (returned), or an env's error."""
        statuses = self.words.statuses(done)
        if statuses.count(_OK) == len(statuses):
            return {}
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        piped: dict[tuple[Any, int], bytes] = {}
        records = []
        for lane, status in zip(done.tolist(), statuses):
            if status == Status.OK_PIPED:
                piped.update(self.pool.read_message(lane, deadline, during))
            elif status == Status.ERROR:
                records += self.pool.read_message(lane, deadline, during)
        if records:
            raise remote_errors(records)
        return piped
