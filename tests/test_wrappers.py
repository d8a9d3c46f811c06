"""vecshm's wrappers behave as SB3's: same inputs, same outputs, terminal observations included."""

from __future__ import annotations

import pickle
import weakref

import numpy as np
import pytest
from conftest import assert_tree_equal, make_space_env
from lockstep import lockstep

from vecshm import (
    DummyVecEnv,
    ShmVecEnv,
    StackedObservations,
    VecCheckNan,
    VecExtractDictObs,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
    VecTransposeImage,
    VecVideoRecorder,
)

WRAPPERS = {
    "frame_stack_image": ("frame_u8", lambda m, v: m.VecFrameStack(v, 3)),
    "frame_stack_vector": ("box_f32", lambda m, v: m.VecFrameStack(v, 4)),
    "frame_stack_first": ("box_f64_2d", lambda m, v: m.VecFrameStack(v, 2, channels_order="first")),
    "frame_stack_dict": ("dict_img", lambda m, v: m.VecFrameStack(v, 2, channels_order={"img": "last", "vec": "last"})),
    "normalize": ("box_f32", lambda m, v: m.VecNormalize(v, gamma=0.9)),
    "normalize_dict": ("dict_img", lambda m, v: m.VecNormalize(v, norm_obs_keys=["vec"])),
    "normalize_image": ("frame_u8", lambda m, v: m.VecNormalize(v, clip_obs=5.0)),
    "transpose": ("frame_u8", lambda m, v: m.VecTransposeImage(v)),
    "transpose_dict": ("dict_img", lambda m, v: m.VecTransposeImage(v)),
    "extract_dict_obs": ("dict_img", lambda m, v: m.VecExtractDictObs(v, "img")),
    "check_nan": ("box_f32", lambda m, v: m.VecCheckNan(v, raise_exception=True)),
    "monitor": ("box_f32", lambda m, v: m.VecMonitor(v)),
    "stack_of_three": ("frame_u8", lambda m, v: m.VecNormalize(m.VecFrameStack(m.VecTransposeImage(v), 2))),
}


def drop_times(infos):
    for info in infos:
        info.get("episode", {}).pop("t", None)
    return infos


def compare(ours, theirs, steps: int = 30) -> None:
    """Lockstep, with an episode's wall-clock time left out of ``VecMonitor``'s infos."""
    lockstep(ours, theirs, steps, seed=1, action_seed=0, reset_infos="none", infos=drop_times, same_spaces=True)


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_same_outputs_as_sb3(name):
    sb3_vec_env = pytest.importorskip("stable_baselines3.common.vec_env")
    import vecshm

    obs_key, wrap = WRAPPERS[name]
    fns = [make_space_env(obs_key, big_info_every=0, tag=i) for i in range(3)]
    ours = wrap(vecshm, DummyVecEnv(fns))
    theirs = wrap(sb3_vec_env, sb3_vec_env.DummyVecEnv(fns))
    try:
        compare(ours, theirs)
    finally:
        ours.close()
        theirs.close()


@pytest.mark.parametrize("name", ["frame_stack_image", "normalize_dict", "transpose_dict", "stack_of_three"])
def test_same_outputs_on_shm_vec_env(name):
    """vecshm's wrappers on ShmVecEnv, SB3's on SubprocVecEnv (the rewards VecNormalize scales are
    SubprocVecEnv's float64s on both)."""
    sb3_vec_env = pytest.importorskip("stable_baselines3.common.vec_env")
    import vecshm

    obs_key, wrap = WRAPPERS[name]
    fns = [make_space_env(obs_key, tag=i) for i in range(4)]
    ours = wrap(vecshm, ShmVecEnv(fns, envs_per_worker=2))
    reference = wrap(sb3_vec_env, sb3_vec_env.SubprocVecEnv(fns))
    try:
        compare(ours, reference)
    finally:
        ours.close()
        reference.close()


def test_frame_stack_returns_fresh_arrays_and_stacks_terminal_observations():
    fns = [make_space_env("box_f32", max_steps=4, big_info_every=0) for _ in range(2)]
    with VecFrameStack(DummyVecEnv(fns), 3) as venv:
        previous = venv.reset()
        kept = previous.copy()
        for _ in range(8):
            obs, _, dones, infos = venv.step(np.zeros(2, dtype=np.int64))
            assert np.array_equal(previous, kept), "an array handed out earlier was modified"
            for i in np.flatnonzero(dones):
                terminal = infos[i]["terminal_observation"]
                assert terminal.shape == (9,) and np.array_equal(terminal[:6], kept[i, 3:])
                assert not obs[i, :6].any(), "the stack restarts with zeros after an episode"
            previous, kept = obs, obs.copy()


