"""ShmVectorEnv matches Gymnasium's SyncVectorEnv bit for bit, in every autoreset mode."""

from __future__ import annotations

import gc
import multiprocessing
from contextlib import closing

import gymnasium as gym
import numpy as np
import pytest
from conftest import SPACES, assert_tree_equal, make_space_env, shared_memory_for
from faulty_envs import faulty, healthy
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from lockstep import lockstep

from vecshm import ShmVectorEnv, WorkerError

DYNAMIC_KEYS = [key for key in SPACES if key.startswith("dyn_")]


@pytest.mark.smoke
@pytest.mark.parametrize("mode", list(AutoresetMode))
@pytest.mark.parametrize("obs_key", sorted(SPACES))
def test_bit_identical_to_sync_vector_env(mode, obs_key, no_leaks):
    fns = [make_space_env(obs_key, tag=i) for i in range(4)]
    ours = ShmVectorEnv(fns, autoreset_mode=mode, envs_per_worker=2, shared_memory=shared_memory_for(obs_key))
    reference = SyncVectorEnv(fns, autoreset_mode=mode)
    try:
        assert ours.single_observation_space == reference.single_observation_space
        assert ours.observation_space == reference.observation_space
        assert ours.action_space == reference.action_space
        assert ours.metadata["autoreset_mode"] == mode
        lockstep(ours, reference, 30)
    finally:
        ours.close()
        reference.close()


@pytest.mark.parametrize("obs_key", ["box_f32", "discrete", "dict", "tuple", "dyn_text"])
def test_same_step_infos_match_async_vector_env_key_for_key(obs_key, no_leaks):
    """An episode's end under SAME_STEP: ``final_info``, ``final_obs`` and the reset's infos, in
    ``AsyncVectorEnv``'s key order (code that lists or iterates the keys sees the same)."""
    fns = [make_space_env(obs_key, tag=i, max_steps=3 + i) for i in range(3)]
    options = {"autoreset_mode": AutoresetMode.SAME_STEP, "shared_memory": shared_memory_for(obs_key)}
    with ShmVectorEnv(fns, envs_per_worker=2, **options) as ours, closing(AsyncVectorEnv(fns, **options)) as reference:
        lockstep(ours, reference, 12)


@pytest.mark.parametrize("obs_key", DYNAMIC_KEYS)
def test_dynamic_spaces_bit_identical_to_async_vector_env_without_shared_memory(obs_key, no_leaks):
    """Where AsyncVectorEnv needs shared_memory=False (spaces without a fixed size), vecshm matches it."""
    fns = [make_space_env(obs_key, tag=i) for i in range(3)]
    ours = ShmVectorEnv(fns, envs_per_worker=2, shared_memory=False)
    reference = AsyncVectorEnv(fns, shared_memory=False)
    try:
        assert ours.observation_space == reference.observation_space
        lockstep(ours, reference, 25)
    finally:
        ours.close()
        reference.close()


# Gymnasium 1.2's Text (RLlib's pin) samples its characters in the order of a frozenset, which
# string hashing sets anew in each interpreter: the same seed gives other strings in a forkserver
# worker than in the test's process. Gymnasium 1.4 sorts them.
_CHARACTERS = gym.spaces.Text(4).character_list
TEXT_SAMPLES_DEPEND_ON_THE_PROCESS = list(_CHARACTERS) != sorted(_CHARACTERS)


@pytest.mark.parametrize("obs_key", ["box_f32", "dict", "dyn_text", "dyn_oneof", "dyn_sequence", "dyn_custom"])
def test_a_partial_reset_before_the_first_reset_is_async_vector_env_s(obs_key, no_leaks):
    """``reset(options={"reset_mask": ...})`` before some env was ever reset: that env has no
    observation yet. ``AsyncVectorEnv`` returns the zeros of its shared memory for it (fixed-size
    spaces) or the ``None`` its worker sends (``shared_memory=False``, dynamic spaces); vecshm
    returns the same, where before it raised a bare ``EOFError`` for a pickled space. The envs'
    observation spaces are seeded, so the envs that do reset return the same values in both."""
    if obs_key == "dyn_text" and TEXT_SAMPLES_DEPEND_ON_THE_PROCESS:
        pytest.skip("this Gymnasium's Text samples differ between interpreters (Gymnasium 1.4 sorts its characters)")
    fns = [make_space_env(obs_key, tag=i, space_seed=100 + i) for i in range(3)]
    options = {"shared_memory": shared_memory_for(obs_key)}
    with ShmVectorEnv(fns, envs_per_worker=2, **options) as ours, closing(AsyncVectorEnv(fns, **options)) as reference:
        for mask in ([True, False, True], [False, True, False]):
            assert_tree_equal(
                ours.reset(options={"reset_mask": np.array(mask)}),
                reference.reset(options={"reset_mask": np.array(mask)}),
                f"reset_mask={mask}",
            )


