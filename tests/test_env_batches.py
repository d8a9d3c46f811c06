"""Async batches at env granularity: any ``batch_size`` (not only whole workers, not only divisors
of ``num_envs``), sends of any envs the caller holds, and every env's results, infos included,
bit-identical to Gymnasium's ``SyncVectorEnv`` and SB3's ``DummyVecEnv``."""

from __future__ import annotations

import os
import signal
import time
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from conftest import (
    HANG_GUARD_SECONDS,
    SPACES,
    as_dummy_rewards,
    assert_histories_match_a_sync_run,
    assert_tree_equal,
    make_space_env,
    rounds_until_every_env_stepped,
    shared_memory_for,
)
from faulty_envs import dies_writing_frames, faulty, healthy
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import iterate
from stable_baselines3.common.vec_env import DummyVecEnv as SB3DummyVecEnv

from vecshm import (
    AlreadyPendingCallError,
    ClosedError,
    NoAsyncCallError,
    ShmVecEnv,
    ShmVectorEnv,
    StepTimeoutError,
    WorkerDiedError,
    WorkerError,
)

N_ENVS = 7  # with 2 or 3 envs per worker, the last worker hosts fewer
STEPS = 80


def action(env: int, k: int) -> int:
    """The action env ``env`` gets on its ``k``-th step, in every run."""
    return (env * 7 + k * 3) % 3


def batch_plan(key: str) -> tuple[int, int, int]:
    """(envs_per_worker, batch_size, seed of the send splits) for one space, the same in every run;
    the batch size is not a multiple of envs_per_worker where it can be."""
    rng = np.random.default_rng(sum(map(ord, key)) + 1)
    per_worker = int(rng.choice([1, 2, 3]))
    sizes = [b for b in range(1, N_ENVS) if per_worker == 1 or b % per_worker]
    return per_worker, int(rng.choice(sizes)), int(rng.integers(1 << 16))


def space_fns(key: str, n: int = N_ENVS):
    return [make_space_env(key, tag=i, jitter_us=300.0) for i in range(n)]