def test_stacked_observations_keeps_sb3_methods():
    from gymnasium import spaces

    space = spaces.Box(0, 255, (3, 8, 8), np.uint8)
    assert StackedObservations.compute_stacking(4, space) == (True, 1, (12, 8, 8), 0)
    stack = StackedObservations(2, 4, space)
    first = stack.reset(np.ones((2, 3, 8, 8), np.uint8))
    assert first[:, -3:].all() and not first[:, :-3].any()
    obs, infos = stack.update(np.full((2, 3, 8, 8), 2, np.uint8), np.array([False, False]), [{}, {}])
    assert (obs[:, -3:] == 2).all() and (obs[:, -6:-3] == 1).all()


def test_vec_normalize_save_load_and_pickling(tmp_path):
    fns = [make_space_env("box_f32", big_info_every=0) for _ in range(2)]
    venv = VecNormalize(DummyVecEnv(fns))
    venv.reset()
    for _ in range(20):
        venv.step(np.zeros(2, dtype=np.int64))
    path = tmp_path / "stats.pkl"
    venv.save(str(path))
    loaded = VecNormalize.load(str(path), DummyVecEnv(fns))
    assert np.array_equal(loaded.obs_rms.mean, venv.obs_rms.mean) and loaded.ret_rms.count == venv.ret_rms.count
    unpickled = pickle.loads(pickle.dumps(venv))
    assert unpickled.venv is None and "returns" not in vars(unpickled)  # as SB3: set_venv() reattaches it
    assert np.array_equal(unpickled.obs_rms.mean, venv.obs_rms.mean)
    original = venv.get_original_obs()
    assert np.allclose(venv.unnormalize_obs(venv.normalize_obs(original)), original, atol=1e-4)
    (tmp_path / "junk.pkl").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="not a saved VecNormalize"):
        VecNormalize.load(str(tmp_path / "junk.pkl"), DummyVecEnv(fns))
    (tmp_path / "other.pkl").write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(ValueError, match="not a saved VecNormalize"):
        VecNormalize.load(str(tmp_path / "other.pkl"), DummyVecEnv(fns))
    with pytest.raises(ValueError, match="statistics are for observations"):
        VecNormalize.load(str(path), DummyVecEnv([make_space_env("box_i16")]))


def test_vec_monitor_writes_csv_that_sb3_reads(tmp_path):
    monitor = pytest.importorskip("stable_baselines3.common.monitor")
    fns = [make_space_env("box_f32", max_steps=5, big_info_every=0) for _ in range(2)]
    with VecMonitor(ShmVecEnv(fns), filename=str(tmp_path)) as venv:
        venv.reset()
        for _ in range(30):
            venv.step(np.zeros(2, dtype=np.int64))
    results = monitor.load_results(str(tmp_path))
    assert len(results) >= 6 and set(results.columns) >= {"r", "l", "t"}
    assert (results["l"] <= 5).all()


def test_video_recorder_writes_an_mp4(tmp_path):
    imageio = pytest.importorskip("imageio.v2")
    import gymnasium as gym

    fns = [lambda: gym.make("vecshm/VectorObs-v0", render_mode="rgb_array") for _ in range(4)]
    venv = VecVideoRecorder(ShmVecEnv(fns), str(tmp_path), lambda step: step == 0, video_length=5, name_prefix="t")
    venv.reset()
    for _ in range(8):
        venv.step(np.zeros(4, dtype=np.int64))
    venv.close()
    path = tmp_path / "t-step-0-to-step-5.mp4"
    frames = list(imageio.get_reader(str(path)).iter_data())
    assert len(frames) == 6 and frames[0].shape[:2] == (64, 64)


def test_check_nan_names_the_env_and_the_source():
    fns = [make_space_env("box_f32", "box") for _ in range(3)]
    with VecCheckNan(DummyVecEnv(fns), raise_exception=True) as venv:
        venv.reset()
        actions = np.zeros((3, 2), np.float32)
        actions[1, 0] = np.nan
        with pytest.raises(ValueError, match=r"(?s)found nan in actions \(envs \[1\]\).*RL model"):
            venv.step(actions)


def test_bad_wrapper_arguments_are_clear_errors():
    box = DummyVecEnv([make_space_env("box_f32")])
    with pytest.raises(ValueError, match="n_stack"):
        VecFrameStack(box, 0)
    with pytest.raises(ValueError, match="channels_order"):
        VecFrameStack(box, 2, channels_order="middle")
    with pytest.raises(ValueError, match="image"):
        VecTransposeImage(box)
    with pytest.raises(KeyError, match="nope"):
        VecExtractDictObs(DummyVecEnv([make_space_env("dict_img")]), "nope")
    with pytest.raises(ValueError, match="Dict"):
        VecExtractDictObs(box, "img")


