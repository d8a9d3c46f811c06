"""Chaos soaks: workers SIGKILLed at random over thousands of env-steps, on both facades.

Under the restart policy every kill truncates exactly its worker's envs, once each, flagged as a
restart; every other episode ends as the envs end it (no env runs past its time limit without an
end); nothing hangs, and nothing is left after ``close()``. Under the default policy every kill
surfaces as a ``WorkerDiedError`` naming the worker's envs.
"""

from __future__ import annotations

import os
import signal
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


def _fns():
    return [make_space_env("box_f32", big_info_every=0, max_steps=MAX_STEPS) for _ in range(N_ENVS)]


def _ends(facade: str, dones_or_terms, truncs, infos, count: int) -> list[tuple[bool, bool]]:
    """``(ended, flagged as a restart)`` for each of ``count`` envs of one step's or batch's results."""
    ended = np.asarray(dones_or_terms) if truncs is None else np.asarray(dones_or_terms) | np.asarray(truncs)
    if facade == "sb3":
        return [(bool(ended[k]), bool(infos[k].get("worker_restarted", False))) for k in range(count)]
    final = infos.get("final_info", {})
    flags = final.get("_worker_restarted", np.zeros(count, dtype=bool))
    return [(bool(ended[k]), bool(flags[k])) for k in range(count)]


class Ledger:
    """What the caller saw, env by env, against the kills: steps since each episode began, ends."""

    def __init__(self) -> None:
        self.steps = [0] * N_ENVS
        self.natural = 0
        self.flagged = [0] * N_ENVS
        self.kills = [0] * N_ENVS  # per env: kills of its worker

    def record(self, env: int, ended: bool, restarted: bool) -> None:
        self.steps[env] += 1
        assert self.steps[env] <= MAX_STEPS, f"env {env} ran past its time limit without an end"
        if restarted:
            assert ended, f"env {env} flagged a restart on a step that did not end its episode"
            self.flagged[env] += 1
            assert self.flagged[env] <= self.kills[env], f"env {env} flagged a restart nobody caused"
        if ended:
            self.natural += not restarted
            self.steps[env] = 0

    def settled(self) -> bool:
        return self.flagged == self.kills


def _kill(venv, worker: int, ledger: Ledger) -> None:
    os.kill(venv.processes[worker].pid, signal.SIGKILL)
    for env in range(worker * PER_WORKER, (worker + 1) * PER_WORKER):
        ledger.kills[env] += 1


def _make(facade: str, batch_size: int | None, policy: str):
    if facade == "sb3":
        return ShmVecEnv(_fns(), envs_per_worker=PER_WORKER, batch_size=batch_size, on_worker_failure=policy)
    return ShmVectorEnv(
        _fns(),
        autoreset_mode=AutoresetMode.SAME_STEP,
        envs_per_worker=PER_WORKER,
        batch_size=batch_size,
        on_worker_failure=policy,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("facade", ["sb3", "gym"])
@pytest.mark.parametrize("batch_size", [None, 2], ids=["sync", "async"])
def test_random_kills_under_the_restart_policy_lose_no_episode(facade, batch_size, no_leaks):
    rng = np.random.default_rng(7)
    ledger = Ledger()
    venv = _make(facade, batch_size, "restart")
    per_call = batch_size or N_ENVS
    kill_at = set(rng.choice(np.arange(20, ENV_STEPS // per_call - 20), size=KILLS, replace=False).tolist())
    actions = np.zeros(per_call, dtype=np.int64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        if batch_size is None:
            venv.reset() if facade == "sb3" else venv.reset(seed=0)
        else:
            venv.async_reset() if facade == "sb3" else venv.async_reset(seed=0)
            ids, reset = None, set(range(N_ENVS))  # each env's first recv brings its reset, not a step
        calls = ENV_STEPS // per_call
        call = -1
        # at least ``calls``; then on until every kill happened and came back (a kill waits until
        # the one before it came back flagged, so the last may fall due late): a bound, not a sleep
        while call < calls - 1 or not (sum(ledger.kills) == KILLS * PER_WORKER and ledger.settled()):
            call += 1
            assert call < 4 * calls, f"the kills' envs did not all come back: {ledger.flagged} of {ledger.kills}"
            # a kill's envs come back flagged before the next kill (a late one waits its turn)
            due = sum(1 for at in kill_at if at <= call) > sum(ledger.kills) // PER_WORKER
            if due and ledger.settled():
                _kill(venv, int(rng.integers(N_ENVS // PER_WORKER)), ledger)
            if batch_size is None:
                obs, first, *rest = venv.step(np.zeros(N_ENVS, dtype=np.int64))
                ends = _ends(facade, rest[0], rest[1] if facade == "gym" else None, rest[-1], N_ENVS)
                env_ids = range(N_ENVS)
            else:
                if ids is not None:
                    venv.send(actions[: len(ids)], ids)
                obs, rewards, terms, truncs, infos, ids = venv.recv()
                ends = _ends(facade, terms, truncs, infos, len(ids))
                env_ids = ids.tolist()
                if reset:
                    kept = [k for k, env in enumerate(env_ids) if env not in reset]
                    reset.difference_update(env_ids)
                    env_ids, ends = [env_ids[k] for k in kept], [ends[k] for k in kept]
            for env, (ended, restarted) in zip(env_ids, ends):
                ledger.record(env, ended, restarted)
    restarts = [w for w in caught if issubclass(w.category, RuntimeWarning) and "restarting it" in str(w.message)]
    venv.close()
    assert sum(ledger.kills) == KILLS * PER_WORKER, "every scheduled kill must have happened"
    assert ledger.flagged == ledger.kills, f"restart truncations {ledger.flagged} != kills {ledger.kills}"
    assert len(restarts) == KILLS
    assert ledger.natural > 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("facade", ["sb3", "gym"])
def test_every_kill_under_the_default_policy_names_its_envs(facade, no_leaks):
    rng = np.random.default_rng(3)
    for worker in rng.integers(N_ENVS // PER_WORKER, size=2).tolist():
        venv = _make(facade, None, "raise")
        venv.reset() if facade == "sb3" else venv.reset(seed=0)
        for _ in range(int(rng.integers(1, 30))):
            venv.step(np.zeros(N_ENVS, dtype=np.int64))
        os.kill(venv.processes[worker].pid, signal.SIGKILL)
        first, last = worker * PER_WORKER, (worker + 1) * PER_WORKER - 1
        with pytest.raises(WorkerDiedError, match=rf"envs {first}-{last}\) was killed by SIGKILL") as raised:
            for _ in range(100):  # the death surfaces within a step; a bound, not a sleep
                venv.step(np.zeros(N_ENVS, dtype=np.int64))
        assert raised.value.env_indices == list(range(first, last + 1))
        venv.close()
