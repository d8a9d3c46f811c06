"""Flat infos of numbers travel as typed columns (vecshm.shared.info_columns): bit-identical to the
pickled path and to SB3's DummyVecEnv and Gymnasium's AsyncVectorEnv, each value of the type the env
gave it, whether the batch is of one schema or mixed, and whether the slot has room or not."""

from __future__ import annotations

from contextlib import closing

import numpy as np
import pytest
from conftest import as_dummy_rewards, assert_tree_equal, env_by_env
from dropin_envs import TypedInfoEnv, typed_info
from gymnasium.vector import AsyncVectorEnv, AutoresetMode
from stable_baselines3.common.vec_env import DummyVecEnv as SB3DummyVecEnv

from vecshm import ShmVecEnv, ShmVectorEnv
from vecshm.shared.info_columns import MAX_SCHEMAS, ColumnWriter, SchemaCache, is_columns

COLUMN_KINDS = {1, 2, 5, 8}  # the typed_info kinds that are flat dicts of column types
N_ENVS = 5
STEPS = 40


def test_every_column_type_round_trips_with_its_type():
    writer, arena = ColumnWriter(), np.zeros((1, 2048), np.uint8)
    for kind in range(TypedInfoEnv.KINDS):
        for t in range(3):
            info = typed_info(kind, t)
            length = writer.write(info, arena, 0) if info else None
            assert (length is not None) == (kind in COLUMN_KINDS), f"kind {kind}: columns {length is not None}"
            if length is None:
                continue
            assert is_columns(length)
            cache = SchemaCache()  # a parent that never saw this schema learns it from the slot
            schema = cache.schema(length, arena, 0)
            assert_tree_equal(schema.dict_at(arena, 0), info, f"kind {kind} t {t}")
            (record,) = cache.records(arena, [0], schema)  # the columns the Gymnasium facade batches
            assert_tree_equal([type(v)(x) for v, x in zip(info.values(), record.tolist())], list(info.values()))


def test_a_slot_too_small_for_the_columns_takes_the_pickled_path():
    info = typed_info(1, 0)
    assert ColumnWriter().write(info, np.zeros((2, 24), np.uint8), 1) is None  # the values fit, the schema does not


def test_keys_that_change_every_step_do_not_grow_the_caches_without_bound():
    writer, arena, cache = ColumnWriter(), np.zeros((1, 256), np.uint8), SchemaCache()
    lengths = [writer.write({f"episode_{t}": t}, arena, 0) for t in range(3 * MAX_SCHEMAS)]
    assert all(is_columns(length) for length in lengths[:MAX_SCHEMAS])
    assert lengths[MAX_SCHEMAS:] == [None] * (2 * MAX_SCHEMAS)  # pickled from then on
    assert writer.schemas_known == MAX_SCHEMAS
    assert writer.write({"episode_0": 5}, arena, 0) == lengths[0]  # known schemas still take columns
    assert cache.schema(lengths[0], arena, 0).dict_at(arena, 0) == {"episode_0": 5}


def _typed_fns(huge: bool = True):
    return [lambda tag=tag: TypedInfoEnv(tag, huge) for tag in range(N_ENVS)]


@pytest.mark.parametrize("info_bytes", [2048, 40])
def test_sb3_infos_match_dummy_vec_env(info_bytes, no_leaks):
    """Step infos, terminal infos and ``reset_infos``; with 40 bytes no column fits and every info is piped."""
    seen = set()
    with (
        ShmVecEnv(_typed_fns(), envs_per_worker=2, info_bytes=info_bytes) as venv,
        closing(SB3DummyVecEnv(_typed_fns())) as reference,
    ):
        assert_tree_equal(venv.reset(), reference.reset())
        assert_tree_equal(venv.reset_infos, reference.reset_infos, "reset infos")
        for t in range(STEPS):
            actions = np.arange(N_ENVS) % 2
            got, want = venv.step(actions), reference.step(actions)
            assert_tree_equal((got[0], as_dummy_rewards(got[1]), got[2]), want[:3], f"step {t}")
            assert_tree_equal(got[3], want[3], f"step {t} infos")
            assert_tree_equal(venv.reset_infos, reference.reset_infos, f"step {t} reset infos")
            seen.update(is_columns(length) for length in venv.segment.info_len.tolist())
    assert seen == ({True, False} if info_bytes == 2048 else {False}), "both paths must have been taken"


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_gymnasium_infos_match_async_vector_env(mode, no_leaks):
    with (
        ShmVectorEnv(_typed_fns(huge=False), autoreset_mode=mode, envs_per_worker=2) as envs,
        closing(AsyncVectorEnv(_typed_fns(huge=False), autoreset_mode=mode)) as reference,  # key order included
    ):
        assert_tree_equal(envs.reset(seed=3), reference.reset(seed=3), "reset")
        done = np.zeros(N_ENVS, bool)
        for t in range(STEPS):
            if mode is AutoresetMode.DISABLED and done.any():  # reset infos of some envs, not all
                got = envs.reset(options={"reset_mask": done.copy()})
                assert_tree_equal(got, reference.reset(options={"reset_mask": done.copy()}), f"reset {t}")
            actions = np.arange(N_ENVS) % 2
            got, want = envs.step(actions), reference.step(actions)
            assert_tree_equal(got, want, f"step {t}")
            done = want[2] | want[3]


def test_async_batches_return_column_infos_of_their_envs(no_leaks):
    """Batches of 3 from workers of 2 envs: each batch's infos as Gymnasium's ``_add_info`` batches
    the infos that a synchronous run of those envs gives, in the batch's order."""
    batches = []
    steps = dict.fromkeys(range(N_ENVS), 0)  # how many results each env has returned
    with ShmVectorEnv(_typed_fns(huge=False), batch_size=3, envs_per_worker=2) as envs:
        envs.async_reset(seed=0)
        for _ in range(STEPS):
            *_, infos, env_ids = envs.recv()
            batches.append(([(i, steps[i]) for i in env_ids.tolist()], infos))
            for i in env_ids.tolist():
                steps[i] += 1
            envs.send(env_ids % 2, env_ids)
    expected = {}
    for i in range(N_ENVS):
        env = TypedInfoEnv(i, huge=False)
        infos = [env.reset(seed=0)[1]]
        while len(infos) < steps[i]:
            _, _, terminated, truncated, info = env.step(i % 2)
            infos.append(info)  # NEXT_STEP: the step that ends an episode, then the reset's step
            if terminated or truncated:
                infos.append(env.reset()[1])
        expected[i] = infos
    for b, (members, infos) in enumerate(batches):
        assert_tree_equal(infos, env_by_env([expected[i][step] for i, step in members]), f"batch {b}")