def test_ppo_trains_on_a_vecshm_wrapper_stack():
    pytest.importorskip("stable_baselines3")
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import unwrap_vec_normalize

    def frames():
        return gym.make("vecshm/Frames-v0", shape=(36, 36, 3), episode_length=20)

    venv = VecNormalize(VecFrameStack(ShmVecEnv([frames] * 2), 4), norm_obs=False)
    try:
        model = PPO("CnnPolicy", venv, n_steps=16, batch_size=32, n_epochs=1)
        model.learn(64)
        assert unwrap_vec_normalize(model.get_env()) is venv
    finally:
        venv.close()


def test_sb3_s_own_classes_count_as_vecshm_s_copies():
    """Both directions: vecshm's classes pass SB3's isinstance checks, and SB3's pass vecshm's,
    except SubprocVecEnv, which lacks ShmVecEnv's async API."""
    sb3_vec_env = pytest.importorskip("stable_baselines3.common.vec_env")
    from vecshm import VecEnv
    from vecshm.sb3 import DECLARED

    assert len(DECLARED) == 12, sorted(cls.__name__ for cls in DECLARED)
    for ours, (sb3_name, one_way) in DECLARED.items():
        theirs = getattr(sb3_vec_env, sb3_name)
        if issubclass(ours, VecEnv):  # StackedObservations is a plain class on both sides
            assert issubclass(ours, theirs), ours
            assert issubclass(theirs, ours) == (not one_way), ours
    assert not isinstance(sb3_vec_env.SubprocVecEnv.__new__(sb3_vec_env.SubprocVecEnv), ShmVecEnv)
    assert not issubclass(sb3_vec_env.VecEnv, VecTransposeImage)


def test_is_vecenv_wrapped_with_vecshm_s_class_finds_the_transpose_sb3_added():
    """SB3's algorithms wrap image envs in SB3's VecTransposeImage; code that imports the wrapper
    from vecshm asks with vecshm's class (as SB3's and sb3-contrib's test_cnn.py do)."""
    pytest.importorskip("stable_baselines3")
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import is_vecenv_wrapped

    def frames():
        return gym.make("vecshm/Frames-v0", shape=(36, 36, 3), episode_length=20)

    venv = ShmVecEnv([frames] * 2)
    try:
        model = PPO("CnnPolicy", venv, n_steps=16, batch_size=32)
        assert is_vecenv_wrapped(model.get_env(), VecTransposeImage)
        assert not is_vecenv_wrapped(model.get_env(), VecFrameStack)
    finally:
        venv.close()


class PinnedDummyVecEnv(DummyVecEnv):
    """A vec env that says it is pinned (``pin_memory=True`` needs CUDA; the arrays' page-locking
    itself is ``tests/test_cuda.py``'s): the wrappers above take their pooled path, and ask it for
    their arrays (``page_locked``), which it hands out in plain memory and remembers (weakly: the
    pool reuses an array only once nothing else refers to it)."""

    pin_memory = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.made: list[weakref.ref] = []

    def page_locked(self, shape, dtype) -> np.ndarray:
        array = np.empty(shape, dtype)
        self.made.append(weakref.ref(array))
        return array


@pytest.mark.parametrize(
    "name", ["frame_stack_image", "frame_stack_dict", "transpose", "transpose_dict", "stack_of_three"]
)
def test_wrappers_above_a_pinned_vec_env_write_pooled_arrays_with_sb3_s_outputs(name):
    sb3_vec_env = pytest.importorskip("stable_baselines3.common.vec_env")
    import vecshm
    from vecshm.wrappers import pinned

    obs_key, wrap = WRAPPERS[name]
    fns = [make_space_env(obs_key, big_info_every=0, tag=i) for i in range(3)]
    below = PinnedDummyVecEnv(fns)
    made = below.made
    ours = wrap(vecshm, below)
    theirs = wrap(sb3_vec_env, sb3_vec_env.DummyVecEnv(fns))
    try:
        compare(ours, theirs, steps=40)  # bit for bit, and held arrays never rewritten (below)
        held = ours.step(np.zeros(3, dtype=np.int64))[0]
        kept = {k: v.copy() for k, v in held.items()} if isinstance(held, dict) else held.copy()
        for _ in range(10):
            later = ours.step(np.zeros(3, dtype=np.int64))[0]
        assert_tree_equal(held, kept, "an array the caller holds")
        for array in later.values() if isinstance(later, dict) else [later]:
            if name != "stack_of_three" and array.ndim == 4:  # (VecNormalize makes its own; vectors pass)
                assert any(array is m() for m in made)  # from the pool
                assert array.flags.c_contiguous
        assert len(made) <= 2 * pinned.POOL_SIZE  # reused, not allocated per step
    finally:
        ours.close()
        theirs.close()
