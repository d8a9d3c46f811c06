"""ShmVecEnv is bit-identical to the in-process reference, for every space, split and start method."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ACTION_SPACES, SPACES, assert_tree_equal, make_space_env, sample_actions

from vecshm import DummyVecEnv, ShmVecEnv


def run_lockstep(venv, reference, action_space, steps: int, seed: int = 3) -> int:
    """Step both vec envs with the same seeds and actions; compare everything; return episodes seen."""
    rng = np.random.default_rng(seed)
    venv.seed(seed)
    reference.seed(seed)
    assert_tree_equal(venv.reset(), reference.reset(), "reset obs")
    assert_tree_equal(list(venv.reset_infos), list(reference.reset_infos), "reset_infos")
    episodes = 0
    for t in range(steps):
        actions = sample_actions(action_space, venv.num_envs, rng)
        obs, rewards, dones, infos = venv.step(actions)
        ref_obs, ref_rewards, ref_dones, ref_infos = reference.step(actions)
        assert_tree_equal(obs, ref_obs, f"step {t} obs")
        assert_tree_equal(rewards, ref_rewards, f"step {t} rewards")
        assert_tree_equal(dones, ref_dones, f"step {t} dones")
        assert_tree_equal(list(infos), list(ref_infos), f"step {t} infos")
        for i in np.flatnonzero(dones):
            # SubprocVecEnv semantics: reset_infos holds the auto-reset's info for envs that just ended
            assert_tree_equal(venv.reset_infos[i], reference.reset_infos[i], f"step {t} reset_infos[{i}]")
        episodes += int(dones.sum())
    return episodes


@pytest.mark.parametrize("obs_key", sorted(SPACES))
@pytest.mark.parametrize("envs_per_worker", [1, 3])
def test_bit_identical_to_reference_for_every_space(obs_key, envs_per_worker, no_leaks):
    fns = [make_space_env(obs_key, tag=i) for i in range(6)]
    with ShmVecEnv(fns, envs_per_worker=envs_per_worker) as venv, DummyVecEnv(fns) as reference:
        episodes = run_lockstep(venv, reference, ACTION_SPACES["discrete"], steps=40)
    assert episodes >= 6, "the run must cover several auto-resets"


@pytest.mark.parametrize("act_key", sorted(ACTION_SPACES))
def test_every_action_space_reaches_the_env_intact(act_key):
    fns = [make_space_env("box_f32", act_key) for _ in range(4)]
    with ShmVecEnv(fns, envs_per_worker=2) as venv, DummyVecEnv(fns) as reference:
        run_lockstep(venv, reference, ACTION_SPACES[act_key], steps=25)


@pytest.mark.parametrize("start_method", ["fork", "forkserver", "spawn"])
def test_every_start_method_is_bit_identical(start_method, no_leaks):
    fns = [make_space_env("nested") for _ in range(4)]
    with ShmVecEnv(fns, start_method=start_method, envs_per_worker=2) as venv, DummyVecEnv(fns) as reference:
        run_lockstep(venv, reference, ACTION_SPACES["discrete"], steps=30)


def test_uneven_default_split_is_bit_identical():
    fns = [make_space_env("frame_u8") for _ in range(5)]
    with ShmVecEnv(fns) as venv, DummyVecEnv(fns) as reference:
        run_lockstep(venv, reference, ACTION_SPACES["discrete"], steps=30)


def test_terminal_observation_and_timelimit_flag_follow_sb3():
    fns = [make_space_env("box_f32", max_steps=5, big_info_every=0) for _ in range(2)]
    with ShmVecEnv(fns) as venv:
        venv.seed(0)
        venv.reset()
        saw_truncation = False
        for _ in range(30):
            obs, _, dones, infos = venv.step(np.zeros(2, dtype=np.int64))
            for i, info in enumerate(infos):
                assert "TimeLimit.truncated" in info
                assert ("terminal_observation" in info) == bool(dones[i])
                if dones[i]:
                    assert info["terminal_observation"].shape == (3,)
                    # the returned obs is the first of the next episode, not the terminal one
                    assert not np.array_equal(info["terminal_observation"], obs[i])
                    saw_truncation |= info["TimeLimit.truncated"]
        assert saw_truncation


def test_seed_and_options_apply_to_the_next_reset_only():
    fns = [make_space_env("box_f32") for _ in range(3)]
    with ShmVecEnv(fns) as venv:
        assert venv.seed(10) == [10, 11, 12]
        venv.set_options({"level": 2})
        venv.reset()
        assert [info["reset_seed"] for info in venv.reset_infos] == [10, 11, 12]
        assert venv.get_attr("last_options") == [{"level": 2}] * 3
        first = venv.reset()
        assert venv.reset_infos == [{}, {}, {}]
        assert venv.get_attr("last_options") == [None] * 3
        venv.set_options([{"a": i} for i in range(3)])
        venv.seed(10)
        again = venv.reset()
        assert venv.get_attr("last_options") == [{"a": 0}, {"a": 1}, {"a": 2}]
        assert not np.array_equal(first, again)


def test_copy_false_returns_views_that_the_next_step_overwrites():
    fns = [make_space_env("box_f32", big_info_every=0) for _ in range(2)]
    with ShmVecEnv(fns, copy=False) as views, ShmVecEnv(fns, copy=True) as copies:
        views.seed(0)
        copies.seed(0)
        a = views.reset()
        b = views.step(np.zeros(2, dtype=np.int64))[0]
        assert np.shares_memory(a, b)
        c = copies.reset()
        d = copies.step(np.zeros(2, dtype=np.int64))[0]
        assert not np.shares_memory(c, d)
        assert np.array_equal(b, d)


def test_reset_cancels_a_pending_step():
    fns = [make_space_env("box_f32") for _ in range(2)]
    with ShmVecEnv(fns) as venv, DummyVecEnv(fns) as reference:
        venv.seed(1)
        reference.seed(1)
        venv.reset()
        venv.step_async(np.zeros(2, dtype=np.int64))
        venv.seed(1)
        assert_tree_equal(venv.reset(), reference.reset())


@pytest.mark.timeout(300)
def test_one_process_per_env_oversubscribed_stays_bit_identical(no_leaks):
    """32 worker processes on a 2-core machine: no deadlock, no lost wake-up, same results."""
    fns = [make_space_env("box_f32", tag=i, big_info_every=0) for i in range(32)]
    with ShmVecEnv(fns, envs_per_worker=1) as venv, DummyVecEnv(fns) as reference:
        run_lockstep(venv, reference, ACTION_SPACES["discrete"], steps=200)
