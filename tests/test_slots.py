"""Lent observation slots: results are never overwritten while held, and slots come back when dropped."""

from __future__ import annotations

import gc
from contextlib import closing

import numpy as np
import pytest
from conftest import ACTION_SPACES, assert_tree_equal, make_space_env, sample_actions, segment_descriptors
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv
from stable_baselines3.common.vec_env import DummyVecEnv as SB3DummyVecEnv

from vecshm import ShmVecEnv, ShmVectorEnv
from vecshm.parent.handback.results import DEFAULT_LENDABLE_SLOTS


def in_segment_mapping(address: int) -> bool:
    """Whether ``address`` lies in a mapping of a vecshm segment in this process."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            low, high = (int(x, 16) for x in line.split()[0].split("-"))
            if low <= address < high:
                return "memfd:vecshm" in line or "/psm_" in line  # native memfd, or the portable shared_memory block
    return False


def first_address(obs: np.ndarray) -> int:
    return obs.__array_interface__["data"][0]


@pytest.mark.parametrize("obs_key", ["frame_u8", "dict_img"])
def test_held_results_stay_intact_beyond_every_slot(obs_key, no_leaks):
    """Hold more batches than there are slots (the copy fallback) and check each against the reference."""
    fns = [make_space_env(obs_key, tag=i) for i in range(4)]
    rng = np.random.default_rng(0)
    held, expected = [], []
    with ShmVecEnv(fns, envs_per_worker=2, lend_min_bytes=0) as venv, closing(SB3DummyVecEnv(fns)) as reference:
        venv.seed(2)
        reference.seed(2)
        held.append(venv.reset())
        expected.append(reference.reset())
        for _ in range(3 * DEFAULT_LENDABLE_SLOTS):
            actions = sample_actions(ACTION_SPACES["discrete"], 4, rng)
            held.append(venv.step(actions)[0])
            expected.append(reference.step(actions)[0])
        for t, (ours, theirs) in enumerate(zip(held, expected)):
            assert_tree_equal(ours, theirs, f"batch {t}")
        first_leaf = held[1] if obs_key == "frame_u8" else held[1]["img"]
        assert in_segment_mapping(first_address(first_leaf)), "the first batches must have been lent"


def test_small_observations_are_copied_not_lent():
    fns = [make_space_env("box_f32") for _ in range(2)]
    with ShmVecEnv(fns) as venv:
        obs = venv.reset()
        assert obs.flags.owndata and not in_segment_mapping(first_address(obs))


def test_a_dropped_batch_gives_its_slot_back():
    fns = [make_space_env("frame_u8") for _ in range(2)]
    actions = np.zeros(2, dtype=np.int64)
    with ShmVecEnv(fns) as venv:
        a = venv.reset()
        b = venv.step(actions)[0]
        assert not np.shares_memory(a, b)
        address = first_address(a)
        view = a[1:]  # a slice keeps the slot too
        del a
        gc.collect()
        c = venv.step(actions)[0]
        assert first_address(c) != address, "a slot still viewed by a slice must not be reused"
        del view
        d = venv.step(actions)[0]
        assert first_address(d) == address, "the slot must return once nothing views it"
        assert not np.shares_memory(b, d) and not np.shares_memory(c, d)


def test_results_outlive_close_and_the_mapping_goes_with_them():
    fns = [make_space_env("frame_u8") for _ in range(2)]
    before = segment_descriptors()
    with ShmVecEnv(fns) as venv, closing(SB3DummyVecEnv(fns)) as reference:
        venv.seed(4)
        reference.seed(4)
        obs = venv.reset()
        expected = reference.reset()
    assert venv.closed
    gc.collect()
    np.testing.assert_array_equal(obs, expected)
    address = first_address(obs)
    assert in_segment_mapping(address), "the held batch keeps its mapping"
    del obs
    gc.collect()
    assert not in_segment_mapping(address), "the mapping must go with the last array"
    assert segment_descriptors() <= before, "and every descriptor of the segment with it"


@pytest.mark.parametrize("obs_key", ["box_f32", "frame_u8", "dict_img"])
def test_copy_false_views_outlive_close_as_async_vector_env_s(obs_key):
    """``copy=False`` observations view the segment itself. Held past ``close()`` they read what
    they read before, as ``AsyncVectorEnv(copy=False)``'s views of its shared memory do, and the
    mapping, with every descriptor of the segment, goes with the last of them. (``close()`` used to
    unmap the memory under them, and reading them crashed the process.)"""
    fns = [make_space_env(obs_key, tag=i) for i in range(3)]
    rng = np.random.default_rng(3)
    before = segment_descriptors()
    ours, theirs = ShmVectorEnv(fns, copy=False), AsyncVectorEnv(fns, copy=False)
    try:
        ours.reset(seed=6)
        theirs.reset(seed=6)
        for _ in range(4):
            actions = sample_actions(ACTION_SPACES["discrete"], 3, rng)
            held = ours.step(actions)[0]
            expected = theirs.step(actions)[0]
    finally:
        ours.close()
        theirs.close()
    gc.collect()
    assert_tree_equal(held, expected)  # both still readable after close()
    leaf = held if obs_key != "dict_img" else held["img"]
    address = first_address(leaf)
    assert in_segment_mapping(address), "copy=False must return views of the segment, or this test checks nothing"
    del held, leaf
    gc.collect()
    assert not in_segment_mapping(address), "the mapping must go with the last view"
    # the portable segment's own descriptor used to stay open for good (closed by nothing once
    # SharedMemory.close() had met the views)
    assert segment_descriptors() <= before, "and every descriptor of the segment with it"


def test_partial_reset_returns_the_whole_batch_in_a_fresh_slot():
    """A reset_mask resets some envs; the others' latest observations are in the new batch too."""
    fns = [make_space_env("frame_u8", tag=i) for i in range(4)]  # 400 KiB batches: above the lending threshold
    rng = np.random.default_rng(1)
    with ShmVectorEnv(fns, envs_per_worker=2) as ours:
        reference = SyncVectorEnv(fns)
        try:
            kept = [ours.reset(seed=5)[0]]
            reference.reset(seed=5)
            for _ in range(3):
                actions = sample_actions(ACTION_SPACES["discrete"], 4, rng)
                kept.append(ours.step(actions)[0])
                reference.step(actions)
            mask = np.array([False, True, False, False])
            partial = ours.reset(options={"reset_mask": mask})
            assert_tree_equal(partial, reference.reset(options={"reset_mask": mask}))
            partial = partial[0]
            assert_tree_equal(partial[~mask], kept[-1][~mask], "kept envs")
            assert not partial.flags.owndata, "the batch must be lent (a view of a slot), or the next check is empty"
            assert not any(np.shares_memory(partial, k) for k in kept)
        finally:
            reference.close()


def test_results_nobody_reads_give_their_slot_back():
    """A step that ``reset()`` cancels is collected and its results dropped: its slot must come
    back, or after a few such steps every batch would be copied instead of lent."""
    fns = [make_space_env("frame_u8") for _ in range(2)]
    actions = np.zeros(2, dtype=np.int64)
    with ShmVecEnv(fns) as venv:
        obs = venv.reset()
        for _ in range(3 * DEFAULT_LENDABLE_SLOTS):
            venv.step_async(actions)
            obs = venv.reset()
        assert in_segment_mapping(first_address(obs)), "reset results must still be lent"
        assert in_segment_mapping(first_address(venv.step(actions)[0])), "step results must still be lent"