@pytest.mark.parametrize("obs_key", DYNAMIC_KEYS)
def test_shared_memory_true_refuses_what_async_vector_env_refuses(obs_key, no_leaks):
    """AsyncVectorEnv(shared_memory=True) refuses spaces without a fixed shape (TypeError) and custom
    spaces (ValueError) and takes Text and OneOf; ShmVectorEnv raises the same, word for word, and
    leaves no worker behind."""
    fns = [make_space_env(obs_key, tag=i) for i in range(2)]

    def outcome(cls):
        try:
            cls(fns, shared_memory=True).close()
        except (TypeError, ValueError) as error:
            return type(error), str(error)
        return None

    assert outcome(ShmVectorEnv) == outcome(AsyncVectorEnv)


def test_calls_attributes_and_render():
    fns = [make_space_env("box_f32", tag=i) for i in range(3)]
    with ShmVectorEnv(fns) as envs:
        envs.reset(seed=1)
        assert envs.get_attr("tag") == (0, 1, 2)
        envs.set_attr("tag", [5, 6, 7])
        assert envs.get_attr("tag") == (5, 6, 7)
        envs.set_attr("tag", 1)
        assert envs.call("render")[2].shape == (4, 6, 3)
        assert len(envs.render()) == 3
        with pytest.raises(ValueError, match="length equal"):
            envs.set_attr("tag", [1, 2])
        assert envs.np_random_seed == (1, 2, 3)


def test_gymnasium_errors_for_out_of_order_and_closed_use():
    envs = ShmVectorEnv([healthy] * 2)
    envs.reset()
    with pytest.raises(NoAsyncCallError):
        envs.step_wait()
    envs.step_async(np.zeros(2, dtype=np.int64))
    with pytest.raises(AlreadyPendingCallError):
        envs.reset_async()
    envs.step_wait()
    envs.close()
    with pytest.raises(ClosedEnvironmentError):
        envs.step(np.zeros(2, dtype=np.int64))


@pytest.mark.timeout(120)
def test_step_wait_timeout_raises_multiprocessing_timeout_error(no_leaks):
    envs = ShmVectorEnv([faulty("hang", fail_at=2), healthy])
    envs.reset()
    envs.step(np.zeros(2, dtype=np.int64))
    envs.step_async(np.zeros(2, dtype=np.int64))
    with pytest.raises(multiprocessing.TimeoutError):
        envs.step_wait(timeout=0.5)
    envs.close()


def test_env_errors_keep_their_type():
    with ShmVectorEnv([healthy, faulty("raise")]) as envs:
        envs.reset()
        with pytest.raises(ValueError, match="env 1 raised") as info:
            for _ in range(5):
                envs.step(np.zeros(2, dtype=np.int64))
        assert isinstance(info.value, WorkerError)


def test_gymnasium_wrappers_work_on_top():
    fns = [lambda: gym.make("CartPole-v1") for _ in range(3)]
    envs = gym.wrappers.vector.RecordEpisodeStatistics(ShmVectorEnv(fns))
    envs = gym.wrappers.vector.DictInfoToList(envs)
    try:
        envs.reset(seed=0)
        episodes = []
        for _ in range(200):
            _, _, term, trunc, infos = envs.step(envs.action_space.sample())
            episodes += [info["episode"] for info in infos if "episode" in info]
        assert episodes and isinstance(infos, list)
    finally:
        envs.close()


VECTOR_WRAPPERS = {
    "RecordEpisodeStatistics": ("CartPole-v1", lambda envs: gym.wrappers.vector.RecordEpisodeStatistics(envs)),
    "NormalizeObservation": ("CartPole-v1", lambda envs: gym.wrappers.vector.NormalizeObservation(envs)),
    "NormalizeReward": ("CartPole-v1", lambda envs: gym.wrappers.vector.NormalizeReward(envs)),
    "RescaleAction": ("Pendulum-v1", lambda envs: gym.wrappers.vector.RescaleAction(envs, -1.0, 1.0)),
    "FlattenObservation": ("Blackjack-v1", lambda envs: gym.wrappers.vector.FlattenObservation(envs)),
    "DtypeObservation": ("CartPole-v1", lambda envs: gym.wrappers.vector.DtypeObservation(envs, np.float64)),
}


