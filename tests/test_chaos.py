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


def _fns(obs_key: str = "box_f32"):
    return [make_space_env(obs_key, big_info_every=0, max_steps=MAX_STEPS, filled=True) for _ in range(N_ENVS)]


def _flags(infos, count: int) -> np.ndarray:
    return np.asarray(infos.get("_worker_restarted", np.zeros(count, dtype=bool)))


def _ends(mode, dones_or_terms, truncs, infos, count: int) -> list[tuple[bool, bool]]:
    """``(ended, flagged as a restart)`` for each of ``count`` envs of one step's or batch's
    results (``mode`` None: SB3's). A lost episode's end is flagged in the final info under
    SAME_STEP, in the step's info otherwise; a redone reset in its own info."""
    ended = np.asarray(dones_or_terms) if truncs is None else np.asarray(dones_or_terms) | np.asarray(truncs)
    if mode is None:
        return [(bool(ended[k]), bool(infos[k].get("worker_restarted", False))) for k in range(count)]
    flags = _flags(infos, count) | _flags(infos.get("final_info", {}), count)
    return [(bool(ended[k]), bool(flags[k])) for k in range(count)]


class Ledger:
    """What the caller saw, env by env, against the kills: steps since each episode began, ends,
    (NEXT_STEP) the reset step each end is owed, and the restart flags, each of which answers a kill:
    a lost episode ended as truncated, or a reset redone (NEXT_STEP's reset step, a caller's reset)."""

    def __init__(self, mode) -> None:
        self.mode = mode
        self.steps = [0] * N_ENVS
        self.natural = 0
        self.truncations = 0  # lost episodes the restarts ended
        self.flagged = [0] * N_ENVS
        self.kills = [0] * N_ENVS  # per env: kills of its worker process
        self.owes_reset = [False] * N_ENVS  # NEXT_STEP: its episode ended, its next result is a reset

    def record(self, env: int, ended: bool, restarted: bool, reward: float) -> None:
        if restarted:
            self.flagged[env] += 1
            assert self.flagged[env] <= self.kills[env], f"env {env} flagged a restart nobody caused"
        if self.owes_reset[env]:  # redone by a restart, or not
            assert not ended and reward == 0, f"env {env}: a reset step was due"
            self.owes_reset[env] = False
            return
        if restarted and not ended:  # a reset redone (the episode starts anew)
            self.steps[env] = 0
            return
        self.steps[env] += 1
        assert self.steps[env] <= MAX_STEPS, f"env {env} ran past its time limit without an end"
        if ended:
            self.natural += not restarted
            self.truncations += restarted
            self.steps[env] = 0
            self.owes_reset[env] = self.mode is NEXT_STEP

    def reset(self, env: int, restarted: bool) -> None:
        """The caller reset ``env`` (DISABLED), or a reset of others reached its rebuilt worker."""
        if restarted:
            self.flagged[env] += 1
        self.steps[env] = 0
        self.owes_reset[env] = False

    def settled(self) -> bool:
        return self.flagged == self.kills


def _kill(venv, process: int, ledger: Ledger) -> None:
    os.kill(venv.processes[process].pid, signal.SIGKILL)
    for env in range(process * PER_WORKER, (process + 1) * PER_WORKER):
        ledger.kills[env] += 1


def _make(mode, batch_size: int | None, policy: str, reset_ahead: bool = False, obs_key: str = "box_f32"):
    if mode is None:
        return ShmVecEnv(_fns(obs_key), envs_per_worker=PER_WORKER, batch_size=batch_size, on_worker_failure=policy)
    return ShmVectorEnv(
        _fns(obs_key),
        autoreset_mode=mode,
        envs_per_worker=PER_WORKER,
        batch_size=batch_size,
        on_worker_failure=policy,
        reset_ahead=reset_ahead,
    )


