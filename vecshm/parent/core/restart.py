"""What a worker process's death does: fail the vec env (the default), or rebuild the process.

:meth:`vecshm.parent.core.waiting.Waiter.wait` hands each process that died during a wait to the policy's
``on_death``, as a value. :class:`RaiseOnFailure` raises ``WorkerDiedError`` naming the envs.
:class:`RestartWorkers` (``on_worker_failure="restart"``) starts a new process from the same
factories, maps it to the segment, and resets its envs; their lost episodes end as truncated
once that reset is collected, with the last observation the parent saw (docs/reliability.md).
Both are a :class:`FailurePolicy`: a command's trip (:mod:`vecshm.parent.core.commands`) asks it at
named points (a death seen in a wait, a lane found dead when sent a message, a step or reset of
lanes rebuilt while idle, results collected), and has no other branches for restarts. The policy
sends no command itself: it answers with the resets to send (:class:`Redo` values), and the trip
sends them.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

import numpy as np

from vecshm.parent.control import ControlWords, Ticket
from vecshm.parent.core.waiting import WORKER_CHECK_SECONDS, Waiter
from vecshm.parent.engine_options import EngineRules
from vecshm.parent.handback.results import ResultReader
from vecshm.parent.handback.ring import UnitRing
from vecshm.parent.plan import VecEnvPlan
from vecshm.parent.processes.lifetime import describe_exit, describe_process
from vecshm.parent.processes.pool import ProcessPool
from vecshm.shared.errors import WorkerDiedError
from vecshm.shared.protocol import Arena, AutoReset, Phase, Rebuilt, RebuiltReset
from vecshm.shared.units import CLAIM

__all__ = [
    "EngineParts",
    "FailurePolicy",
    "Redo",
    "RaiseOnFailure",
    "RestartWorkers",
    "failure_policy",
    "MAX_RESTARTS_PER_PROCESS",
    "REDONE",
]

MAX_RESTARTS_PER_PROCESS = 20
REDONE = None  # in ``restarting``: the env's reset was redone (a :class:`RebuiltReset`), no episode lost


class Redo(NamedTuple):
    """A rebuilt lane's envs' resets, for the command's trip to send: ``requests``, one per env
    of ``lane``, into ``slot`` (where the lost command was writing, or the step's)."""

    lane: int
    requests: list[Any]
    slot: int


class EngineParts(NamedTuple):
    """What the restart policy works with: the engine's parts (it reads them; it sends nothing)."""

    plan: VecEnvPlan
    pool: ProcessPool
    words: ControlWords
    waiter: Waiter
    reader: ResultReader
    ring: UnitRing | None


class FailurePolicy(Protocol):
    """What a worker process's death does; the engine asks it and nothing else (see the module)."""

    @property
    def restarting(self) -> Mapping[int, Any]:
        """Envs whose rebuilt reset is in flight -> their lost episode's last observation."""
        ...

    @property
    def rebuilt(self) -> AbstractSet[int]:
        """Lanes rebuilt while idle: their next command resets their envs."""
        ...

    @property
    def watches_results(self) -> bool:
        """Whether :meth:`seen` wants every collected result."""
        ...

    def on_death(self, p: int, ticket: Ticket, deadline: float | None) -> list[Redo]:
        """Process ``p`` died during ``ticket``'s command: raise, or rebuild it and name the resets
        its lanes whose command was unfinished get."""
        ...

    def forgives(self, error: WorkerDiedError, during: Phase) -> bool:
        """Whether a lane found dead when sent a message is left for the next wait to replace."""
        ...

    def take_rebuilt(self, lanes: np.ndarray, slot: int, dynamic: dict[int, list[Any]] | None) -> list[Redo]:
        """A step of ``lanes`` into ``slot``, some of them ``rebuilt``: the resets those get
        instead (no longer ``rebuilt``; their dynamic action leaves dropped from ``dynamic``)."""
        ...

    def reset_rebuilt(self, lanes: np.ndarray, requests: list[Any]) -> list[Any]:
        """A reset's ``requests``, those of ``rebuilt`` lanes' envs marked as ending their lost episodes."""
        ...

    def ended(self, env_ids: np.ndarray, during: Phase) -> dict[int, Any]:
        """Of ``env_ids`` just collected, those whose lost episode ends now."""
        ...

    def seen(self, env_ids: np.ndarray, piped: dict[tuple[Any, int], bytes]) -> None:
        """Results of ``env_ids`` were collected (``watches_results``)."""
        ...


class RaiseOnFailure:
    """The default policy: a dead process fails the vec env, whatever it was doing."""

    restarting: Mapping[int, Any] = MappingProxyType({})  # never filled: no episode waits to be ended
    rebuilt: frozenset[int] = frozenset()  # never filled: no lane waits for its envs' resets
    watches_results = False

    def __init__(self, pool: ProcessPool) -> None:
        self.pool = pool

    def on_death(self, p: int, ticket: Ticket, deadline: float | None) -> list[Redo]:
        self.pool.raise_died(p, ticket.phase)
        raise AssertionError("unreachable")  # pragma: no cover

    def forgives(self, error: WorkerDiedError, during: Phase) -> bool:
        return False

    def take_rebuilt(self, lanes: np.ndarray, slot: int, dynamic: dict[int, list[Any]] | None) -> list[Redo]:
        raise AssertionError("no worker is ever rebuilt under this policy")  # pragma: no cover

    def reset_rebuilt(self, lanes: np.ndarray, requests: list[Any]) -> list[Any]:
        return requests

    def ended(self, env_ids: np.ndarray, during: Phase) -> dict[int, Any]:
        return {}

    def seen(self, env_ids: np.ndarray, piped: dict[tuple[Any, int], bytes]) -> None:
        return None


class RestartWorkers:
    """Rebuild a dead worker process from its env factories; its envs' lost episodes end as truncated.

    A process hosts one lane, or (async batches that take commands env by env) several. Of a dead
    process's lanes, those whose command was in flight and unfinished get their envs' resets at
    once (:meth:`on_death` names them, the command's trip sends them), into the slot or ring unit
    their command was writing. The others were idle, or had published their results: they are
    ``rebuilt``, and their next step is that reset instead (:meth:`take_rebuilt`), once the caller
    has seen those results. ``restarting`` maps each env whose reset was sent but not collected to
    the last observation the caller saw (``reader`` reads it, from a slot or the ring's unit
    ``ring.latest`` keeps). How a lost episode ends depends on ``autoreset`` (docs/reliability.md):

    - SAME_STEP: the rebuilt env's reset is the step's observation, the last one its final observation;
    - NEXT_STEP: the step returns the last observation, truncated; the reset comes with the next
      step, as after any truncation (:class:`~vecshm.shared.protocol.Rebuilt`). An env whose last
      step had ended its episode was due a reset anyway: that reset is redone, and nothing is lost;
    - DISABLED: the step returns the last observation, truncated; the caller resets by mask.
    """

    def __init__(self, parts: EngineParts, autoreset: AutoReset) -> None:
        self.plan, self.pool, self.words, self.waiter = parts.plan, parts.pool, parts.words, parts.waiter
        self.reader, self.ring = parts.reader, parts.ring
        reader, pool = parts.reader, parts.pool
        assert pool.buffers is not None, "the pool maps the segment before a policy is made"
        self.buffers = pool.buffers
        self.same_step = autoreset is AutoReset.SAME_STEP
        self.hold_reset = autoreset in (AutoReset.NEXT_STEP, AutoReset.NEXT_STEP_AHEAD)
        self.keeps_piped_obs = reader.spec.obs_dynamic
        # NEXT_STEP: whether each env's last collected result ended its episode (its next step resets it)
        self.episode_over = np.zeros(parts.plan.num_envs, dtype=bool) if self.hold_reset else None
        self.watches_results = self.keeps_piped_obs or self.hold_reset
        self.restarting: dict[int, Any] = {}
        self.rebuilt: set[int] = set()  # lanes rebuilt while idle: their next step resets them instead
        self.counts: dict[int, int] = {}  # restarts per process
        self._last_piped_obs: dict[tuple[Any, int], bytes] = {}  # the dynamic leaves a last observation may need

    @property
    def _ring(self) -> UnitRing:
        """The ring, where a command wrote to it (``CLAIM``): only async batches on a ring do."""
        assert self.ring is not None
        return self.ring

    def on_death(self, p: int, ticket: Ticket, deadline: float | None) -> list[Redo]:
        """Replace dead process ``p``; the resets its lanes whose command was unfinished get,
        into the slot (or ring) that command was writing."""
        during = ticket.phase
        if not during.runs_envs:
            self.pool.raise_died(p, during)
        self.counts[p] = self.counts.get(p, 0) + 1
        if self.counts[p] > MAX_RESTARTS_PER_PROCESS:
            self.pool.raise_died(p, during, f" (after {MAX_RESTARTS_PER_PROCESS} restarts, giving up)")
        process = self.pool.processes[p]
        process.join(1.0)
        warnings.warn(
            f"{describe_process(p, self.plan.process_envs(p))} {describe_exit(process.exitcode)} during {during}; "
            f"restarting it from its env factories (restart {self.counts[p]}); its envs' episodes end as truncated",
            RuntimeWarning,
            stacklevel=7,  # (the facade's call: through the trip's hook, the wait, the collect, the run)
        )
        lanes = range(*self.plan.process_lanes[p])
        expected = dict(zip(ticket.lanes.tolist(), ticket.expected.tolist()))
        unfinished = [lane for lane in lanes if lane in expected and not self.words.done(lane, expected[lane])]
        self.rebuilt.update(lane for lane in lanes if lane not in unfinished)
        self.waiter.unwatch(process.sentinel)
        if unfinished and ticket.slot == CLAIM:  # one may have claimed a ring unit it never wrote
            self._recover_claims(p, ticket.lanes, expected, deadline)
        # (read before the resets move them) a reset in flight loses no episode: it is redone
        requests = {lane: self._requests(lane, *self.words.last_command(lane)) for lane in unfinished}
        self.pool.restart(p, deadline)
        self.waiter.watch_process(p)
        return [Redo(lane, requests[lane], self.words.slot(lane)) for lane in unfinished]

    def take_rebuilt(self, lanes: np.ndarray, slot: int, dynamic: dict[int, list[Any]] | None) -> list[Redo]:
        """A step of ``lanes`` into ``slot``: the ``rebuilt`` among them get their envs' resets
        instead, into that slot (their actions are dropped), and are no longer ``rebuilt``."""
        redone = []
        for lane in sorted(self.rebuilt.intersection(lanes.tolist())):
            self.rebuilt.discard(lane)
            if dynamic is not None:
                for i in self.plan.lane_envs(lane):
                    dynamic.pop(i, None)
            redone.append(Redo(lane, self._requests(lane, self.words.slot(lane), False), slot))
        return redone

    def reset_rebuilt(self, lanes: np.ndarray, requests: list[Any]) -> list[Any]:
        """``requests`` of a reset of ``lanes``, where those ``rebuilt`` reset every env (their
        lost episodes end there; ``worker_restarted`` in the reset's info says so)."""
        requests = list(requests)
        for lane in self.rebuilt.intersection(lanes.tolist()):
            self.rebuilt.discard(lane)
            for i in self.plan.lane_envs(lane):
                requests[i] = RebuiltReset(requests[i] or {})
                self.restarting[i] = REDONE
        return requests

    def _requests(self, lane: int, last_slot: int, redo_reset: bool) -> list[Any]:
        """Lane ``lane``'s rebuilt envs' reset requests, whose last results (those the caller saw)
        went to ``last_slot``; the lost episodes are ended (``restarting``). ``redo_reset``: the
        command lost was a reset, which is redone (without its seed), and no episode was lost."""
        redo_reset = redo_reset or (last_slot == CLAIM and self._ring.latest[lane] < 0)  # (no ring result seen yet)
        requests: list[Any] = []
        for k, i in enumerate(self.plan.lane_envs(lane)):
            if redo_reset or (self.episode_over is not None and self.episode_over[i]):
                self.restarting[i] = REDONE  # (NEXT_STEP: the reset its step was due to do)
                requests.append(RebuiltReset({}))
                continue
            if last_slot == CLAIM:  # the unit the ring keeps for the lane's latest results
                arrays, row = self.buffers.ring, self._ring.latest[lane] * self._ring.unit_rows + k
            else:
                arrays, row = self.buffers.obs_slots[last_slot], i
            last = self.reader.observation_in(arrays, row, i, self._last_piped_obs)
            self.restarting[i] = last
            requests.append({} if self.same_step else Rebuilt(last, self.hold_reset))
        return requests

    def _recover_claims(self, p: int, lanes: np.ndarray, expected: dict[int, int], deadline: float | None) -> None:
        """Once no live lane of the command can claim a ring unit any more, give back first the
        units claimed but never written (by ``p``'s lanes, which died between the two), so that
        the restarted lanes' claims fill them and the ring keeps its order."""
        process_of, processes = self.plan.process_of, self.pool.processes
        others = [lane for lane in lanes.tolist() if process_of[lane] != p]
        with self.waiter.asleep():  # (the lanes' processes wake the done bell)
            while True:
                running = [
                    lane
                    for lane in others
                    if not self.words.done(lane, expected[lane]) and processes[process_of[lane]].is_alive()
                ]
                if not running:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    self.pool.raise_timeout(running, Phase.STEP)
                if self.waiter.watch.wait(WORKER_CHECK_SECONDS):  # another dead process: its turn comes next
                    time.sleep(0.001)
                self.pool.done_bell.take()
        self._ring.recover_claims()

    def forgives(self, error: WorkerDiedError, during: Phase) -> bool:
        """A lane that died while idle is replaced at the next wait, which resets its envs."""
        return during.runs_envs

    def ended(self, env_ids: np.ndarray, during: Phase) -> dict[int, Any]:
        """The envs of ``env_ids`` whose lane was restarted for this command (their reset is now
        collected), with the last observation of their lost episode, which ends as truncated (or
        ``REDONE``: a reset redone, no episode lost)."""
        arrived = {i: self.restarting.pop(i) for i in env_ids.tolist() if i in self.restarting}
        lost = [i for i, last in arrived.items() if last is not REDONE]
        if lost and during is Phase.STEP:
            self.buffers.truncated[lost] = True
        return arrived

    def seen(self, env_ids: np.ndarray, piped: dict[tuple[Any, int], bytes]) -> None:
        """Results of ``env_ids`` were collected: keep what a restart would need to end their episodes."""
        if self.episode_over is not None:
            b = self.buffers
            self.episode_over[env_ids] = b.terminated[env_ids] | b.truncated[env_ids]
        if self.keeps_piped_obs:
            renewed = set(env_ids.tolist())
            kept = {key: v for key, v in self._last_piped_obs.items() if key[1] not in renewed}
            self._last_piped_obs = kept | {key: v for key, v in piped.items() if key[0] is Arena.OBS}


def failure_policy(options: EngineRules, parts: EngineParts) -> FailurePolicy:
    """The policy for ``options.on_worker_failure``: restarts (``"restart"``), else the default."""
    if options.restarts:
        return RestartWorkers(parts, options.autoreset)
    return RaiseOnFailure(parts.pool)
