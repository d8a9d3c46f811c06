"""Chaos soaks: workers SIGKILLed at random over thousands of env-steps, on both facades.

Under the restart policy every kill truncates exactly its worker's envs, once each, flagged as a
restart, in every autoreset mode, sync and under async batches; every other episode ends as the
envs end it (no env runs past its time limit without an end, and under NEXT_STEP each end is
followed by one reset step); nothing hangs, and nothing is left after ``close()``. Under the
default policy every kill surfaces as a ``WorkerDiedError`` naming the worker's envs.
"""

from __future__ import annotations

import os
import signal
import time
import warnings

import numpy as np
import pytest
from conftest import make_space_env
from gymnasium.vector import AutoresetMode

from vecshm import ShmVecEnv, ShmVectorEnv, WorkerDiedError

pytestmark = pytest.mark.slow

N_ENVS, PER_WORKER, MAX_STEPS = 4, 2, 25
ENV_STEPS = 5000
KILLS = 4
SAME_STEP, NEXT_STEP, DISABLED = AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP, AutoresetMode.DISABLED


def _fns():
    return [make_space_env("box_f32", big_info_every=0, max_steps=MAX_STEPS) for _ in range(N_ENVS)]


def _ends(mode, dones_or_terms, truncs, infos, count: int) -> list[tuple[bool, bool]]:
    """``(ended, flagged as a restart)`` for each of ``count`` envs of one step's or batch's
    results (``mode`` None: SB3's)."""
    ended = np.asarray(dones_or_terms) if truncs is None else np.asarray(dones_or_terms) | np.asarray(truncs)
    if mode is None:
        return [(bool(ended[k]), bool(infos[k].get("worker_restarted", False))) for k in range(count)]
    where = infos.get("final_info", {}) if mode is SAME_STEP else infos  # NEXT_STEP, DISABLED: the step's info
    flags = where.get("_worker_restarted", np.zeros(count, dtype=bool))
    return [(bool(ended[k]), bool(flags[k])) for k in range(count)]


class Ledger:
    """What the caller saw, env by env, against the kills: steps since each episode began, ends,
    and (NEXT_STEP) the reset step each end is owed."""

    def __init__(self, mode) -> None:
        self.mode = mode
        self.steps = [0] * N_ENVS
        self.natural = 0
        self.flagged = [0] * N_ENVS
        self.kills = [0] * N_ENVS  # per env: kills of its worker
        self.owes_reset = [False] * N_ENVS  # NEXT_STEP: its episode ended, its next result is a reset
        self.parked = [False] * N_ENVS  # DISABLED: its episode ended, the caller resets it

    def record(self, env: int, ended: bool, restarted: bool, reward: float) -> None:
        if self.owes_reset[env]:
            assert not ended and not restarted and reward == 0, f"env {env}: a reset step was due"
            self.owes_reset[env] = False
            return
        self.steps[env] += 1
        assert self.steps[env] <= MAX_STEPS, f"env {env} ran past its time limit without an end"
        if restarted:
            assert ended, f"env {env} flagged a restart on a step that did not end its episode"
            self.flagged[env] += 1
            assert self.flagged[env] <= self.kills[env], f"env {env} flagged a restart nobody caused"
        if ended:
            self.natural += not restarted
            self.steps[env] = 0
            self.owes_reset[env] = self.mode is NEXT_STEP
            self.parked[env] = self.mode is DISABLED

    def mid_episode(self, worker: int) -> bool:
        """Whether a kill of ``worker`` now loses its envs' episodes (NEXT_STEP: a reset step
        that was due is redone instead, which ``test_errors.py`` checks on its own; DISABLED: the
        caller's reset would come first)."""
        envs = range(worker * PER_WORKER, (worker + 1) * PER_WORKER)
        return not any(self.owes_reset[env] or self.parked[env] for env in envs)

    def reset(self, env: int) -> None:
        self.steps[env] = 0
        self.owes_reset[env] = self.parked[env] = False

    def settled(self) -> bool:
        return self.flagged == self.kills


