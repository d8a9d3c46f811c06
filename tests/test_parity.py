"""ShmVecEnv is bit-identical to the peers' own classes, for every space, split and start method.

References vecshm did not write: SB3's ``DummyVecEnv`` where SB3 supports the space (flat Dict and
Tuple, array leaves), SB3's ``SubprocVecEnv`` for spaces it stacks with ``np.stack`` (Text, a
user's own Space), and Gymnasium's ``SyncVectorEnv`` in SAME_STEP mode (the same auto-reset rule
as SB3) for nested spaces and the other dynamic ones, which neither SB3 class can batch.
"""

from __future__ import annotations

import functools
from contextlib import closing
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest import ACTION_SPACES, SPACES, assert_tree_equal, make_space_env, sample_actions
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from lockstep import lockstep
from stable_baselines3.common.vec_env import DummyVecEnv as SB3DummyVecEnv
from stable_baselines3.common.vec_env import SubprocVecEnv

from vecshm import ShmVecEnv, ShmVectorEnv
from vecshm.shared.buffers import FINAL_IN_ROWS

NESTED_OR_DYNAMIC = ["nested"] + [key for key in SPACES if key.startswith("dyn_")]
STACKED_BY_SUBPROC = ["dyn_text", "dyn_custom"]
SB3_SPACES = [key for key in sorted(SPACES) if key not in NESTED_OR_DYNAMIC]


@pytest.mark.parametrize("obs_key", SB3_SPACES)
@pytest.mark.parametrize("envs_per_worker", [1, 2, 3])
def test_bit_identical_to_sb3_dummy_vec_env_for_every_space(obs_key, envs_per_worker, no_leaks):
    # 5 envs: envs_per_worker 2 and 3 give uneven workers (2+2+1, 3+2), as a user expects
    fns = [make_space_env(obs_key, tag=i) for i in range(5)]
    with ShmVecEnv(fns, envs_per_worker=envs_per_worker) as venv, closing(SB3DummyVecEnv(fns)) as reference:
        episodes = lockstep(venv, reference, 40, seed=3, action_space=ACTION_SPACES["discrete"])
    assert episodes >= 6, "the run must cover several auto-resets"


@pytest.mark.parametrize("obs_key", STACKED_BY_SUBPROC)
def test_text_and_custom_spaces_bit_identical_to_subproc_vec_env(obs_key, no_leaks):
    fns = [make_space_env(obs_key, tag=i) for i in range(3)]
    with ShmVecEnv(fns, envs_per_worker=2) as venv, closing(SubprocVecEnv(fns)) as reference:
        episodes = lockstep(venv, reference, 30, seed=3, action_space=ACTION_SPACES["discrete"], reset_infos="ended")
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
            assert_tree_equal(rewards, ref_rewards, f"step {t} rewards")  # Python floats: float64 in both
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
        lockstep(venv, reference, 25, seed=3, action_space=ACTION_SPACES[act_key])


@pytest.mark.parametrize("start_method", ["fork", "forkserver", "spawn"])
def test_every_start_method_is_bit_identical(start_method, no_leaks):
    fns = [make_space_env("dict", tag=i) for i in range(4)]
    with (
        ShmVecEnv(fns, start_method=start_method, envs_per_worker=2) as venv,
        closing(SB3DummyVecEnv(fns)) as reference,
    ):
        lockstep(venv, reference, 30, seed=3, action_space=ACTION_SPACES["discrete"])


def test_uneven_default_split_is_bit_identical():
    fns = [make_space_env("frame_u8") for _ in range(5)]
    with ShmVecEnv(fns) as venv, closing(SB3DummyVecEnv(fns)) as reference:
        lockstep(venv, reference, 30, seed=3, action_space=ACTION_SPACES["discrete"])


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


class FinalObsEnv(gym.Env):
    """Episodes of 3 steps of frame-sized observations, returned as ``kind`` says: exactly the
    space's array (``exact``), float64 for its float32 (``float64``), or in Fortran order."""

    observation_space = spaces.Box(0, 1000, (160, 210), np.float32)  # larger than an info arena row
    action_space = spaces.Discrete(2)

    def __init__(self, kind: str) -> None:
        self.kind, self.t = kind, 0

    def _obs(self) -> np.ndarray:
        obs = np.arange(160 * 210, dtype=np.float64).reshape(160, 210) % 997 + self.t
        if self.kind == "float64":
            return obs
        return np.asfortranarray(obs, np.float32) if self.kind == "fortran" else obs.astype(np.float32)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, False, self.t >= 3, {}


@pytest.mark.parametrize("kind", ["exact", "float64", "fortran"])
def test_terminal_observations_come_as_subproc_vec_env_hands_them_on(kind, no_leaks):
    """The final observation reaches ``terminal_observation`` as the env returned it (its dtype
    and memory order), as SubprocVecEnv's pickling hands it on; one array exactly of the space's
    shape and dtype travels in the segment's final rows, not pickled through the worker's socket."""
    fns = [functools.partial(FinalObsEnv, kind) for _ in range(3)]
    with ShmVecEnv(fns, envs_per_worker=2) as venv, closing(SubprocVecEnv(fns)) as reference:
        venv.reset(), reference.reset()
        for _ in range(3):
            _, _, dones, infos = venv.step(np.zeros(3, dtype=np.int64))
            _, _, ref_dones, ref_infos = reference.step(np.zeros(3, dtype=np.int64))
        assert dones.all() and ref_dones.all()
        in_rows = venv.segment.final_obs_blob_len == FINAL_IN_ROWS
        assert in_rows.all() if kind == "exact" else not in_rows.any()
        for info, ref_info in zip(infos, ref_infos):
            final, expected = info["terminal_observation"], ref_info["terminal_observation"]
            assert_tree_equal(final, expected, "terminal observation")
            assert (final.dtype, final.flags.c_contiguous, final.flags.f_contiguous) == (
                expected.dtype,
                expected.flags.c_contiguous,
                expected.flags.f_contiguous,
            )
            assert final.flags.writeable and not np.may_share_memory(final, venv.segment.mapping)  # a copy


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


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_one_process_per_env_oversubscribed_stays_bit_identical(no_leaks):
    """32 worker processes on a 2-core machine: no deadlock, no lost wake-up, same results."""
    fns = [make_space_env("box_f32", tag=i, big_info_every=0) for i in range(32)]
    with ShmVecEnv(fns, envs_per_worker=1) as venv, closing(SB3DummyVecEnv(fns)) as reference:
        lockstep(venv, reference, 200, seed=3, action_space=ACTION_SPACES["discrete"])


