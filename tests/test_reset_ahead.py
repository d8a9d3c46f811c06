"""``ShmVectorEnv(reset_ahead=True)``: under NEXT_STEP autoreset, an ended episode is reset as soon
as its step is published. Step results stay bit-identical to Gymnasium's ``SyncVectorEnv``, a reset
that raises surfaces at the next step as it would there, and the reset really happens early."""

from __future__ import annotations

from collections import defaultdict

import gymnasium as gym
import numpy as np
import pytest
from conftest import assert_tree_equal, make_space_env, shared_memory_for
from gymnasium import spaces
from gymnasium.vector import SyncVectorEnv
from gymnasium.vector.utils import iterate
from test_env_batches import infos_per_env

from vecshm import ShmVectorEnv

N_ENVS = 4
STEPS = 60


def action(env: int, k: int) -> int:
    return (env * 7 + k * 3) % 3


class CountsResets(gym.Env):
    """Ends its episode every ``length`` steps and counts its resets; the ``fail_on``-th reset raises."""

    def __init__(self, length: int = 2, fail_on: int = 0) -> None:
        self.observation_space = spaces.Box(0, 1000, (1,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.length, self.fail_on = length, fail_on
        self.resets = self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        if self.resets == self.fail_on:
            raise ValueError(f"reset {self.resets} failed")
        self.t = 0
        return np.array([self.resets], np.float32), {"resets": self.resets}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), 1.0, self.t >= self.length, False, {}


@pytest.mark.parametrize("key", ["box_f32", "dict", "frame_u8", "dyn_mixed"])
def test_steps_match_a_synchronous_run(key, no_leaks):
    fns = [make_space_env(key, tag=i, max_steps=5) for i in range(N_ENVS)]
    reference = SyncVectorEnv(fns)
    with ShmVectorEnv(fns, reset_ahead=True, envs_per_worker=2, shared_memory=shared_memory_for(key)) as envs:
        got, want = envs.reset(seed=3), reference.reset(seed=3)
        for k in range(STEPS):
            assert_tree_equal(got[0], want[0], f"step {k} obs")
            assert_tree_equal(got[1:], want[1:], f"step {k}")
            actions = np.array([action(i, k) for i in range(N_ENVS)])
            got, want = envs.step(actions), reference.step(actions)
    reference.close()


def test_async_batches_match_a_synchronous_run(no_leaks):
    fns = [make_space_env("box_f32", tag=i, max_steps=5, jitter_us=300.0) for i in range(5)]
    histories: dict[int, list] = defaultdict(list)
    with ShmVectorEnv(fns, reset_ahead=True, batch_size=3, envs_per_worker=2) as envs:
        envs.async_reset(seed=0)
        for _ in range(STEPS):
            obs, rewards, terminations, truncations, infos, env_ids = envs.recv()
            per_env = infos_per_env(infos, len(env_ids))
            for k, i in enumerate(env_ids.tolist()):
                histories[i].append((obs[k], rewards[k], terminations[k], truncations[k], per_env[k]))
            envs.send(np.array([action(i, len(histories[i]) - 1) for i in env_ids.tolist()]), env_ids)
        while envs.in_flight:
            envs.recv()
    reference = SyncVectorEnv(fns)
    obs, infos = reference.reset(seed=0)
    expected = {i: [(obs[i], 0.0, False, False, info)] for i, info in enumerate(infos_per_env(infos, 5))}
    for k in range(max(len(h) for h in histories.values())):
        obs, rewards, terminations, truncations, infos = reference.step(np.array([action(i, k) for i in range(5)]))
        for i, (row, info) in enumerate(zip(iterate(reference.observation_space, obs), infos_per_env(infos, 5))):
            expected[i].append((row, rewards[i], terminations[i], truncations[i], info))
    reference.close()
    for i, history in histories.items():
        assert_tree_equal([h[0] for h in history], [e[0] for e in expected[i][: len(history)]], f"env {i} obs")
        assert [h[1:4] for h in history] == [e[1:4] for e in expected[i][: len(history)]], f"env {i}"
        assert_tree_equal([h[4] for h in history], [e[4] for e in expected[i][: len(history)]], f"env {i} infos")


def test_the_reset_happens_before_the_next_step(no_leaks):
    """Visible only to a call between the step that ended the episode and the next one: the
    documented difference from AsyncVectorEnv."""
    with ShmVectorEnv([CountsResets] * 2, reset_ahead=True) as ahead, ShmVectorEnv([CountsResets] * 2) as later:
        for envs in (ahead, later):
            envs.reset(seed=0)
            envs.step(np.zeros(2, dtype=np.int64))
            _, _, terminations, _, _ = envs.step(np.zeros(2, dtype=np.int64))
            assert terminations.all()
        assert ahead.get_attr("resets") == (2, 2)
        assert later.get_attr("resets") == (1, 1)
        obs_ahead, *_, infos_ahead = ahead.step(np.zeros(2, dtype=np.int64))
        obs_later, *_, infos_later = later.step(np.zeros(2, dtype=np.int64))
        assert_tree_equal((obs_ahead, infos_ahead), (obs_later, infos_later))
        assert ahead.get_attr("resets") == later.get_attr("resets") == (2, 2)
        # a reset after the episode ended replaces the one done ahead
        assert_tree_equal(ahead.reset(seed=1), later.reset(seed=1))


def _error_at_the_third_step(envs: gym.vector.VectorEnv) -> type[BaseException]:
    """The error of the step after the one that ended both episodes (env 0's reset then raises)."""
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(2, dtype=np.int64))
        envs.step(np.zeros(2, dtype=np.int64))
        with pytest.raises(ValueError, match="reset 2 failed") as caught:
            envs.step(np.zeros(2, dtype=np.int64))
        return type(caught.value)
    finally:
        envs.close(terminate=True)


def reset_fails_once():
    return [lambda: CountsResets(fail_on=2), lambda: CountsResets()]


def test_a_reset_that_raises_ahead_surfaces_at_the_next_step(no_leaks):
    assert issubclass(_error_at_the_third_step(ShmVectorEnv(reset_fails_once(), reset_ahead=True)), ValueError)


def test_a_reset_that_raises_ahead_raises_as_in_async_vector_env():
    """No ``no_leaks`` here: AsyncVectorEnv itself leaves file descriptors open after this error."""
    error = _error_at_the_third_step(ShmVectorEnv(reset_fails_once(), reset_ahead=True))
    assert issubclass(error, _error_at_the_third_step(gym.vector.AsyncVectorEnv(reset_fails_once())))


def test_reset_ahead_needs_next_step_autoreset():
    with pytest.raises(ValueError, match="NEXT_STEP"):
        ShmVectorEnv([CountsResets], reset_ahead=True, autoreset_mode="SameStep")
