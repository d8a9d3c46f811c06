"""Async batches through the ring (:mod:`vecshm.parent.handback.ring`): rows lent in finishing order, every env's
results bit-identical to a synchronous run, lent batches never overwritten while held, and the
usual clear errors when a worker fails mid-batch."""

from __future__ import annotations

import gc
import time
from collections import defaultdict

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
from faulty_envs import faulty, healthy
from gymnasium.vector import SyncVectorEnv
from gymnasium.vector.utils import iterate
from stable_baselines3.common.vec_env import DummyVecEnv as SB3DummyVecEnv

from vecshm import ClosedError, ShmVecEnv, ShmVectorEnv, WorkerDiedError, WorkerError
from vecshm.parent.core.batching import AsyncBatches
from vecshm.parent.core.engine import Engine
from vecshm.parent.engine_options import EngineOptions
from vecshm.shared.protocol import AutoReset

N_ENVS = 6
STEPS = 90
# every space whose observations have a fixed part (a ring needs one); dyn_mixed has both kinds
RING_SPACES = [key for key in SPACES if not key.startswith("dyn_")] + ["dyn_mixed"]


# Use the ring however small the observations (lend_min_bytes=0: every batch lent).
RING_ALWAYS = {"lend_min_bytes": 0}


def action(env: int, k: int) -> int:
    """The action env ``env`` gets on its ``k``-th step, in every run."""
    return (env * 7 + k * 3) % 3


def arrays_of(obs):
    if isinstance(obs, dict):
        return [a for value in obs.values() for a in arrays_of(value)]
    if isinstance(obs, tuple):
        return [a for value in obs for a in arrays_of(value)]
    return [obs] if isinstance(obs, np.ndarray) and obs.dtype != object else []


def is_lent(obs) -> bool:
    """Whether every fixed leaf views shared memory (a copy owns its data)."""
    return all(not a.flags.owndata for a in arrays_of(obs))


def batch_plan(key: str) -> tuple[int, int]:
    """(envs_per_worker, batch_size) for one space: drawn per space, the same in every run. Whole
    units, or batches that end inside a worker's unit. At most one unit is split at a time, so at
    most ``per_worker - 1`` envs sent back wait for a sibling still in a batch: up to
    ``N_ENVS - per_worker + 1`` envs are always out, and every batch is full."""
    rng = np.random.default_rng(sum(map(ord, key)))
    per_worker = int(rng.choice([1, 2, 3]))
    return per_worker, int(rng.integers(1, min(N_ENVS - 1, N_ENVS - per_worker + 1) + 1))


def space_fns(key: str):
    return [make_space_env(key, tag=i, jitter_us=300.0) for i in range(N_ENVS)]


# one plan per space, and batches ending inside a unit where observations are partly piped
RING_PLANS = [(key, batch_plan(key)) for key in RING_SPACES] + [("dyn_mixed", (2, 3)), ("dyn_mixed", (3, 4))]
# What the portable transport changes (the segment, the wake-ups) is the same for every space: it
# runs the plans of a Dict (several leaves in one unit) and of the mixed space (leaves piped beside
# shared ones). The layout itself is checked for every space once, on the native transport.
PORTABLE = {"dict", "dyn_mixed"}


@pytest.mark.parametrize(
    ("key", "plan"),
    [
        pytest.param(key, plan, id=f"{key}-{plan[0]}x{plan[1]}", marks=pytest.mark.transport if key in PORTABLE else ())
        for key, plan in RING_PLANS
    ],
)
def test_gymnasium_ring_batches_match_a_synchronous_run(key, plan, no_leaks):
    per_worker, batch = plan
    histories = defaultdict(list)  # every batch stays held: the first ones lent, later ones copied
    lent = 0
    with ShmVectorEnv(
        space_fns(key),
        batch_size=batch,
        envs_per_worker=per_worker,
        shared_memory=shared_memory_for(key),
        **RING_ALWAYS,
    ) as envs:
        assert envs.runtime.ring
        envs.async_reset(seed=0)
        for _ in rounds_until_every_env_stepped(histories, N_ENVS, STEPS):
            obs, rewards, terminations, truncations, _, env_ids = envs.recv()
            assert len(env_ids) == batch
            lent += is_lent(obs)
            rows = list(iterate(envs.observation_space, obs))  # views: lent rows stay held
            for k, i in enumerate(env_ids.tolist()):
                histories[i].append((rows[k], rewards[k], terminations[k], truncations[k]))
            envs.send(np.array([action(i, len(histories[i]) - 1) for i in env_ids.tolist()]), env_ids)
        envs.recv()
    assert lent >= 1, "no batch was lent"
    assert all(len(h) >= 5 for h in histories.values()), "every env must have been stepped"
    assert_histories_match_a_sync_run(space_fns(key), histories, action)