def _kill(venv, worker: int, ledger: Ledger) -> None:
    os.kill(venv.processes[worker].pid, signal.SIGKILL)
    for env in range(worker * PER_WORKER, (worker + 1) * PER_WORKER):
        ledger.kills[env] += 1


def _make(mode, batch_size: int | None, policy: str, reset_ahead: bool = False):
    if mode is None:
        return ShmVecEnv(_fns(), envs_per_worker=PER_WORKER, batch_size=batch_size, on_worker_failure=policy)
    return ShmVectorEnv(
        _fns(),
        autoreset_mode=mode,
        envs_per_worker=PER_WORKER,
        batch_size=batch_size,
        on_worker_failure=policy,
        reset_ahead=reset_ahead,
    )


MODES = [
    pytest.param(None, False, id="sb3"),
    pytest.param(SAME_STEP, False, id="same_step"),
    pytest.param(NEXT_STEP, False, id="next_step"),
    pytest.param(NEXT_STEP, True, id="reset_ahead"),
    pytest.param(DISABLED, False, id="disabled"),
]


class Caller:
    """A training loop over ``venv``: synchronous steps, or async batches sent back as they come;
    under DISABLED it resets ended envs by mask (under async batches, once no env is out)."""

    def __init__(self, venv, mode, batch_size: int | None, ledger: Ledger) -> None:
        self.venv, self.mode, self.batch_size, self.ledger = venv, mode, batch_size, ledger
        self.actions = np.zeros(N_ENVS, dtype=np.int64)
        self.ids = np.empty(0, dtype=np.int64)  # async: the envs to send back
        self.held = set(range(N_ENVS)) if batch_size is None else set()  # envs whose results the caller holds
        self.unreset = set() if batch_size is None else set(range(N_ENVS))  # async: first recv brings a reset
        self.parked: set[int] = set()  # DISABLED: ended envs, held until the caller resets them
        seed = {} if mode is None else {"seed": 0}
        venv.reset(**seed) if batch_size is None else venv.async_reset(**seed)

    def victims(self) -> list[int]:
        """Workers whose envs the caller holds, mid-episode: a kill now loses their episodes."""
        workers = range(N_ENVS // PER_WORKER)
        return [
            w
            for w in workers
            if self.held.issuperset(range(w * PER_WORKER, (w + 1) * PER_WORKER)) and self.ledger.mid_episode(w)
        ]

    def call(self) -> list[bool]:
        """One step or batch, recorded in the ledger; whether each env returned was flagged."""
        if self.batch_size is None:
            obs, rewards, *rest = self.venv.step(self.actions)
            ends = _ends(self.mode, rest[0], rest[1] if self.mode is not None else None, rest[-1], N_ENVS)
            env_ids = list(range(N_ENVS))
        else:
            env_ids, rewards, ends = self._batch()
        for env, (ended, restarted), reward in zip(env_ids, ends, np.asarray(rewards).tolist()):
            self.ledger.record(env, ended, restarted, reward)
        if self.mode is DISABLED:
            self._reset_ended(env for env, (end, _) in zip(env_ids, ends) if end)
        return [restarted for _, restarted in ends]

    def _batch(self) -> tuple[list[int], np.ndarray, list[tuple[bool, bool]]]:
        if len(self.ids):
            self.venv.send(self.actions[: len(self.ids)], self.ids)
            self.held.difference_update(self.ids.tolist())
        obs, rewards, terms, truncs, infos, self.ids = self.venv.recv()
        ends = _ends(self.mode, terms, truncs, infos, len(self.ids))
        env_ids = self.ids.tolist()
        self.held.update(env_ids)
        kept = [k for k, env in enumerate(env_ids) if env not in self.unreset]
        self.unreset.difference_update(env_ids)
        return [env_ids[k] for k in kept], np.asarray(rewards)[kept], [ends[k] for k in kept]

    def _reset_ended(self, ended) -> None:
        self.parked.update(ended)
        if self.batch_size is not None:
            self.ids = np.array([env for env in self.ids.tolist() if env not in self.parked], dtype=np.int64)
            if self.venv.in_flight:
                return
        if self.parked:
            self.venv.reset(options={"reset_mask": np.isin(np.arange(N_ENVS), list(self.parked))})
            for env in self.parked:
                self.ledger.reset(env)
            self.parked.clear()
            if self.batch_size is not None:
                self.ids, self.held = np.arange(N_ENVS), set(range(N_ENVS))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode, reset_ahead", MODES)
@pytest.mark.parametrize("batch_size", [None, 2], ids=["sync", "async"])
def test_random_kills_under_the_restart_policy_lose_no_episode(mode, reset_ahead, batch_size, no_leaks):
    rng = np.random.default_rng(7)
    ledger = Ledger(mode)
    venv = _make(mode, batch_size, "restart", reset_ahead)
    calls = ENV_STEPS // (batch_size or N_ENVS)
    kill_at = set(rng.choice(np.arange(20, calls - 20), size=KILLS, replace=False).tolist())
    delays = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        caller = Caller(venv, mode, batch_size, ledger)
        call = -1
        # at least ``calls``; then on until every kill happened and came back (a kill waits until
        # the one before it came back flagged, so the last may fall due late): a bound, not a sleep
        while call < calls - 1 or not (sum(ledger.kills) == KILLS * PER_WORKER and ledger.settled()):
            call += 1
            assert call < 4 * calls, f"the kills' envs did not all come back: {ledger.flagged} of {ledger.kills}"
            # a kill's envs come back flagged before the next kill (a late one waits its turn)
            due = sum(1 for at in kill_at if at <= call) > sum(ledger.kills) // PER_WORKER
            victims = caller.victims()
            if due and ledger.settled() and victims:
                _kill(venv, int(rng.choice(victims)), ledger)
                killed_at = time.perf_counter()
            if any(caller.call()) and ledger.settled():
                delays.append(time.perf_counter() - killed_at)
    restarts = [w for w in caught if issubclass(w.category, RuntimeWarning) and "restarting it" in str(w.message)]
    venv.close()
    assert sum(ledger.kills) == KILLS * PER_WORKER, "every scheduled kill must have happened"
    assert ledger.flagged == ledger.kills, f"restart truncations {ledger.flagged} != kills {ledger.kills}"
    assert len(restarts) == KILLS
    assert ledger.natural > 0
    print(f"kill to flagged truncation, s: {[round(d, 4) for d in delays]}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "mode", [None, SAME_STEP, NEXT_STEP, DISABLED], ids=["sb3", "same_step", "next_step", "disabled"]
)
def test_every_kill_under_the_default_policy_names_its_envs(mode, no_leaks):
    rng = np.random.default_rng(3)
    for worker in rng.integers(N_ENVS // PER_WORKER, size=2).tolist():
        venv = _make(mode, None, "raise")
        venv.reset() if mode is None else venv.reset(seed=0)
        for _ in range(int(rng.integers(1, 30))):
            venv.step(np.zeros(N_ENVS, dtype=np.int64))
            if mode is DISABLED:
                venv.reset(seed=0)  # never past an end
        os.kill(venv.processes[worker].pid, signal.SIGKILL)
        killed_at = time.perf_counter()
        first, last = worker * PER_WORKER, (worker + 1) * PER_WORKER - 1
        with pytest.raises(WorkerDiedError, match=rf"envs {first}-{last}\) was killed by SIGKILL") as raised:
            for _ in range(100):  # the death surfaces within a step; a bound, not a sleep
                venv.step(np.zeros(N_ENVS, dtype=np.int64))
        delay = time.perf_counter() - killed_at
        print(f"kill to WorkerDiedError: {delay:.4f} s")
        assert delay < 5.0, "a death is reported within seconds"
        assert raised.value.env_indices == list(range(first, last + 1))
        venv.close()
