"""ShmVecEnv is bit-identical to the peers' own classes, for every space, split and start method.

References vecshm did not write: SB3's ``DummyVecEnv`` where SB3 supports the space (flat Dict and
Tuple, array leaves), SB3's ``SubprocVecEnv`` for spaces it stacks with ``np.stack`` (Text, a
user's own Space), and Gymnasium's ``SyncVectorEnv`` in SAME_STEP mode (the same auto-reset rule
as SB3) for nested spaces and the other dynamic ones, which neither SB3 class can batch.
"""

from __future__ import annotations

from contextlib import closing
from typing import Any

import numpy as np
import pytest
from conftest import ACTION_SPACES, SPACES, assert_tree_equal, make_space_env, sample_actions
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from stable_baselines3.common.vec_env import DummyVecEnv as SB3DummyVecEnv
from stable_baselines3.common.vec_env import SubprocVecEnv

from vecshm import ShmVecEnv

NESTED_OR_DYNAMIC = ["nested"] + [key for key in SPACES if key.startswith("dyn_")]
STACKED_BY_SUBPROC = ["dyn_text", "dyn_custom"]
SB3_SPACES = [key for key in sorted(SPACES) if key not in NESTED_OR_DYNAMIC]


def per_env(space: spaces.Space, actions: Any, n: int) -> Any:
    """Dict/Tuple actions as SB3's DummyVecEnv indexes them: one value per env."""
    if isinstance(space, spaces.Dict):
        return [{key: value[i] for key, value in actions.items()} for i in range(n)]
    if isinstance(space, spaces.Tuple):
        return [tuple(value[i] for value in actions) for i in range(n)]
    return actions


def run_lockstep(
    venv, reference, action_space, steps: int, seed: int = 3, keeps_reset_infos: bool = True, float64_rewards=False
) -> int:
    """Step both vec envs with the same seeds and actions; compare everything; return episodes seen.

    ``keeps_reset_infos``: the reference keeps ``reset_infos[i]`` until env i's next reset (SB3's
    DummyVecEnv, and vecshm); SubprocVecEnv empties it on every step, so only ended envs compare.
    ``float64_rewards``: SubprocVecEnv stacks the env's float rewards as float64; vecshm returns
    float32 as DummyVecEnv does (docs/compatibility.md), so those compare after the cast.
    """
    rng = np.random.default_rng(seed)
    venv.seed(seed)
    reference.seed(seed)
    assert_tree_equal(venv.reset(), reference.reset(), "reset obs")
    assert_tree_equal(list(venv.reset_infos), list(reference.reset_infos), "reset_infos")
    episodes = 0
    for t in range(steps):
        actions = sample_actions(action_space, venv.num_envs, rng)
        obs, rewards, dones, infos = venv.step(actions)
        ref_obs, ref_rewards, ref_dones, ref_infos = reference.step(per_env(action_space, actions, venv.num_envs))
        assert_tree_equal(obs, ref_obs, f"step {t} obs")
        assert_tree_equal(
            rewards, ref_rewards.astype(np.float32) if float64_rewards else ref_rewards, f"step {t} rewards"
        )
        assert_tree_equal(dones, ref_dones, f"step {t} dones")
        assert_tree_equal(list(infos), list(ref_infos), f"step {t} infos")
        if keeps_reset_infos:
            assert_tree_equal(list(venv.reset_infos), list(reference.reset_infos), f"step {t} reset_infos")
        for i in np.flatnonzero(dones):
            assert_tree_equal(venv.reset_infos[i], reference.reset_infos[i], f"step {t} reset_infos[{i}]")
        episodes += int(dones.sum())
    return episodes


@pytest.mark.parametrize("obs_key", SB3_SPACES)
@pytest.mark.parametrize("envs_per_worker", [1, 2, 3])
def test_bit_identical_to_sb3_dummy_vec_env_for_every_space(obs_key, envs_per_worker, no_leaks):
    # 5 envs: envs_per_worker 2 and 3 give uneven workers (2+2+1, 3+2), as a user expects
    fns = [make_space_env(obs_key, tag=i) for i in range(5)]
    with ShmVecEnv(fns, envs_per_worker=envs_per_worker) as venv, closing(SB3DummyVecEnv(fns)) as reference:
        episodes = run_lockstep(venv, reference, ACTION_SPACES["discrete"], steps=40)
    assert episodes >= 6, "the run must cover several auto-resets"


@pytest.mark.parametrize("obs_key", STACKED_BY_SUBPROC)
def test_text_and_custom_spaces_bit_identical_to_subproc_vec_env(obs_key, no_leaks):
    fns = [make_space_env(obs_key, tag=i) for i in range(3)]
    with ShmVecEnv(fns, envs_per_worker=2) as venv, closing(SubprocVecEnv(fns)) as reference:
        episodes = run_lockstep(
            venv, reference, ACTION_SPACES["discrete"], steps=30, keeps_reset_infos=False, float64_rewards=True
        )
    assert episodes >= 3