@pytest.mark.parametrize("wrapper", sorted(VECTOR_WRAPPERS))
def test_gymnasium_vector_wrappers_give_what_they_give_on_sync_vector_env(wrapper, no_leaks):
    """Gymnasium's own vector wrappers read the vector env's spaces, metadata and infos: over
    ShmVectorEnv they return what they return over SyncVectorEnv, step for step (episodes end)."""
    env_id, wrap = VECTOR_WRAPPERS[wrapper]
    fns = [lambda: gym.make(env_id) for _ in range(3)]
    ours, reference = wrap(ShmVectorEnv(fns, envs_per_worker=2)), wrap(SyncVectorEnv(fns))
    try:
        assert ours.observation_space == reference.observation_space
        assert_tree_equal(ours.reset(seed=3), reference.reset(seed=3), "reset")
        ours.action_space.seed(5)
        for t in range(210):  # Pendulum truncates at 200
            actions = ours.action_space.sample()
            a, b = ours.step(actions), reference.step(actions)
            for step_infos in (a[4], b[4]):  # an episode's wall-clock time is the one thing that differs
                step_infos.get("episode", {}).pop("t", None)
            assert_tree_equal(a, b, f"step {t}")
    finally:
        ours.close()
        reference.close()


def test_make_vec_builds_wrapped_envs_like_gymnasium():
    from vecshm import make_vec

    envs = make_vec(
        "CartPole-v1",
        num_envs=4,
        vector_kwargs={"envs_per_worker": 2, "autoreset_mode": AutoresetMode.SAME_STEP},
        wrappers=[gym.wrappers.RecordEpisodeStatistics],
        max_episode_steps=20,
    )
    reference = gym.make_vec(
        "CartPole-v1",
        num_envs=4,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        wrappers=[gym.wrappers.RecordEpisodeStatistics],
        max_episode_steps=20,
    )
    try:
        assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
        assert_tree_equal(envs.reset(seed=3)[0], reference.reset(seed=3)[0])
        for _ in range(30):
            a, b = envs.step(np.ones(4, dtype=np.int64)), reference.step(np.ones(4, dtype=np.int64))
            assert_tree_equal(a[:4], b[:4])
            assert ("final_info" in a[4]) == ("final_info" in b[4])
    finally:
        envs.close()
        reference.close()


def test_make_vec_takes_gymnasium_make_vec_arguments_and_records_the_same_spec():
    """Positional ``vectorization_mode``, an ``EnvSpec`` as id, the ``spec`` the result records and
    making another from it, as ``gymnasium.make_vec(..., "async")`` does; other modes are Gymnasium's."""
    from vecshm import make_vec

    args = ("CartPole-v1", 3, "async", {"autoreset_mode": AutoresetMode.SAME_STEP})
    ours, reference = make_vec(*args, max_episode_steps=20), gym.make_vec(*args, max_episode_steps=20)
    again = make_vec(ours.spec)
    from_spec = make_vec(gym.spec("CartPole-v1"), 2)
    try:
        assert type(ours) is ShmVectorEnv and type(again) is ShmVectorEnv and type(from_spec) is ShmVectorEnv
        assert ours.spec == reference.spec and again.spec == ours.spec
        assert_tree_equal(ours.reset(seed=3), reference.reset(seed=3))
        assert_tree_equal(again.reset(seed=3), reference.reset(seed=3))
        for _ in range(30):
            actions = np.ones(3, dtype=np.int64)
            assert_tree_equal(ours.step(actions)[:4], reference.step(actions)[:4])
    finally:
        for envs in (ours, reference, again, from_spec):
            envs.close()
    for wrappers in ((gym.wrappers.TimeAwareObservation,), [gym.wrappers.TimeAwareObservation]):  # kept as given
        with (
            closing(make_vec(*args[:3], wrappers=wrappers)) as ours,
            closing(gym.make_vec(*args[:3], wrappers=wrappers)) as reference,
        ):
            assert ours.spec == reference.spec
    sync = make_vec("CartPole-v1", 2, "sync")
    assert type(sync) is SyncVectorEnv
    sync.close()
    with pytest.raises(ValueError, match="Invalid vectorization mode"):
        make_vec("CartPole-v1", 2, "bogus")


@pytest.mark.parametrize("cls", [AsyncVectorEnv, ShmVectorEnv])
def test_an_unknown_keyword_raises_type_error_and_nothing_at_collection(cls, monkeypatch):
    """As AsyncVectorEnv: the TypeError, and no exception from ``__del__`` of the half-built object."""
    unraisable = []
    monkeypatch.setattr("sys.unraisablehook", unraisable.append)
    with pytest.raises(TypeError, match="unexpected keyword argument 'workers'"):
        cls([healthy()], workers=2)
    gc.collect()
    assert unraisable == []