@pytest.mark.transport
@pytest.mark.parametrize(("per_worker", "batch"), [(2, 3), (3, 2), (3, 4)])
def test_batches_ending_inside_a_unit_dropped_at_once_match_a_synchronous_run(per_worker, batch, no_leaks):
    """Each lent batch is dropped before the next ``recv``: a unit whose other rows still wait for
    the next batch must not go back to the workers with it (two workers would then claim it)."""
    histories = defaultdict(list)
    with ShmVectorEnv(space_fns("box_f64_2d"), batch_size=batch, envs_per_worker=per_worker, **RING_ALWAYS) as envs:
        assert envs.runtime.ring
        envs.async_reset(seed=0)
        lent = 0
        for _ in range(STEPS):
            obs, rewards, terminations, truncations, _, env_ids = envs.recv()
            lent += is_lent(obs)
            for k, i in enumerate(env_ids.tolist()):
                histories[i].append((obs[k].copy(), rewards[k], terminations[k], truncations[k]))
            del obs  # the last reference: the batch's units go back now, but not one whose rows wait
            envs.send(np.array([action(i, len(histories[i]) - 1) for i in env_ids.tolist()]), env_ids)
        assert lent >= STEPS // 2, (
            "with every batch dropped, most are lent (a batch that wraps around the ring is copied)"
        )
    reference = SyncVectorEnv(space_fns("box_f64_2d"))
    obs, _ = reference.reset(seed=0)
    expected = {i: [(obs[i], 0.0, False, False)] for i in range(N_ENVS)}
    for k in range(max(len(h) for h in histories.values())):
        obs, rewards, terminations, truncations, _ = reference.step(np.array([action(i, k) for i in range(N_ENVS)]))
        for i in range(N_ENVS):
            expected[i].append((obs[i], rewards[i], terminations[i], truncations[i]))
    reference.close()
    for i, history in histories.items():
        for t, (got, want) in enumerate(zip(history, expected[i])):
            assert np.array_equal(got[0], want[0]), f"env {i} step {t} obs"
            assert got[1:] == pytest.approx(want[1:], abs=0), f"env {i} step {t}"


@pytest.mark.transport
def test_sb3_ring_batches_match_a_synchronous_run_infos_included(no_leaks):
    """Frames large enough for the ring by default; terminal observations and piped infos too."""
    fns = [make_space_env("frame_u8", tag=i, jitter_us=300.0) for i in range(N_ENVS)]
    histories = defaultdict(list)
    with ShmVecEnv(fns, batch_size=2, envs_per_worker=1) as venv:
        assert venv.runtime.ring
        venv.seed(4)
        venv.async_reset()
        for _ in range(STEPS):
            obs, rewards, terminated, truncated, infos, env_ids = venv.recv()
            for k, i in enumerate(env_ids.tolist()):
                histories[i].append((obs[k], as_dummy_rewards(rewards[k]), terminated[k] | truncated[k], infos[k]))
            venv.send(np.array([action(i, len(histories[i]) - 1) for i in env_ids.tolist()]), env_ids)
        venv.recv()
    reference = SB3DummyVecEnv(fns)
    reference.seed(4)
    obs = reference.reset()
    expected = {i: [(obs[i], np.float32(0.0), np.False_, {})] for i in range(N_ENVS)}
    for k in range(max(len(h) for h in histories.values())):
        obs, rewards, dones, infos = reference.step(np.array([action(i, k) for i in range(N_ENVS)]))
        for i in range(N_ENVS):
            expected[i].append((obs[i], rewards[i], dones[i], infos[i]))
    reference.close()
    for i, history in histories.items():
        assert_tree_equal([h[:3] for h in history], [e[:3] for e in expected[i][: len(history)]], f"env {i}")
        # a reset's infos differ by facade: compare the steps' infos only
        assert_tree_equal([h[3] for h in history[1:]], [e[3] for e in expected[i][1 : len(history)]], f"env {i} infos")


@pytest.mark.transport
def test_a_batch_of_several_workers_comes_back_to_send_as_checked(no_leaks):
    """``recv`` remembers the multi-worker batches it returns as checked (they come in too many
    orders for the cache of checked lists); what it remembers is what the check would find."""
    fns = [make_space_env("box_f32", tag=i, jitter_us=300.0) for i in range(8)]  # workers finish in varying order
    engine = Engine(fns, EngineOptions(AutoReset.NEXT_STEP, envs_per_worker=2, async_batch=4, **RING_ALWAYS))
    try:
        batches = AsyncBatches(engine, 4)
        batches.reset([{"seed": 1 + i, "options": None} for i in range(8)])
        for _ in range(8):
            ids = np.asarray(batches.recv().env_ids, dtype=np.int64)
            remembered = batches.remembered(ids)
            checked = batches.check_ids(ids)
            assert remembered is not None
            assert [a.tolist() for a in remembered[:2]] == [a.tolist() for a in checked[:2]]
            assert remembered[2] is checked[2] is True
            assert not remembered[0].flags.writeable and not remembered[1].flags.writeable
            batches.send(np.zeros(4, dtype=np.int64), ids)
        while batches.active:
            batches.recv()
    finally:
        engine.close()