def env_value(space: spaces.Space, batch: Any, i: int) -> Any:
    """Env ``i``'s value out of a batch, guided by the space (works for both facades' batch forms)."""
    if isinstance(space, spaces.Dict):
        return {key: env_value(sub, batch[key], i) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(env_value(sub, batch[k], i) for k, sub in enumerate(space.spaces))
    value = batch[i]
    # SB3's facade stacks strings as SubprocVecEnv does (an array of np.str_); Gymnasium keeps str
    return str(value) if isinstance(value, np.str_) else value


def final_value(space: spaces.Space, final_obs: Any, i: int) -> Any:
    """Env ``i``'s final observation out of Gymnasium's ``infos["final_obs"]`` (``_add_info`` nests dicts)."""
    if isinstance(space, spaces.Dict) and isinstance(final_obs, dict):
        return {key: final_value(sub, final_obs[key], i) for key, sub in space.spaces.items()}
    return final_obs[i]


@pytest.mark.parametrize("obs_key", NESTED_OR_DYNAMIC)
def test_nested_and_dynamic_spaces_match_sync_vector_env_same_step(obs_key, no_leaks):
    """Per env: observations, rewards, dones and the terminal observation equal Gymnasium's SAME_STEP run."""
    n = 4
    fns = [make_space_env(obs_key, tag=i) for i in range(n)]
    space = SPACES[obs_key]
    rng = np.random.default_rng(7)
    reference = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    with ShmVecEnv(fns, envs_per_worker=3) as venv, closing(reference) as ref:
        venv.seed(11)
        obs = venv.reset()
        ref_obs, _ = ref.reset(seed=11)
        episodes = 0
        for t in range(40):
            for i in range(n):
                assert_tree_equal(env_value(space, obs, i), env_value(space, ref_obs, i), f"step {t} env {i} obs")
            actions = sample_actions(ACTION_SPACES["discrete"], n, rng)
            obs, rewards, dones, infos = venv.step(actions)
            ref_obs, ref_rewards, terminated, truncated, ref_infos = ref.step(actions)
            assert_tree_equal(rewards, ref_rewards.astype(np.float32), f"step {t} rewards")
            assert_tree_equal(dones, terminated | truncated, f"step {t} dones")
            for i in np.flatnonzero(dones):
                final = final_value(space, ref_infos["final_obs"], i)
                assert_tree_equal(infos[i]["terminal_observation"], final, f"step {t} env {i} terminal obs")
            episodes += int(dones.sum())
    assert episodes >= 4


@pytest.mark.parametrize("act_key", sorted(ACTION_SPACES))
def test_every_action_space_reaches_the_env_intact(act_key):
    fns = [make_space_env("box_f32", act_key) for _ in range(4)]
    with ShmVecEnv(fns, envs_per_worker=2) as venv, closing(SB3DummyVecEnv(fns)) as reference:
        run_lockstep(venv, reference, ACTION_SPACES[act_key], steps=25)


@pytest.mark.parametrize("start_method", ["fork", "forkserver", "spawn"])
def test_every_start_method_is_bit_identical(start_method, no_leaks):
    fns = [make_space_env("dict", tag=i) for i in range(4)]
    with (
        ShmVecEnv(fns, start_method=start_method, envs_per_worker=2) as venv,
        closing(SB3DummyVecEnv(fns)) as reference,
    ):
        run_lockstep(venv, reference, ACTION_SPACES["discrete"], steps=30)


def test_uneven_default_split_is_bit_identical():
    fns = [make_space_env("frame_u8") for _ in range(5)]
    with ShmVecEnv(fns) as venv, closing(SB3DummyVecEnv(fns)) as reference:
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
    with ShmVecEnv(fns) as venv, closing(SB3DummyVecEnv(fns)) as reference:
        for vec_env in (venv, reference):
            assert vec_env.seed(10) == [10, 11, 12]
            vec_env.set_options({"level": 2})
            vec_env.reset()
        assert_tree_equal(venv.reset_infos, reference.reset_infos)
        assert venv.get_attr("last_options") == reference.get_attr("last_options") == [{"level": 2}] * 3
        assert_tree_equal(venv.reset(), reference.reset())
        assert_tree_equal(venv.reset_infos, reference.reset_infos)
        assert venv.get_attr("last_options") == reference.get_attr("last_options") == [None] * 3
        for vec_env in (venv, reference):
            vec_env.set_options([{"a": i} for i in range(3)])
            vec_env.seed(10)
        assert_tree_equal(venv.reset(), reference.reset())
        assert venv.get_attr("last_options") == reference.get_attr("last_options") == [{"a": i} for i in range(3)]


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
    with ShmVecEnv(fns) as venv, closing(SB3DummyVecEnv(fns)) as reference:
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
    with ShmVecEnv(fns, envs_per_worker=1) as venv, closing(SB3DummyVecEnv(fns)) as reference:
        run_lockstep(venv, reference, ACTION_SPACES["discrete"], steps=200)