MODES = {
    "sb3": (None, False),
    "same_step": (SAME_STEP, False),
    "next_step": (NEXT_STEP, False),
    "reset_ahead": (NEXT_STEP, True),
    "disabled": (DISABLED, False),
}
# how the envs run: synchronous steps; async batches of whole processes, copied or lent from the
# ring (frames); async batches that take commands env by env (3 of a process's 2 envs). Every
# autoreset mode runs sync and async; the ring, env-by-env commands and reset_ahead in three of
# them (about 60 s in all on 2 cores).
RUNS = {"sync": (None, "box_f32"), "async": (2, "box_f32"), "ring": (2, "frame_u8"), "env_by_env": (3, "box_f32")}
CASES = [
    pytest.param(*MODES[mode], *RUNS[run], id=f"{run}-{mode}")
    for run, modes in [
        ("sync", ["sb3", "same_step", "next_step", "disabled"]),
        ("async", ["sb3", "same_step", "next_step", "disabled"]),
        ("ring", ["sb3", "next_step", "disabled"]),
        ("env_by_env", ["same_step", "reset_ahead", "disabled"]),
    ]
    for mode in modes
]


class Caller:
    """A training loop over ``venv``: synchronous steps, or async batches sent back as they come;
    under DISABLED it resets ended envs by mask (under async batches, once no env is out)."""

    def __init__(self, venv, mode, batch_size: int | None, ledger: Ledger) -> None:
        self.venv, self.mode, self.batch_size, self.ledger = venv, mode, batch_size, ledger
        self.actions = np.zeros(N_ENVS, dtype=np.int64)
        self.ids = np.empty(0, dtype=np.int64)  # async: the envs to send back
        self.unreset = set() if batch_size is None else set(range(N_ENVS))  # async: first recv brings a reset
        self.parked: set[int] = set()  # DISABLED: ended envs, held until the caller resets them
        seed = {} if mode is None else {"seed": 0}
        venv.reset(**seed) if batch_size is None else venv.async_reset(**seed)

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
        obs, rewards, terms, truncs, infos, self.ids = self.venv.recv()
        ends = _ends(self.mode, terms, truncs, infos, len(self.ids))
        env_ids = self.ids.tolist()
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
            mask = np.isin(np.arange(N_ENVS), list(self.parked))
            _, infos = self.venv.reset(options={"reset_mask": mask})
            flags = _flags(infos, N_ENVS)
            for env in np.flatnonzero(mask | flags).tolist():
                self.ledger.reset(env, bool(flags[env]))
            self.parked.clear()
            if self.batch_size is not None:
                self.ids = np.arange(N_ENVS)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode, reset_ahead, batch_size, obs_key", CASES)
def test_random_kills_under_the_restart_policy_lose_no_episode(mode, reset_ahead, batch_size, obs_key, no_leaks):
    rng = np.random.default_rng(7)
    ledger = Ledger(mode)
    venv = _make(mode, batch_size, "restart", reset_ahead, obs_key)
    assert venv.runtime.ring == (batch_size is not None and obs_key == "frame_u8")
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
            # a kill, of a process whichever state its envs are in, waits until the one before it came back
            due = sum(1 for at in kill_at if at <= call) > sum(ledger.kills) // PER_WORKER
            if due and ledger.settled():
                _kill(venv, int(rng.integers(N_ENVS // PER_WORKER)), ledger)
                killed_at = time.perf_counter()
            if any(caller.call()) and ledger.settled():
                delays.append(time.perf_counter() - killed_at)
    restarts = [w for w in caught if issubclass(w.category, RuntimeWarning) and "restarting it" in str(w.message)]
    venv.close()
    assert sum(ledger.kills) == KILLS * PER_WORKER, "every scheduled kill must have happened"
    assert ledger.flagged == ledger.kills, f"restart flags {ledger.flagged} != kills {ledger.kills}"
    assert len(restarts) == KILLS
    assert ledger.natural > 0 and ledger.truncations > 0
    print(f"kill to its envs all back, flagged, s: {[round(d, 4) for d in delays]}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "mode", [None, SAME_STEP, NEXT_STEP, DISABLED], ids=["sb3", "same_step", "next_step", "disabled"]
)
def test_every_kill_under_the_default_policy_names_its_envs(mode, no_leaks):
    rng = np.random.default_rng(3)
    for worker in rng.integers(N_ENVS // PER_WORKER, size=1).tolist():
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