def infos_per_env(infos: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """Gymnasium's batched infos (values and ``_key`` masks) back into one dict per env."""
    out: list[dict[str, Any]] = [{} for _ in range(count)]
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = infos[f"_{key}"]
        nested = infos_per_env(value, count) if isinstance(value, dict) else None
        for k in np.flatnonzero(mask):
            out[k][key] = nested[k] if nested is not None else value[k]
    return out


def send_in_parts(envs: Any, env_ids: np.ndarray, histories: dict, rng: np.random.Generator) -> None:
    """Send the batch back in one to three parts, in a shuffled order: each env its next action."""
    order = rng.permutation(len(env_ids))
    count = min(len(env_ids) - 1, int(rng.integers(0, 3)))
    cuts = np.sort(rng.choice(np.arange(1, len(env_ids)), size=count, replace=False))
    for part in np.split(env_ids[order], cuts):
        envs.send(np.array([action(i, len(histories[i]) - 1) for i in part.tolist()]), part)


@pytest.mark.parametrize("key", list(SPACES))
def test_any_batch_size_matches_a_synchronous_run(key, no_leaks):
    per_worker, batch, seed = batch_plan(key)
    rng = np.random.default_rng(seed)
    histories: dict[int, list] = defaultdict(list)
    with ShmVectorEnv(
        space_fns(key), batch_size=batch, envs_per_worker=per_worker, shared_memory=shared_memory_for(key)
    ) as envs:
        envs.async_reset(seed=0)
        for _ in rounds_until_every_env_stepped(histories, N_ENVS, STEPS):
            obs, rewards, terminations, truncations, infos, env_ids = envs.recv()
            assert len(env_ids) == batch
            per_env = infos_per_env(infos, len(env_ids))
            for k, (i, row) in enumerate(zip(env_ids.tolist(), iterate(envs.observation_space, obs))):
                histories[i].append((row, rewards[k], terminations[k], truncations[k], per_env[k]))
            send_in_parts(envs, env_ids, histories, rng)
        while envs.in_flight:
            envs.recv()
    reference = SyncVectorEnv(space_fns(key))
    obs, infos = reference.reset(seed=0)
    expected: dict[int, list] = defaultdict(list)
    for i, (row, info) in enumerate(zip(iterate(reference.observation_space, obs), infos_per_env(infos, N_ENVS))):
        expected[i].append((row, np.float64(0.0), np.False_, np.False_, info))
    for k in range(max(len(h) for h in histories.values())):
        obs, rewards, terminations, truncations, infos = reference.step(np.array([action(i, k) for i in range(N_ENVS)]))
        per_env = infos_per_env(infos, N_ENVS)
        for i, row in enumerate(iterate(reference.observation_space, obs)):
            expected[i].append((row, rewards[i], terminations[i], truncations[i], per_env[i]))
    reference.close()
    assert all(len(h) >= 5 for h in histories.values()), "every env must have been stepped"
    for i, history in histories.items():
        for t, (got, want) in enumerate(zip(history, expected[i])):
            assert_tree_equal(got[0], want[0], f"env {i} step {t} obs")
            assert got[1:4] == pytest.approx(want[1:4], abs=0), f"env {i} step {t}"
            assert_tree_equal(got[4], want[4], f"env {i} step {t} infos")


# seeds drawing the ring with fixed leaves (6, 11, 16, 24, 27), batches copied (0) and dynamic leaves (7)
@pytest.mark.parametrize("seed", [0, 6, 7, 11, 16, 24, 27])
def test_random_arrangements_batches_and_holds_match_a_synchronous_run(seed, no_leaks):
    """Drawn per seed: space, number of envs, envs per worker, batch size, ring or copy; each batch
    sent back in shuffled parts, some held for a few batches and dropped in any order. Every env
    still sees exactly its own actions. Lending a ring unit back to the workers while a held batch
    views it fails seeds 11, 16 and 27."""
    rng = np.random.default_rng(seed)
    key = list(SPACES)[rng.integers(len(SPACES))]
    n, per_worker = int(rng.integers(2, 13)), int(rng.integers(1, 5))
    batch, ring = int(rng.integers(1, n + 1)), bool(rng.integers(2))
    lending = {"lend_min_bytes": 0 if ring else 1 << 60}  # the ring, or copies
    histories: dict[int, list] = defaultdict(list)
    held: list[Any] = []
    with ShmVectorEnv(
        space_fns(key, n), batch_size=batch, envs_per_worker=per_worker, shared_memory=shared_memory_for(key), **lending
    ) as envs:
        envs.async_reset(seed=0)
        for _ in range(25):
            obs, rewards, terminations, truncations, _, env_ids = envs.recv()
            rows = list(iterate(envs.observation_space, obs))
            for k, i in enumerate(env_ids.tolist()):
                histories[i].append((rows[k], rewards[k], terminations[k], truncations[k]))
            if rng.random() < 0.5:
                held.append(obs)
            if held and (len(held) > 3 or rng.random() < 0.3):
                held.pop(int(rng.integers(len(held))))
            send_in_parts(envs, env_ids, histories, rng)
        while envs.in_flight:
            envs.recv()
    assert_histories_match_a_sync_run(
        space_fns(key, n), histories, action, f" ({key}, {n} envs, {per_worker} per worker)"
    )


@pytest.mark.parametrize(("ring", "batch"), [(False, 5), (True, 4), (True, 5)])
def test_sb3_any_batch_size_matches_dummy_vec_env_infos_included(ring, batch, no_leaks):
    """Terminal observations, ``TimeLimit.truncated`` and piped infos of envs a finished worker left
    for a later ``recv``; from the ring, batches of whole workers and batches that end inside a
    worker's unit, sent back in parts."""
    fns = [make_space_env("box_f32", tag=i, jitter_us=300.0) for i in range(6)]
    rng = np.random.default_rng(3)
    histories: dict[int, list] = defaultdict(list)
    with ShmVecEnv(fns, batch_size=batch, envs_per_worker=2, lend_min_bytes=0 if ring else 1 << 60) as venv:
        assert venv.runtime.ring == ring
        venv.seed(4)
        venv.async_reset()
        for _ in range(STEPS):
            obs, rewards, terminated, truncated, infos, env_ids = venv.recv()
            assert len(env_ids) == batch
            for k, i in enumerate(env_ids.tolist()):
                histories[i].append((obs[k], as_dummy_rewards(rewards[k]), terminated[k] | truncated[k], infos[k]))
            send_in_parts(venv, env_ids, histories, rng)
        while venv.in_flight:
            venv.recv()
    reference = SB3DummyVecEnv(fns)
    reference.seed(4)
    obs = reference.reset()
    expected = {i: [(obs[i], np.float32(0.0), np.False_, {})] for i in range(6)}
    for k in range(max(len(h) for h in histories.values())):
        obs, rewards, dones, infos = reference.step(np.array([action(i, k) for i in range(6)]))
        for i in range(6):
            expected[i].append((obs[i], rewards[i], dones[i], infos[i]))
    reference.close()
    assert any("big" in h[3] for history in histories.values() for h in history), "no piped info was returned"
    for i, history in histories.items():
        assert_tree_equal([h[:3] for h in history], [e[:3] for e in expected[i][: len(history)]], f"env {i}")
        assert_tree_equal([h[3] for h in history[1:]], [e[3] for e in expected[i][1 : len(history)]], f"env {i} infos")


def test_batch_size_is_checked():
    for bad in (0, N_ENVS + 1, 2.0, "2"):
        with pytest.raises(ValueError, match="batch_size"):
            ShmVectorEnv(space_fns("box_f32"), batch_size=bad)


def test_sends_are_checked_and_waiting_envs_are_named(no_leaks):
    with ShmVectorEnv(space_fns("box_f32", 6), batch_size=3, envs_per_worker=2) as envs:
        envs.async_reset(seed=1)
        ids = envs.recv()[-1]
        with pytest.raises(ValueError, match="more than once"):
            envs.send(np.zeros(2, dtype=np.int64), [ids[0], ids[0]])
        for outside in (6, -1):
            with pytest.raises(IndexError, match="out of range"):
                envs.send(np.zeros(1, dtype=np.int64), [outside])
        with pytest.raises(ValueError, match="1-d"):
            envs.send(np.zeros((1, 3), dtype=np.int64), ids.reshape(1, 3))
        others = np.setdiff1d(np.arange(6), ids)
        with pytest.raises(AlreadyPendingCallError, match="not yet returned"):
            envs.send(np.zeros(3, dtype=np.int64), others)
        with pytest.raises(ValueError, match="action"):  # a bad action changes nothing: the envs stay the caller's
            envs.send(np.zeros(2, dtype=np.int64), ids)
        envs.send(np.zeros(3, dtype=np.int64), ids)
        with pytest.raises(AlreadyPendingCallError, match="not yet returned"):
            envs.send(np.zeros(1, dtype=np.int64), ids[:1])
        while envs.in_flight:
            envs.recv()
        envs.step(np.zeros(6, dtype=np.int64))
        envs.send(np.zeros(1, dtype=np.int64), [0])  # with batches under num_envs, each env steps on its own
        assert envs.recv()[-1].tolist() == [0]
    # with whole batches (the default), a worker steps the envs it hosts together
    with ShmVectorEnv(space_fns("box_f32", 6), envs_per_worker=2) as envs:
        envs.reset(seed=1)
        envs.send(np.zeros(1, dtype=np.int64), [0])
        envs.step(np.zeros(6, dtype=np.int64))  # drops the actions still waiting for their workers' other envs
        envs.send(np.zeros(1, dtype=np.int64), [0])
        with pytest.raises(NoAsyncCallError, match=r"send actions for envs \[1\] too"):
            envs.recv()
        envs.send(np.zeros(1, dtype=np.int64), [1])
        assert sorted(envs.recv()[-1].tolist()) == [0, 1]


def test_fewer_envs_out_than_a_batch_come_back_as_a_smaller_batch(no_leaks):
    with ShmVecEnv(space_fns("box_f32", 6), batch_size=4, envs_per_worker=3) as venv:
        venv.async_reset()
        assert len(venv.recv()[-1]) == 4
        assert len(venv.recv()[-1]) == 2  # the rest of the second worker's envs
        venv.send(np.zeros(3, dtype=np.int64), [0, 1, 2])
        assert sorted(venv.recv()[-1].tolist()) == [0, 1, 2]
        with pytest.raises(NoAsyncCallError):
            venv.recv()


def test_worker_killed_while_its_envs_wait_names_them(no_leaks):
    """A worker dies mid-step while batches end inside other workers' envs: the death surfaces,
    naming the worker and its envs, even though the others keep filling batches."""
    fns = [faulty("sigkill", fail_at=3) if i == 4 else healthy for i in range(6)]
    venv = ShmVecEnv(fns, batch_size=3, envs_per_worker=2)
    venv.async_reset()
    deadline = time.monotonic() + 30
    with pytest.raises(WorkerDiedError, match=r"worker 2 \(envs 4-5\).*SIGKILL"):
        while time.monotonic() < deadline:
            *_, env_ids = venv.recv()
            venv.send(np.zeros(len(env_ids), dtype=np.int64), env_ids)
    venv.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cls", [ShmVecEnv, ShmVectorEnv])
def test_hung_env_is_named_alone_not_the_envs_queued_behind_it(cls, no_leaks):
    """With commands env by env (batches of 3 from processes of 2 envs), env 3's command waits
    behind hung env 2 in their process: the timeout names env 2, the cause, as when the process
    steps its envs as one command."""
    fns = [faulty("hang", fail_at=2) if i == 2 else healthy for i in range(4)]
    venv = cls(fns, batch_size=3, envs_per_worker=2, step_timeout=1.0)
    assert venv.plan.num_lanes == 4  # one worker per env: the arrangement this test is about
    venv.async_reset()
    end = time.monotonic() + 60  # a bound for the test, not a synchronisation
    with pytest.raises(StepTimeoutError, match=r"env\(s\) \[2\] did not finish") as info:
        while time.monotonic() < end:
            *_, env_ids = venv.recv()
            venv.send(np.zeros(len(env_ids), dtype=np.int64), env_ids)
    assert info.value.env_indices == [2]
    venv.close()


@pytest.mark.parametrize("fault, message", [("raise", "env 3 raised .*boom"), ("bad_shape", "env 3 raised .*fit")])
def test_env_errors_in_uneven_batches_name_the_env(fault, message, no_leaks):
    fns = [faulty(fault, fail_at=3) if i == 3 else healthy for i in range(6)]
    with ShmVectorEnv(fns, batch_size=4, envs_per_worker=3) as envs:
        envs.async_reset(seed=0)
        with pytest.raises(WorkerError, match=message):
            for _ in range(20):
                *_, env_ids = envs.recv()
                envs.send(np.zeros(len(env_ids), dtype=np.int64), env_ids)


def test_close_with_envs_waiting_finished_and_in_flight(no_leaks):
    envs = ShmVectorEnv(space_fns("frame_u8", 6), batch_size=4, envs_per_worker=3)
    envs.async_reset(seed=0)
    obs, *_, env_ids = envs.recv()  # one worker's envs and one of the other's: two are left finished
    envs.send(np.zeros(1, dtype=np.int64), env_ids[:1])  # in flight while its process's other envs wait
    envs.close()
    with pytest.raises(ClosedError):
        envs.recv()
    assert obs.shape == (4, 210, 160, 3)


# async batches under the restart policy keep the ring (lent frames) and env-by-env commands
RESTART_BATCHES = [
    pytest.param("box_f32", 2, id="copied-per_process"),
    pytest.param("box_f32", 3, id="copied-env_by_env"),
    pytest.param("frame_u8", 2, id="ring-per_process"),
    pytest.param("frame_u8", 3, id="ring-env_by_env"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("obs_key, batch_size", RESTART_BATCHES)
def test_restart_policy_under_async_batches(obs_key, batch_size, no_leaks):
    """A worker killed while its envs are in flight is rebuilt; its envs come back in a later batch
    with their episodes ended as truncated, on the last observation the caller saw."""
    fns = [make_space_env(obs_key, big_info_every=0, max_steps=1000) for _ in range(6)]
    venv = ShmVecEnv(fns, batch_size=batch_size, envs_per_worker=2, on_worker_failure="restart")
    assert venv.runtime.ring == (obs_key == "frame_u8")
    assert venv.plan.num_lanes == (6 if batch_size == 3 else 3)
    venv.async_reset()
    last = {}
    while venv.in_flight:
        obs, *_, env_ids = venv.recv()
        last.update(zip(env_ids.tolist(), obs))
    victim = venv.processes[1].pid
    os.kill(victim, signal.SIGKILL)
    venv.send(np.zeros(6, dtype=np.int64), np.arange(6))
    seen: dict[int, tuple] = {}
    with pytest.warns(RuntimeWarning, match=r"worker 1 \(envs 2-3\) was killed by SIGKILL.*restarting"):
        while len(seen) < 6:
            obs, rewards, terminated, truncated, infos, env_ids = venv.recv()
            for k, i in enumerate(env_ids.tolist()):
                seen[i] = (terminated[k], truncated[k], infos[k])
    for i in range(6):
        terminated, truncated, info = seen[i]
        if i in (2, 3):
            assert truncated and not terminated and info["TimeLimit.truncated"] and info["worker_restarted"]
            np.testing.assert_array_equal(info["terminal_observation"], last[i])
        else:
            assert not (terminated or truncated) and "worker_restarted" not in info
    assert venv.processes[1].pid != victim
    venv.send(np.zeros(6, dtype=np.int64), np.arange(6))
    for _ in range(10):  # the vec env goes on as before
        *_, env_ids = venv.recv()
        venv.send(np.zeros(len(env_ids), dtype=np.int64), env_ids)
    venv.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("obs_key, batch_size", RESTART_BATCHES)
def test_gymnasium_same_step_restart_under_async_batches(obs_key, batch_size, no_leaks):
    """ShmVectorEnv (SAME_STEP) as ShmVecEnv above: the killed worker's envs come back in a later
    batch, truncated, with ``final_obs`` the last observation seen and ``final_info`` flagging it."""
    fns = [make_space_env(obs_key, big_info_every=0, max_steps=1000) for _ in range(6)]
    mode = AutoresetMode.SAME_STEP
    envs = ShmVectorEnv(fns, autoreset_mode=mode, batch_size=batch_size, envs_per_worker=2, on_worker_failure="restart")
    assert envs.runtime.ring == (obs_key == "frame_u8")
    envs.async_reset(seed=0)
    last = {}
    while envs.in_flight:
        obs, *_, env_ids = envs.recv()
        last.update(zip(env_ids.tolist(), obs))
    victim = envs.processes[1].pid
    os.kill(victim, signal.SIGKILL)
    envs.send(np.zeros(6, dtype=np.int64), np.arange(6))
    seen: dict[int, tuple] = {}
    with pytest.warns(RuntimeWarning, match=r"worker 1 \(envs 2-3\) was killed by SIGKILL.*restarting"):
        while len(seen) < 6:
            obs, rewards, terminated, truncated, infos, env_ids = envs.recv()
            final = infos.get("final_info", {})
            for k, i in enumerate(env_ids.tolist()):
                restarted = bool(final.get("_worker_restarted", np.zeros(len(env_ids), bool))[k])
                final_obs = infos["final_obs"][k] if "_final_obs" in infos and infos["_final_obs"][k] else None
                seen[i] = (terminated[k], truncated[k], restarted, final_obs)
    for i in range(6):
        terminated, truncated, restarted, final_obs = seen[i]
        if i in (2, 3):
            assert truncated and not terminated and restarted
            np.testing.assert_array_equal(final_obs, last[i])
        else:
            assert not (terminated or truncated or restarted)
    assert envs.processes[1].pid != victim
    envs.send(np.zeros(6, dtype=np.int64), np.arange(6))
    for _ in range(10):  # the vec env goes on as before
        *_, env_ids = envs.recv()
        envs.send(np.zeros(len(env_ids), dtype=np.int64), env_ids)
    envs.close()


@pytest.mark.parametrize("cls", [ShmVecEnv, ShmVectorEnv])
def test_batches_spanning_processes_step_each_env_as_soon_as_it_is_sent(cls, no_leaks):
    """Batches that are not one process's envs: each env takes commands of its own, so an env sent
    back alone steps at once, while the other env of its process is still with the caller; where
    each batch is one process's envs, a process steps its envs together."""
    with cls(space_fns("box_f32", 8), batch_size=4, envs_per_worker=2) as venv:
        venv.async_reset()
        held = sorted(venv.recv()[-1].tolist() + venv.recv()[-1].tolist())
        assert held == list(range(8))
        venv.send(np.zeros(1, dtype=np.int64), [0])
        assert venv.recv()[-1].tolist() == [0]
    with cls(space_fns("box_f32", 8), batch_size=2, envs_per_worker=2) as venv:
        venv.async_reset()
        for _ in range(4):
            venv.recv()
        venv.send(np.zeros(1, dtype=np.int64), [0])
        with pytest.raises(NoAsyncCallError, match=r"send actions for envs \[1\] too"):
            venv.recv()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP], ids=["same_step", "next_step"])
def test_a_worker_dying_between_claiming_a_ring_unit_and_writing_it_is_restarted_in_ring_order(
    mode, tmp_path, no_leaks
):
    """Under the restart policy the ring stays on; a worker that dies after claiming a unit for its
    step but before writing it leaves that unit to its successor (else every later batch would
    wait for it), and the batches go on lent, in ring order, with its envs' episodes truncated."""
    marker = str(tmp_path / "died")
    fns = [dies_writing_frames()] * 2 + [dies_writing_frames(marker)] + [dies_writing_frames()]
    envs = ShmVectorEnv(fns, autoreset_mode=mode, batch_size=2, envs_per_worker=2, on_worker_failure="restart")
    assert envs.runtime.ring
    envs.async_reset(seed=0)
    flagged, steps = set(), 0
    deadline = time.monotonic() + HANG_GUARD_SECONDS  # (a loaded machine may leave worker 1 behind a while)
    with pytest.warns(RuntimeWarning, match=r"worker 1 \(envs 2-3\) was killed by SIGKILL.*restarting"):
        while steps < 80 or flagged != {2, 3}:
            assert time.monotonic() < deadline, f"envs {sorted(flagged)} flagged after {steps} env-steps"
            obs, rewards, terms, truncs, infos, env_ids = envs.recv()
            where = infos.get("final_info", {}) if mode is AutoresetMode.SAME_STEP else infos
            flags = where.get("_worker_restarted", np.zeros(len(env_ids), bool))
            flagged.update(env_ids[flags].tolist())
            assert (truncs[flags]).all() and not terms.any()
            steps += len(env_ids)
            envs.send(np.zeros(len(env_ids), dtype=np.int64), env_ids)
    assert os.path.exists(marker) and flagged == {2, 3}
    envs.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cls", [ShmVecEnv, ShmVectorEnv])
def test_a_worker_killed_while_others_fill_every_batch_is_restarted_and_its_envs_come_back(cls, no_leaks):
    """Under the restart policy, a dead worker is found by the periodic check even while the
    other workers fill every async batch (without it, its envs would never be waited for); its
    envs come back truncated, flagged, and stepping goes on."""
    fns = [make_space_env("box_f32", big_info_every=0, max_steps=1000) for _ in range(6)]
    kwargs = {} if cls is ShmVecEnv else {"autoreset_mode": AutoresetMode.SAME_STEP}
    envs = cls(fns, batch_size=2, envs_per_worker=2, on_worker_failure="restart", **kwargs)
    envs.async_reset()
    env_ids = envs.recv()[-1]
    flagged: set[int] = set()
    victim = envs.processes[1].pid
    os.kill(victim, signal.SIGKILL)
    with pytest.warns(RuntimeWarning, match=r"worker 1 \(envs 2-3\) was killed by SIGKILL.*restarting"):
        for _ in range(2000):  # a bound, not a sleep: the other workers alone could fill every batch
            envs.send(np.zeros(len(env_ids), dtype=np.int64), env_ids)
            *_, terminated, truncated, infos, env_ids = envs.recv()
            if cls is ShmVecEnv:
                flags = [info.get("worker_restarted", False) for info in infos]
            else:  # a lost episode's end says it in its final info, a redone reset (the kill may
                # come while the async reset is in flight) in its own info
                none = np.zeros(len(env_ids), bool)
                flags = infos.get("_worker_restarted", none) | infos.get("final_info", {}).get(
                    "_worker_restarted", none
                )
            flagged.update(env_ids[np.asarray(flags, dtype=bool)].tolist())
            if flagged == {2, 3}:
                break
    assert flagged == {2, 3} and envs.processes[1].pid != victim
    envs.close()
