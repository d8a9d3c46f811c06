"""EnvPool-style send/recv: each env's results are bit-identical to a synchronous run."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from conftest import as_dummy_rewards, assert_tree_equal, make_space_env, rounds_until_every_env_stepped
from gymnasium.vector import SyncVectorEnv
from stable_baselines3.common.vec_env import DummyVecEnv as SB3DummyVecEnv

from vecshm import AlreadyPendingCallError, ShmVecEnv, ShmVectorEnv

N_ENVS = 6
STEPS = 120


def action(env: int, k: int) -> int:
    """The action env ``env`` gets on its ``k``-th step, in every run."""
    return (env * 7 + k * 3) % 3


def fns():
    return [make_space_env("box_f32", tag=i, jitter_us=300.0) for i in range(N_ENVS)]


def test_gymnasium_batches_match_a_synchronous_run(no_leaks):
    histories = defaultdict(list)
    with ShmVectorEnv(fns(), batch_size=2, envs_per_worker=1) as envs:
        envs.async_reset(seed=0)
        for _ in rounds_until_every_env_stepped(histories, N_ENVS, STEPS):
            obs, rewards, terminations, truncations, infos, env_ids = envs.recv()
            assert len(env_ids) == 2 and obs.shape == (2, 3) and len(infos.get("_t", [0, 0])) == 2
            for k, i in enumerate(env_ids):
                histories[int(i)].append((obs[k], rewards[k], terminations[k], truncations[k]))
            envs.send(np.array([action(i, len(histories[int(i)]) - 1) for i in env_ids]), env_ids)
        envs.recv()  # leave nothing in flight
    reference = SyncVectorEnv(fns())
    obs, _ = reference.reset(seed=0)
    expected = defaultdict(list)
    for i in range(N_ENVS):
        expected[i].append((obs[i], np.float64(0.0), np.False_, np.False_))  # a reset's row, as arrays give it
    for k in range(max(len(h) for h in histories.values())):
        obs, rewards, terminations, truncations, _ = reference.step(np.array([action(i, k) for i in range(N_ENVS)]))
        for i in range(N_ENVS):
            expected[i].append((obs[i], rewards[i], terminations[i], truncations[i]))
    assert all(len(h) >= 5 for h in histories.values()), "every env must have been stepped"
    for i, history in histories.items():
        for t, (got, want) in enumerate(zip(history, expected[i])):
            assert_tree_equal(got[0], want[0], f"env {i} step {t} obs")
            assert got[1:] == pytest.approx(want[1:], abs=0), f"env {i} step {t}"
    reference.close()


def test_sb3_batches_match_a_synchronous_run(no_leaks):
    histories = defaultdict(list)
    with ShmVecEnv(fns(), batch_size=3, envs_per_worker=3) as venv:
        venv.seed(4)
        venv.async_reset()
        for _ in range(STEPS // 2):
            obs, rewards, terminated, truncated, infos, env_ids = venv.recv()
            for k, i in enumerate(env_ids):
                terminal = infos[k].get("terminal_observation")
                histories[int(i)].append((obs[k], as_dummy_rewards(rewards[k]), terminated[k] | truncated[k], terminal))
            venv.send(np.array([action(i, len(histories[int(i)]) - 1) for i in env_ids]), env_ids)
        venv.recv()
    reference = SB3DummyVecEnv(fns())
    reference.seed(4)
    obs = reference.reset()
    expected = {i: [(obs[i], np.float32(0.0), np.False_, None)] for i in range(N_ENVS)}  # as arrays give it
    for k in range(max(len(h) for h in histories.values())):
        obs, rewards, dones, infos = reference.step(np.array([action(i, k) for i in range(N_ENVS)]))
        for i in range(N_ENVS):
            expected[i].append((obs[i], rewards[i], dones[i], infos[i].get("terminal_observation")))
    for i, history in histories.items():
        assert_tree_equal(history, expected[i][: len(history)], f"env {i}")


def test_batch_mode_errors():
    with ShmVectorEnv(fns(), batch_size=3, envs_per_worker=3) as envs:
        envs.async_reset(seed=1)
        ids = envs.recv()[-1]
        with pytest.raises(AlreadyPendingCallError):
            envs.step(np.zeros(N_ENVS, dtype=np.int64))
        other = np.setdiff1d(np.arange(N_ENVS), ids)
        with pytest.raises(AlreadyPendingCallError, match="not yet returned"):
            envs.send(np.zeros(3, dtype=np.int64), other)
        envs.send(np.zeros(3, dtype=np.int64))
        envs.recv()
        ids = envs.recv()[-1]
        # a checked id list is remembered: the same bytes in another shape are still refused
        with pytest.raises(ValueError, match="1-d"):
            envs.send(np.zeros((1, 3), dtype=np.int64), ids.reshape(1, 3))
        envs.send(np.zeros(3, dtype=np.int64), ids.tolist())
        assert envs.recv()[-1].tolist() == ids.tolist()
        envs.reset(seed=1)  # synchronous use again once nothing is in flight
