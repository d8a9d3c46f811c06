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
from vecshm.shared.protocol import Arena, Phase

__all__ = ["RaiseOnFailure", "RestartWorkers", "failure_policy", "MAX_RESTARTS_PER_WORKER"]

MAX_RESTARTS_PER_WORKER = 20


class RaiseOnFailure:
    """The default policy: a dead worker fails the vec env, whatever it was doing."""

    restarting: dict[int, Any] = {}  # never filled: no episode waits to be ended
    keeps_piped_obs = False

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

    ``resend(w)`` gives worker ``w`` a reset of its envs; ``reader`` reads the last observations
    that end the lost episodes. ``restarting`` maps each env of a restarted worker whose reset was
    not collected yet to that observation.
    """

    def __init__(self, plan: Any, pool: Any, waiter: Any, reader: Any, resend: Callable[[int], None]) -> None:
        self.plan, self.pool, self.waiter, self.reader = plan, pool, waiter, reader
        self.buffers = pool.buffers
        self.resend = resend
        self.keeps_piped_obs = reader.spec.obs_dynamic
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
        last_slot = int(self.buffers.prev_slot[w])
        for i in envs:  # the last observation we have ends the lost episode
            self.restarting[i] = self.reader.observation_of(i, last_slot, self._last_piped_obs)
        self.waiter.unwatch(process.sentinel)
        self.pool.restart(p, deadline)
        self.waiter.watch_process(p)
        self.resend(w)
        return ticket.renewed(w, int(self.buffers.cmd_seq[w]))

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

    def keep_piped_obs(self, env_ids: np.ndarray, piped: dict[tuple[Any, int], bytes]) -> None:
        """Keep the observation leaves ``env_ids`` piped, in case a restart must end their episodes with them."""
        renewed = set(env_ids.tolist())
        kept = {key: v for key, v in self._last_piped_obs.items() if key[1] not in renewed}
        self._last_piped_obs = kept | {key: v for key, v in piped.items() if key[0] is Arena.OBS}


def failure_policy(
    restarts: bool, plan: Any, pool: Any, waiter: Any, reader: Any, resend: Callable[[int], None]
) -> RaiseOnFailure | RestartWorkers:
    """The policy for ``on_worker_failure``: ``restarts`` (``"restart"``), else the default."""
    return RestartWorkers(plan, pool, waiter, reader, resend) if restarts else RaiseOnFailure(pool)