@pytest.mark.transport
def test_held_batches_stay_intact_and_units_come_back_when_dropped(no_leaks):
    with ShmVectorEnv(space_fns("box_f64_2d"), batch_size=2, envs_per_worker=1, **RING_ALWAYS) as envs:
        envs.async_reset(seed=0)
        held, copies = [], []
        for _ in range(40):  # hold every batch: past the ring's lending budget, batches are copies
            obs, *_, env_ids = envs.recv()
            (held if is_lent(obs) else copies).append((obs, obs.copy()))
            envs.send(np.zeros(2, dtype=np.int64), env_ids)
        assert held and copies, "some batches must be lent, and those past the budget copied"
        for obs, snapshot in held + copies:
            assert obs.tobytes() == snapshot.tobytes(), "a held batch was overwritten"
        held.clear()
        copies.clear()
        gc.collect()
        obs, *_, env_ids = envs.recv()
        assert is_lent(obs), "dropped batches must free their units for lending again"
        envs.send(np.zeros(2, dtype=np.int64), env_ids)
        kept = envs.recv()[0]
        snapshot = kept.copy()
    # after close() the lent batch stays readable: it keeps the mapping alive
    assert kept.tobytes() == snapshot.tobytes()
    del kept


@pytest.mark.transport
def test_worker_killed_mid_batch_names_its_envs(no_leaks):
    fns = [faulty("sigkill", fail_at=3) if i == 3 else healthy for i in range(4)]
    venv = ShmVecEnv(fns, batch_size=2, envs_per_worker=1, **RING_ALWAYS)
    assert venv.runtime.ring
    venv.async_reset()
    # the live workers could fill every batch on their own: the death must still surface, soon
    deadline = time.monotonic() + 30
    with pytest.raises(WorkerDiedError, match=r"worker 3 \(env 3\).*SIGKILL"):
        while time.monotonic() < deadline:
            *_, env_ids = venv.recv()
            venv.send(np.zeros(2, dtype=np.int64), env_ids)
    venv.close()


@pytest.mark.transport
@pytest.mark.parametrize("fault, message", [("raise", "env 2 raised .*boom"), ("bad_shape", "env 2 raised .*fit")])
def test_env_errors_mid_batch_name_the_env(fault, message, no_leaks):
    fns = [faulty(fault, fail_at=3) if i == 2 else healthy for i in range(4)]
    with ShmVectorEnv(fns, batch_size=2, envs_per_worker=2, **RING_ALWAYS) as envs:
        envs.async_reset(seed=0)
        # Until env 2 fails, not a fixed number of rounds: which worker finishes first is the
        # scheduler's call, and on a loaded machine worker 0 can be returned many times running.
        # The deadline only bounds a hang.
        deadline = time.monotonic() + HANG_GUARD_SECONDS
        with pytest.raises(WorkerError, match=message):
            while time.monotonic() < deadline:
                *_, env_ids = envs.recv()
                envs.send(np.zeros(2, dtype=np.int64), env_ids)


@pytest.mark.transport
def test_an_env_error_comes_at_the_next_recv_though_other_workers_keep_finishing(no_leaks):
    """A failed worker claims no unit; a healthy one that finished too must not hide its error."""
    fns = [faulty("raise", fail_at=1) if i == 2 else healthy for i in range(4)]
    with ShmVectorEnv(fns, batch_size=2, envs_per_worker=2, **RING_ALWAYS) as envs:
        envs.async_reset(seed=0)
        for env_ids in [envs.recv()[-1], envs.recv()[-1]]:  # both workers' envs, then both sent again
            envs.send(np.zeros(2, dtype=np.int64), env_ids)
        buffers, deadline = envs.segment, time.monotonic() + 60
        while not (buffers.done_seq == buffers.cmd_seq).all():  # both published: the error, and a unit
            assert time.monotonic() < deadline, "the workers did not finish their step"
        with pytest.raises(WorkerError, match="env 2 raised .*boom"):
            envs.recv()


@pytest.mark.transport
def test_close_with_batches_in_flight_and_held(no_leaks):
    envs = ShmVectorEnv(space_fns("frame_u8"), batch_size=3, envs_per_worker=3, **RING_ALWAYS)
    envs.async_reset(seed=0)
    obs, *_, env_ids = envs.recv()
    envs.send(np.zeros(3, dtype=np.int64), env_ids)  # every env in flight, one batch held
    envs.close()
    with pytest.raises(ClosedError):
        envs.recv()
    assert obs.shape == (3, 210, 160, 3) and obs.sum() >= 0  # still readable
    del obs
    gc.collect()
