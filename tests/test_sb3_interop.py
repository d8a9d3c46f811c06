"""Stable-Baselines3 accepts ShmVecEnv as its own: algorithms, wrappers and isinstance checks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from conftest import assert_tree_equal, make_space_env

sb3 = pytest.importorskip("stable_baselines3")
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv as SB3DummyVecEnv  # noqa: E402
from stable_baselines3.common.vec_env import (  # noqa: E402
    SubprocVecEnv,
    VecEnv,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
    VecTransposeImage,
)

from vecshm import DummyVecEnv, ShmVecEnv  # noqa: E402


def cartpole():
    return gym.make("CartPole-v1")


def small_frames():
    return gym.make("vecshm/Frames-v0", shape=(36, 36, 3), episode_length=20)


def test_sb3_sees_vecshm_classes_as_its_own():
    with ShmVecEnv([cartpole] * 2) as venv:
        assert isinstance(venv, VecEnv) and isinstance(venv, SubprocVecEnv)
    assert issubclass(DummyVecEnv, SB3DummyVecEnv)


def test_ppo_mlp_learns_on_shm_vec_env():
    with ShmVecEnv([cartpole] * 4) as venv:
        model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0)
        model.learn(256)
        assert model.num_timesteps >= 256 and model.get_env() is venv


def test_ppo_cnn_learns_through_sb3_wrappers():
    venv = VecFrameStack(VecMonitor(ShmVecEnv([small_frames] * 2)), n_stack=2)
    venv = VecNormalize(venv, norm_obs=False)
    try:
        model = PPO("CnnPolicy", venv, n_steps=16, batch_size=32, n_epochs=1, seed=0)
        assert isinstance(model.get_env(), VecTransposeImage)  # SB3 added it on its own
        model.learn(64)
        assert model.num_timesteps >= 64
    finally:
        venv.close()


def test_sb3_wrappers_see_the_same_data_as_on_subproc_vec_env():
    fns = [make_space_env("frame_u8", big_info_every=0) for _ in range(3)]
    ours = VecTransposeImage(VecFrameStack(ShmVecEnv(fns), 2))
    theirs = VecTransposeImage(VecFrameStack(SubprocVecEnv(fns), 2))
    try:
        ours.seed(5)
        theirs.seed(5)
        assert_tree_equal(ours.reset(), theirs.reset())
        for _ in range(25):
            actions = np.array([0, 1, 2])
            a, b = ours.step(actions), theirs.step(actions)
            assert_tree_equal(a[0], b[0])
            # rewards are float32 as in SB3's DummyVecEnv; SubprocVecEnv stacks the env's float64s
            assert a[1].dtype == np.float32 and np.array_equal(a[1], b[1].astype(np.float32))
            assert np.array_equal(a[2], b[2])
            for x, y in zip(a[3], b[3]):
                assert_tree_equal(x, y)
    finally:
        ours.close()
        theirs.close()
