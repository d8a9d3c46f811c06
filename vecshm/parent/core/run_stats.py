"""What a run counts for ``venv.stats`` (:mod:`vecshm.stats`), at a cost kept off the step path.

- **Time.** The run marks when a call into the vec env begins (:meth:`RunStats.entered`, at each
  command it starts) and when a facade hands the results back (:meth:`RunStats.handed_back`): the
  time between is inside the vec env, the rest is the caller's. Of the inside, the waits for
  workers are the waiter's own count (``Waiter.waited_seconds``), with the core handed to a worker
  after a whole batch's bells; the rest is the parent's own work.
- **Counts.** A whole batch's flags are appended to lists as bytes (held arrays kept NumPy from
  reusing their memory), and an async batch's with its env ids; the lists are added up with NumPy every
  :data:`NOTES_PER_SUM` batches, or when a snapshot is taken: a step pays for a list append, not
  for NumPy's microsecond per call. Steps count results of step commands that reached the caller;
  episodes, those that ended one (or that a restart truncated).
- **The barrier.** One whole-batch step in :data:`BARRIER_SAMPLE_EVERY` keeps a copy of when each
  worker finished (``done_at``, which each writes with its result); at a snapshot, the last one's
  lead over the median worker is what the step waited for its slowest.
- **The workers' side** (each env's step times, each process's busy seconds) is in the segment:
  read at a snapshot, never on the step path (:mod:`vecshm.shared.step_times`).
"""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING, Any

import numpy as np

from vecshm.parent.handback.results import Batch
from vecshm.stats import VecStats

if TYPE_CHECKING:
    from vecshm.parent.core.engine import Engine

__all__ = ["RunStats", "BARRIER_SAMPLE_EVERY", "NOTES_PER_SUM"]

NOTES_PER_SUM = 512
BARRIER_SAMPLE_EVERY = 16


class RunStats:
    """The counters behind one run's ``stats`` (see the module)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.reset()

    def reset(self) -> None:
        """Count from now (``venv.reset_stats()``)."""
        engine, n = self.engine, self.engine.num_envs
        self.since = perf_counter()
        self.outside = 0.0
        self.outside_since: float | None = self.since  # (until the first call: the caller's time)
        self.waited_before = engine.waiter.waited_seconds
        self.handed_over = 0.0  # seconds the parent gave its core to a worker after a whole batch's bells
        self.steps = np.zeros(n, np.int64)
        self.episodes = np.zeros(n, np.int64)
        self.restarts = np.zeros(n, np.int64)
        # each whole step's terminated and truncated flags, as bytes: arrays held until the sum kept
        # NumPy from reusing their memory and fed the garbage collector (3 us a step, on frames)
        self.whole_terminated: list[bytes] = []
        self.whole_truncated: list[bytes] = []
        # each async batch's (ids, terminated, truncated)
        self.async_flags: list[tuple[Any, np.ndarray, np.ndarray]] = []
        self.restarted: list[int] = []  # an env for each restart of its worker
        self.awaiting_reset: set[int] = set()  # envs whose async reset's result has not come back yet
        self.whole_steps = 0
        self.finish_times: list[np.ndarray] = []  # sampled whole steps' done_at
        self.busy_before = engine.buffers.busy.copy()
        self.times_before = engine.buffers.env_stats.copy()

    # -- on the call path ---------------------------------------------------------------------------

    def entered(self) -> None:
        if self.outside_since is not None:
            self.outside += perf_counter() - self.outside_since
            self.outside_since = None

    def handed_back(self) -> None:
        self.outside_since = perf_counter()

    def whole_batch(self, batch: Batch, stepped: bool) -> None:
        """A whole batch collected (``stepped``: of a step command; else a reset's)."""
        if batch.restarted:  # (a step's batch flags their episodes truncated by the restart already)
            self.restarted += batch.restarted
        if not stepped:
            return
        self.whole_steps += 1
        self.whole_terminated.append(batch.terminated.tobytes())
        self.whole_truncated.append(batch.truncated.tobytes())
        if not self.whole_steps % BARRIER_SAMPLE_EVERY:
            self.finish_times.append(self.engine.buffers.done_at.copy())
        if len(self.whole_terminated) >= NOTES_PER_SUM:
            self.sum_notes()

    def async_batch(self, batch: Batch) -> None:
        """An async batch received: its envs' results (their resets', after an async reset)."""
        ids: Any = batch.env_ids
        terminated, truncated = batch.terminated, batch.truncated
        if batch.restarted:
            self.restarted += batch.restarted
        if self.awaiting_reset:
            resets = self.awaiting_reset.intersection(batch.ids)
            self.awaiting_reset -= resets
            stepped = np.array([i not in resets for i in batch.ids], dtype=bool)
            ids, terminated, truncated = ids[stepped], terminated[stepped], truncated[stepped]
        self.async_flags.append((ids, terminated, truncated))
        if len(self.async_flags) >= NOTES_PER_SUM:
            self.sum_notes()

    def async_reset(self) -> None:
        self.awaiting_reset = set(range(self.engine.num_envs))

    # -- at a snapshot ------------------------------------------------------------------------------

    def sum_notes(self) -> None:
        """Add the batches noted since the last call to the counts."""
        n = self.engine.num_envs
        if self.whole_terminated:
            terminated, truncated = (
                np.frombuffer(b"".join(flags), np.bool_).reshape(-1, n)
                for flags in (self.whole_terminated, self.whole_truncated)
            )
            self.steps += len(terminated)
            self.episodes += (terminated | truncated).sum(axis=0)
            self.whole_terminated, self.whole_truncated = [], []
        if self.async_flags:
            ids, terminated, truncated = (np.concatenate(parts) for parts in zip(*self.async_flags))
            self.steps += np.bincount(ids, minlength=n)
            self.episodes += np.bincount(ids, weights=terminated | truncated, minlength=n).astype(np.int64)
            self.async_flags = []
        if self.restarted:
            self.restarts += np.bincount(self.restarted, minlength=n)
            self.restarted = []

    def barrier(self) -> tuple[float, list[int]]:
        """The mean of the sampled whole steps' waits for their last worker past the median one, and
        how often each worker came last."""
        if not self.finish_times:
            return 0.0, [0] * len(self.engine.buffers.done_at)
        done = np.array(self.finish_times)
        lead = done.max(axis=1) - np.median(done, axis=1)
        last = np.bincount(done.argmax(axis=1), minlength=done.shape[1])
        return float(lead.mean()), last.tolist()

    def snapshot(self) -> VecStats:
        """The figures since the start (or :meth:`reset`), as a value."""
        self.sum_notes()
        engine, now = self.engine, perf_counter()
        outside = self.outside + (now - self.outside_since if self.outside_since is not None else 0.0)
        buffers, plan = engine.buffers, engine.plan
        firsts = [first for first, _ in plan.process_lanes]
        busy = (buffers.busy - self.busy_before)[firsts]
        barrier, last_to_finish = self.barrier()
        return VecStats.build(
            wall=now - self.since,
            outside=outside,
            waiting=engine.waiter.waited_seconds - self.waited_before + self.handed_over,
            steps=self.steps.copy(),
            episodes=self.episodes.copy(),
            restarts=self.restarts.copy(),
            step_times=np.maximum(buffers.env_stats - self.times_before, 0.0),
            process_envs=list(plan.process_slices),
            process_busy=busy,
            whole_steps=self.whole_steps,
            barrier_mean=barrier,
            last_to_finish=[
                ((plan.lane_slices[w][0], plan.lane_slices[w][1]), count)
                for w, count in enumerate(last_to_finish)
                if count
            ],
        )
