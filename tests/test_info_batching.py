"""Infos batched one array per key equal Gymnasium's ``VectorEnv._add_info`` applied env by env."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import AddInfoBatch, assert_tree_equal, env_by_env
from dropin_envs import CounterInfoEnv
from gymnasium.vector import AsyncVectorEnv, AutoresetMode

from vecshm import ShmVectorEnv
from vecshm.vector.infos import batch_infos


def random_infos(rng: np.random.Generator) -> list[dict]:
    makers = [
        lambda: int(rng.integers(-5, 100)),
        lambda: float(rng.random()),
        lambda: bool(rng.random() < 0.5),
        lambda: np.int32(rng.integers(5)),
        lambda: np.float32(rng.random()),
        lambda: np.bool_(True),
        lambda: np.arange(2),
        lambda: "text",
        lambda: {"inner": int(rng.integers(3))},
    ]
    keys = ["lives", "frame_number", "_lives", "final_obs", "episode"]
    n = int(rng.integers(1, 6))
    pool = keys if rng.random() < 0.3 else ["lives", "frame_number", "episode"]  # mostly ALE-like keys
    shared_keys = list(rng.choice(pool, size=int(rng.integers(1, 4)), replace=False))
    scalar_makers = 5 if rng.random() < 0.8 else len(makers)  # mostly scalars: the per-key path
    kinds = [int(rng.integers(scalar_makers)) for _ in shared_keys]
    infos = []
    for _ in range(n):
        if rng.random() < 0.15:
            infos.append({})
        elif rng.random() < 0.7:  # the common case: every env has the same keys and types
            infos.append({key: makers[kind]() for key, kind in zip(shared_keys, kinds)})
        else:
            own = rng.choice(keys, size=int(rng.integers(1, 4)), replace=False)
            infos.append({str(key): makers[int(rng.integers(len(makers)))]() for key in own})
    return infos


def test_batch_infos_equals_add_info_env_by_env():
    rng = np.random.default_rng(0)
    for trial in range(3000):
        infos = random_infos(rng)
        add_info = AddInfoBatch(len(infos))._add_info
        try:
            expected = env_by_env([dict(info) for info in infos])
        except Exception as error:  # some key mixes break _add_info itself: they must break the same way
            with pytest.raises(type(error)):
                batch_infos(len(infos), infos, add_info)
            continue
        assert_tree_equal(batch_infos(len(infos), infos, add_info), expected, f"trial {trial}")


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_ale_like_infos_match_async_vector_env(mode, no_leaks):
    fns = [lambda tag=tag: CounterInfoEnv(tag) for tag in range(5)]
    ours = ShmVectorEnv(fns, autoreset_mode=mode, envs_per_worker=2)
    reference = AsyncVectorEnv(fns, autoreset_mode=mode)  # the peer, key order included
    try:
        assert_tree_equal(ours.reset(seed=1), reference.reset(seed=1), "reset")
        done = np.zeros(5, bool)
        for t in range(40):
            if mode is AutoresetMode.DISABLED and done.any():
                mask = done.copy()
                assert_tree_equal(
                    ours.reset(options={"reset_mask": mask}), reference.reset(options={"reset_mask": mask.copy()})
                )
            actions = np.arange(5) % 2
            a, b = ours.step(actions), reference.step(actions)
            assert_tree_equal(a, b, f"step {t}")
            done = b[2] | b[3]
    finally:
        ours.close()
        reference.close()
