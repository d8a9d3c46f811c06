"""What a worker's death does: fail the vec env (the default), or rebuild the worker.

:meth:`vecshm.parent.waiting.Waiter.wait` hands each process that died during a wait to the policy's
``on_death``, as a value. :class:`RaiseOnFailure` raises ``WorkerDiedError`` naming the envs.
:class:`RestartWorkers` (``on_worker_failure="restart"``) starts a new process from the same
factories, maps it to the segment, and resets its envs; their lost episodes end as truncated
once that reset is collected, with the last observation the parent saw (docs/reliability.md).
The engine asks the policy, and has no branches of its own for restarts.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from vecshm.parent.processes import describe_exit, describe_worker
from vecshm.parent.waiting import Ticket
from vecshm.shared.errors import WorkerDiedError
from vecshm.shared.protocol import Arena, AutoReset, Phase, Rebuilt

__all__ = ["RaiseOnFailure", "RestartWorkers", "failure_policy", "MAX_RESTARTS_PER_WORKER"]

MAX_RESTARTS_PER_WORKER = 20


class RaiseOnFailure:
    """The default policy: a dead worker fails the vec env, whatever it was doing."""

    restarting: dict[int, Any] = {}  # never filled: no episode waits to be ended
    watches_results = False

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def on_death(self, p: int, ticket: Ticket, deadline: float | None) -> Ticket:
        self.pool.raise_died(p, ticket.phase)
        raise AssertionError("unreachable")  # pragma: no cover

    def forgives(self, error: WorkerDiedError, during: Phase) -> bool:
        """Whether a worker found dead when sent a message is left for the next wait to replace."""
        return False


class RestartWorkers:
    """Rebuild a dead worker from its env factories (under this policy a process hosts one worker).

    ``send_resets`` is :meth:`vecshm.parent.engine.Engine.send_resets`, which gives the rebuilt worker
    its envs' resets; ``reader`` reads the last observations that end the lost
    episodes. ``restarting`` maps each env of a restarted worker whose reset was not collected yet
    to that observation. How a lost episode ends depends on ``autoreset`` (docs/reliability.md):

    - SAME_STEP: the rebuilt env's reset is the step's observation, the last one its final observation;
    - NEXT_STEP: the step returns the last observation, truncated; the reset comes with the next
      step, as after any truncation (:class:`~vecshm.shared.protocol.Rebuilt`). An env whose last
      step had ended its episode was due a reset anyway: that reset is redone, and nothing is lost;
    - DISABLED: the step returns the last observation, truncated; the caller resets by mask.
    """

    def __init__(
        self,
        plan: Any,
        pool: Any,
        waiter: Any,
        reader: Any,
        send_resets: Callable[..., Any],
        autoreset: AutoReset,
    ) -> None:
        self.plan, self.pool, self.waiter, self.reader = plan, pool, waiter, reader
        self.buffers = pool.buffers
        self.send_resets = send_resets
        self.same_step = autoreset is AutoReset.SAME_STEP
        self.hold_reset = autoreset in (AutoReset.NEXT_STEP, AutoReset.NEXT_STEP_AHEAD)
        self.keeps_piped_obs = reader.spec.obs_dynamic
        # NEXT_STEP: whether each env's last collected result ended its episode (its next step resets it)
        self.episode_over = np.zeros(plan.num_envs, dtype=bool) if self.hold_reset else None
        self.watches_results = self.keeps_piped_obs or self.hold_reset
        self.restarting: dict[int, Any] = {}
        self.counts: dict[int, int] = {}  # restarts per worker
        self._last_piped_obs: dict[tuple[Any, int], bytes] = {}  # the dynamic leaves a last observation may need

    def on_death(self, p: int, ticket: Ticket, deadline: float | None) -> Ticket:
        """Replace dead process ``p``, reset its envs, and keep the last observation of their lost
        episodes; ``ticket`` now expecting that reset from its worker."""
        during = ticket.phase
        if not during.runs_envs:
            self.pool.raise_died(p, during)
        w = self.plan.lanes[p][0]
        self.counts[w] = self.counts.get(w, 0) + 1
        if self.counts[w] > MAX_RESTARTS_PER_WORKER:
            self.pool.raise_died(p, during, f" (after {MAX_RESTARTS_PER_WORKER} restarts, giving up)")
        envs = self.plan.worker_envs(w)
        process = self.pool.processes[p]
        process.join(1.0)
        warnings.warn(
            f"{describe_worker(w, envs)} {describe_exit(process.exitcode)} during {during}; restarting it from "
            f"its env factories (restart {self.counts[w]}); its envs' episodes end as truncated",
            RuntimeWarning,
            stacklevel=6,
        )
        requests = self._requests(envs, int(self.buffers.prev_slot[w]), during)
        self.waiter.unwatch(process.sentinel)
        self.pool.restart(p, deadline)
        self.waiter.watch_process(p)
        every_env: list[Any] = [None] * self.plan.num_envs
        every_env[slice(*self.plan.worker_slices[w])] = requests
        self.send_resets(every_env, int(self.buffers.obs_slot[w]), np.array([w]))  # into the slot in flight
        return ticket.renewed(w, int(self.buffers.cmd_seq[w]))

    def _requests(self, envs: list[int], last_slot: int, during: Phase) -> list[Any]:
        """The rebuilt envs' reset requests, and the lost episodes ended (``restarting``): only a
        step loses an episode; a reset in flight is redone (without its seed)."""
        requests: list[Any] = []
        for i in envs:
            if during is not Phase.STEP or (self.episode_over is not None and self.episode_over[i]):
                requests.append({})  # a reset in flight, or (NEXT_STEP) the one a step was due to do
                continue
            last = self.reader.observation_of(i, last_slot, self._last_piped_obs)  # ends the lost episode
            self.restarting[i] = last
            requests.append({} if self.same_step else Rebuilt(last, self.hold_reset))
        return requests

    def forgives(self, error: WorkerDiedError, during: Phase) -> bool:
        """A worker that died while idle is replaced at the next wait, which resets its envs."""
        return during.runs_envs

    def ended(self, env_ids: np.ndarray, during: Phase) -> dict[int, Any]:
        """The envs of ``env_ids`` whose worker was restarted for this command (their reset is now
        collected), with the last observation of their lost episode, which ends as truncated."""
        arrived = {i: self.restarting.pop(i) for i in env_ids.tolist() if i in self.restarting}
        if arrived and during is Phase.STEP:
            self.buffers.truncated[list(arrived)] = True
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


def failure_policy(
    options: Any, plan: Any, pool: Any, waiter: Any, reader: Any, send_resets: Callable[..., Any]
) -> RaiseOnFailure | RestartWorkers:
    """The policy for ``options.on_worker_failure``: restarts (``"restart"``), else the default."""
    if options.restarts:
        return RestartWorkers(plan, pool, waiter, reader, send_resets, options.autoreset)
    return RaiseOnFailure(pool)
