"""The rest of SB3's VecEnv API behaves as it does on SubprocVecEnv."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from conftest import make_space_env

from vecshm import DummyVecEnv, ShmVecEnv, VecEnv
from vecshm.vec_env.base import tile_images


@pytest.fixture(params=["shm", "dummy"])
def venv(request):
    fns = [make_space_env("box_f32", tag=i) for i in range(5)]
    env = ShmVecEnv(fns, envs_per_worker=None) if request.param == "shm" else DummyVecEnv(fns)
    env.reset()
    yield env
    env.close()


@pytest.mark.smoke
def test_attributes_can_be_read_written_and_called_per_index(venv):
    assert venv.get_attr("tag") == [0, 1, 2, 3, 4]
    assert venv.get_attr("tag", indices=[4, 1]) == [4, 1]
    assert venv.get_attr("tag", indices=np.int64(3)) == [3]
    venv.set_attr("tag", 9, indices=[0, 2])
    # SB3 sets the attribute on the outermost wrapper; get_attr finds it there first
    assert venv.get_attr("tag") == [9, 1, 9, 3, 4]
    assert venv.env_method("render", indices=[1])[0].shape == (4, 6, 3)
    assert venv.has_attr("tag") and not venv.has_attr("missing")
    assert venv.env_is_wrapped(gym.wrappers.TimeLimit) == [True] * 5
    assert venv.env_is_wrapped(gym.wrappers.RecordEpisodeStatistics, indices=[0]) == [False]


@pytest.mark.smoke
def test_render_tiles_rgb_arrays_like_sb3(venv):
    images = venv.get_images()
    assert [int(image[0, 0, 0]) for image in images] == [0, 1, 2, 3, 4]
    big = venv.render()
    assert big.shape == (3 * 4, 2 * 6, 3)
    assert np.array_equal(big, tile_images(images))
    assert venv.render_mode == "rgb_array"
    # SB3: SubprocVecEnv keeps what VecEnv's base sets for rgb_array; DummyVecEnv takes the env's own metadata
    expected = (
        venv.get_attr("metadata")[0] if isinstance(venv, DummyVecEnv) else {"render_modes": ["human", "rgb_array"]}
    )
    assert venv.metadata == expected


@pytest.mark.smoke
def test_basic_attributes(venv):
    assert isinstance(venv, VecEnv)
    assert venv.num_envs == 5
    assert venv.unwrapped is venv
    assert venv.observation_space == gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    assert venv.action_space == gym.spaces.Discrete(3)
    assert venv.getattr_depth_check("num_envs", already_found=True) == f"{type(venv).__module__}.{type(venv).__name__}"
    assert venv.getattr_depth_check("num_envs", already_found=False) is None
    assert venv.getattr_depth_check("no_such_attribute", already_found=True) is None


def test_tile_images_pads_to_a_near_square_grid():
    images = np.arange(3 * 2 * 2 * 1).reshape(3, 2, 2, 1)
    tiled = tile_images(images)
    assert tiled.shape == (4, 4, 1)
    assert np.array_equal(tiled[:2, :2], images[0]) and np.array_equal(tiled[2:, :2], images[2])
    assert not tiled[2:, 2:].any()


def test_repr_reports_workers_and_shared_memory_size():
    with ShmVecEnv([make_space_env("frame_u8") for _ in range(4)], envs_per_worker=2) as venv:
        text = repr(venv)
        assert "num_envs=4" in text and "workers=2x2" in text and "MiB" in text
        # obs, final obs: 2 x 4 x 100800 bytes at least
        assert venv.runtime.nbytes >= 2 * 4 * 210 * 160 * 3


def test_rewards_and_dones_have_subproc_vec_env_s_dtypes():
    fns = [make_space_env("box_f32") for _ in range(2)]
    with ShmVecEnv(fns) as venv:
        venv.reset()
        _, rewards, dones, infos = venv.step(np.zeros(2, dtype=np.int64))
        # np.stack of the envs' Python floats, as SubprocVecEnv (test_parity.py compares every type with it)
        assert rewards.dtype == np.float64 and rewards.shape == (2,)
        assert dones.dtype == np.bool_ and dones.shape == (2,)
        assert isinstance(infos, list) and len(infos) == 2


def test_make_vec_env_builds_shm_vec_envs_with_monitor():
    from vecshm import make_vec_env

    venv = make_vec_env("CartPole-v1", n_envs=3, seed=0, vec_env_cls=ShmVecEnv, vec_env_kwargs={"envs_per_worker": 3})
    try:
        assert isinstance(venv, ShmVecEnv)
        venv.reset()
        episodes = []
        for _ in range(200):
            _, _, dones, infos = venv.step(np.ones(3, dtype=np.int64))
            episodes += [info["episode"] for info, done in zip(infos, dones) if done]
        assert episodes and {"r", "l", "t"} <= set(episodes[0])
    finally:
        venv.close()


@pytest.mark.parametrize("obs_key", ["box_f64_2d", "discrete", "multibinary", "dict", "tuple", "dict_img"])
def test_dummy_vec_env_s_keys_and_buffers_are_sb3_s(obs_key):
    """Code that reads SB3's ``DummyVecEnv.keys`` and ``buf_obs`` (an OrderedDict of per-key batches,
    keyed None for a plain space) reads the same from vecshm's, step after step."""
    from stable_baselines3.common.vec_env import DummyVecEnv as SB3DummyVecEnv

    fns = [make_space_env(obs_key, tag=i) for i in range(2)]
    ours, theirs = DummyVecEnv(fns), SB3DummyVecEnv(fns)
    for venv in (ours, theirs):
        venv.seed(3)
        venv.reset()
    for _ in range(3):
        assert list(ours.keys) == list(theirs.keys)
        assert type(ours.buf_obs) is type(theirs.buf_obs) and list(ours.buf_obs) == list(theirs.buf_obs)
        for key, buffer in theirs.buf_obs.items():
            assert ours.buf_obs[key].dtype == buffer.dtype and np.array_equal(ours.buf_obs[key], buffer), key
        for venv in (ours, theirs):
            venv.step(np.ones(2, np.int64))


def test_nested_observation_spaces_are_refused_by_dummy_vec_env_as_in_sb3_and_taken_by_shm_vec_env():
    """SB3's DummyVecEnv raises NotImplementedError for a Dict inside a Dict (SB3's test_dict_env.py
    checks it); SubprocVecEnv, and so ShmVecEnv, take such a space."""
    from stable_baselines3.common.vec_env import DummyVecEnv as SB3DummyVecEnv

    fns = [make_space_env("nested", tag=i) for i in range(2)]
    with pytest.raises(NotImplementedError) as theirs:
        SB3DummyVecEnv(fns)
    with pytest.raises(NotImplementedError) as ours:
        DummyVecEnv(fns)
    assert str(ours.value) == str(theirs.value)
    with ShmVecEnv(fns) as venv:
        assert set(venv.reset()) == {"a", "b"}
