"""Stable-Baselines3 accepts ShmVecEnv as its own: algorithms, wrappers and isinstance checks."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import assert_tree_equal, make_space_env

sb3 = pytest.importorskip("stable_baselines3")
import torch  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.callbacks import EvalCallback  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv as SB3DummyVecEnv  # noqa: E402
from stable_baselines3.common.vec_env import (  # noqa: E402
    SubprocVecEnv,
    VecEnv,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
    VecTransposeImage,
)

import vecshm  # noqa: E402
from vecshm import DummyVecEnv, ShmVecEnv  # noqa: E402


def cartpole():
    return gym.make("CartPole-v1")


def small_frames():
    return gym.make("vecshm/Frames-v0", shape=(36, 36, 3), episode_length=20)


def test_sb3_sees_vecshm_classes_as_its_own():
    with ShmVecEnv([cartpole] * 2) as venv:
        assert isinstance(venv, VecEnv) and isinstance(venv, SubprocVecEnv)
    assert issubclass(DummyVecEnv, SB3DummyVecEnv)


def _train_ppo(vec_env_cls: type, normalize: type, folder: Path) -> tuple[torch.Tensor, np.ndarray, tuple]:
    """PPO with an evaluation callback, a VecNormalize saved and loaded, and training resumed on it:
    the trained weights, the callback's evaluations and a final evaluation (files go in ``folder``)."""
    env = normalize(make_vec_env("CartPole-v1", n_envs=4, seed=0, vec_env_cls=vec_env_cls))
    eval_env = make_vec_env("CartPole-v1", n_envs=2, seed=1, vec_env_cls=vec_env_cls)
    try:
        evaluated = normalize(eval_env, training=False, norm_reward=False)
        callback = EvalCallback(evaluated, eval_freq=32, n_eval_episodes=2, log_path=str(folder))
        model = PPO("MlpPolicy", env, n_steps=32, batch_size=64, n_epochs=2, seed=0, device="cpu")
        model.learn(384, callback=callback)
        assert model.get_env() is env
        env.save(f"{folder}/normalize.pkl")
        env.close()
        env = normalize.load(
            f"{folder}/normalize.pkl", make_vec_env("CartPole-v1", n_envs=4, seed=2, vec_env_cls=vec_env_cls)
        )
        model.set_env(env)
        model.learn(128, reset_num_timesteps=False)
        final = evaluate_policy(model, env, n_eval_episodes=3, deterministic=True)
        weights = torch.cat([p.detach().flatten() for p in model.policy.parameters()])
        return weights, np.load(f"{folder}/evaluations.npz")["results"], final
    finally:
        env.close()
        eval_env.close()


@pytest.mark.slow
def test_ppo_trains_to_the_same_weights_as_on_subproc_vec_env(tmp_path):
    """Training end to end (PPO, an EvalCallback, VecNormalize saved, loaded and trained on) is
    bit for bit what it is on SB3's own SubprocVecEnv and wrappers."""
    theirs = _train_ppo(SubprocVecEnv, VecNormalize, tmp_path / "sb3")
    ours = _train_ppo(ShmVecEnv, vecshm.VecNormalize, tmp_path / "vecshm")
    assert torch.equal(ours[0], theirs[0]), "the trained weights differ"
    np.testing.assert_array_equal(ours[1], theirs[1])
    assert ours[2] == theirs[2]


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
            assert_tree_equal(a[1], b[1])  # the rewards too, dtype included (the envs' Python floats: float64)
            assert np.array_equal(a[2], b[2])
            for x, y in zip(a[3], b[3]):
                assert_tree_equal(x, y)
    finally:
        ours.close()
        theirs.close()