# Reward types an env may return, and the dtype np.stack (SubprocVecEnv) gives each: Python float
# float64, Python int int64, bool bool, NumPy scalars their own, a 0-d array its dtype.
REWARD_KINDS = {
    "float": float,
    "float32": np.float32,
    "int": int,
    "bool": bool,
    "float64": np.float64,
    "int32": np.int32,
    "uint8": np.uint8,
    "float16": np.float16,
    "array_f32": lambda value: np.array(value, dtype=np.float32),
}
EPISODE_STEPS = 5


def typed_reward(kinds: list[str], t: int) -> Any:
    """The reward at step ``t`` of an env cycling through ``kinds`` (one kind: always that type)."""
    kind = kinds[t % len(kinds)]
    value = (t * 3) % 11  # small non-negative ints: every kind holds them exactly
    return REWARD_KINDS[kind](value + 0.5 if kind.startswith(("float", "array")) else value)


class TypedRewardEnv(gym.Env):
    """An env whose rewards have the types of ``kinds``, in turn, step by step."""

    observation_space = spaces.Box(0, 1, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, kinds: list[str]) -> None:
        self.kinds = kinds
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), typed_reward(self.kinds, self.t), self.t == EPISODE_STEPS, False, {}


MIXED_REWARDS = [["float"], ["float32"], ["int"], ["array_f32"], ["float", "int", "float32", "bool"]]


@pytest.mark.parametrize(
    "kinds", [[[kind]] * 3 for kind in REWARD_KINDS] + [MIXED_REWARDS], ids=[*REWARD_KINDS, "mixed"]
)
def test_rewards_come_in_the_dtype_subproc_vec_env_stacks_them_in(kinds, no_leaks):
    """A Python float's rewards are float64, ``np.float32``'s float32, a Python int's int64; envs of
    different types give their common type, and an env whose type changes changes it, step by step."""
    fns = [functools.partial(TypedRewardEnv, env_kinds) for env_kinds in kinds]
    with ShmVecEnv(fns, envs_per_worker=2) as venv, closing(SubprocVecEnv(fns)) as reference:
        for run in range(2):  # and again after a reset
            venv.reset(), reference.reset()
            for t in range(2 * EPISODE_STEPS + 1):
                actions = np.zeros(len(fns), dtype=np.int64)
                assert_tree_equal(venv.step(actions)[1], reference.step(actions)[1], f"run {run} step {t} rewards")


def test_async_batches_have_the_dtype_np_stack_gives_their_envs_rewards(no_leaks):
    """As for a step: ``np.stack`` of the batch's envs' rewards; an env's reset counts as a float 0."""
    fns = [functools.partial(TypedRewardEnv, env_kinds) for env_kinds in MIXED_REWARDS]
    with ShmVecEnv(fns, envs_per_worker=2, batch_size=3) as venv:
        venv.async_reset()
        resetting, steps = set(range(len(fns))), [0] * len(fns)  # steps: sent to each env so far
        for _ in range(40):
            _, rewards, _, _, _, env_ids = venv.recv()
            expected = [
                0.0 if i in resetting else typed_reward(MIXED_REWARDS[i], (steps[i] - 1) % EPISODE_STEPS + 1)
                for i in env_ids
            ]
            assert_tree_equal(rewards, np.stack(expected), f"rewards of envs {env_ids}")
            resetting -= set(env_ids.tolist())
            for i in env_ids:
                steps[i] += 1
            venv.send(np.zeros(len(env_ids), dtype=np.int64), env_ids)
        venv.recv()


class SloppyDtypeEnv(gym.Env):
    """A ``float32`` Box env that returns float64 arrays on reset and lists on step (SB3's env
    checker warns about both)."""

    observation_space = spaces.Box(-1, 1, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, 3), {}

    def step(self, action):
        return self.np_random.uniform(-1, 1, 3).tolist(), 0.0, bool(action), False, {}


def test_observations_that_break_their_space_s_dtype_come_cast_as_dummy_vec_env_casts_them(no_leaks):
    """Shared memory is laid out per space: float64 values of a float32 space arrive cast, as from
    SB3's DummyVecEnv and Gymnasium's vector envs (SubprocVecEnv stacks them as float64)."""
    with closing(ShmVecEnv([SloppyDtypeEnv] * 3, envs_per_worker=2)) as venv:
        reference = SB3DummyVecEnv([SloppyDtypeEnv] * 3)
        lockstep(venv, reference, 30, seed=3, action_space=venv.action_space)
    with closing(ShmVectorEnv([SloppyDtypeEnv] * 3)) as envs, closing(SyncVectorEnv([SloppyDtypeEnv] * 3)) as ref:
        assert_tree_equal(envs.reset(seed=1), ref.reset(seed=1), "reset")
        for t in range(30):
            assert_tree_equal(envs.step(np.full(3, t % 2)), ref.step(np.full(3, t % 2)), f"step {t}")
