"""One lockstep comparison for any vecshm vec env and its peer: the same seeds and actions given to
both, and every result compared bit for bit (``conftest.assert_tree_equal``).

A Gymnasium ``VectorEnv`` (``ShmVectorEnv`` against ``SyncVectorEnv`` or ``AsyncVectorEnv``) is
compared on ``reset(seed=...)`` and the 5-tuple of each step; an SB3 ``VecEnv`` (``ShmVecEnv``,
``RayVecEnv`` or a wrapper over one, against SB3's class) on ``seed``/``reset``, the 4-tuple of each
step and ``reset_infos``. Where the peers themselves differ, the comparison says how (each option).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from conftest import ACTION_SPACES, assert_tree_equal, sample_actions
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

__all__ = ["lockstep"]


def lockstep(
    ours: Any,
    peer: Any,
    steps: int,
    *,
    seed: int = 0,
    action_seed: int | None = None,
    action_space: spaces.Space | None = None,
    reset_infos: str = "all",
    infos: Callable[[Any], Any] = lambda infos: infos,
    same_spaces: bool = False,
) -> int:
    """Step ``ours`` and ``peer`` alike for ``steps`` steps, comparing every result; the episodes ended.

    - ``seed``: both are reset with it; ``action_seed`` (default ``seed``) draws the actions, from
      ``action_space`` (default: a ``Discrete`` one).
    - SB3 API only: ``reset_infos`` compares them ``"all"`` after each step (SB3's ``DummyVecEnv``
      keeps env ``i``'s until its next reset, as vecshm does), only the ``"ended"`` envs'
      (``SubprocVecEnv`` empties them on every step), or ``"none"``; ``infos`` maps each side's list
      of infos before they are compared (an episode's wall-clock time, say); ``same_spaces`` checks the
      observation spaces are equal. Rewards compare bit for bit, except against SB3's
      ``DummyVecEnv``, which casts them to float32 (vecshm keeps ``SubprocVecEnv``'s dtype): vecshm's
      are cast the same way there.
    """
    rng = np.random.default_rng(seed if action_seed is None else action_seed)
    space = ACTION_SPACES["discrete"] if action_space is None else action_space
    if isinstance(ours, gym.vector.VectorEnv):
        return _gymnasium(ours, peer, steps, seed, rng, space)
    return _sb3(ours, peer, steps, seed, rng, space, reset_infos, infos, same_spaces)


def _in_key_order(infos: dict) -> dict:
    return {key: infos[key] for key in sorted(infos)}


def _gymnasium(ours: Any, peer: Any, steps: int, seed: int, rng: np.random.Generator, space: spaces.Space) -> int:
    """Against ``SyncVectorEnv`` in SAME_STEP mode the infos' keys compare in any order: it adds an
    ended episode's ``final_obs`` before its ``final_info``, and ``AsyncVectorEnv``, which vecshm
    follows, after it (``test_same_step_infos_match_async_vector_env_key_for_key``). In DISABLED
    mode, envs whose episode ended are reset by mask on both, as a caller must."""
    any_order = isinstance(peer, SyncVectorEnv) and ours.autoreset_mode is AutoresetMode.SAME_STEP
    assert_tree_equal(ours.reset(seed=seed), peer.reset(seed=seed), "reset")
    ended, episodes = np.zeros(ours.num_envs, bool), 0
    for t in range(steps):
        actions = sample_actions(space, ours.num_envs, rng)
        if ours.autoreset_mode is AutoresetMode.DISABLED and ended.any():
            mask = ended.copy()
            assert_tree_equal(ours.reset(options={"reset_mask": mask}), peer.reset(options={"reset_mask": mask.copy()}))
        a, b = ours.step(actions), peer.step(actions)
        if any_order:
            a, b = (*a[:4], _in_key_order(a[4])), (*b[:4], _in_key_order(b[4]))
        for name, x, y in zip(("obs", "rewards", "terminations", "truncations", "infos"), a, b):
            assert_tree_equal(x, y, f"step {t} {name}")
        ended = b[2] | b[3]
        episodes += int(ended.sum())
    return episodes


def _per_env(space: spaces.Space, actions: Any, n: int) -> Any:
    """Dict/Tuple actions as SB3's DummyVecEnv indexes them: one value per env."""
    if isinstance(space, spaces.Dict):
        return [{key: value[i] for key, value in actions.items()} for i in range(n)]
    if isinstance(space, spaces.Tuple):
        return [tuple(value[i] for value in actions) for i in range(n)]
    return actions


def _sb3(
    ours: Any,
    peer: Any,
    steps: int,
    seed: int,
    rng: np.random.Generator,
    space: spaces.Space,
    reset_infos: str,
    infos: Callable[[Any], Any],
    same_spaces: bool,
) -> int:
    from stable_baselines3.common.vec_env import DummyVecEnv as SB3DummyVecEnv

    float32_rewards = isinstance(peer, SB3DummyVecEnv)
    ours.seed(seed)
    peer.seed(seed)
    assert_tree_equal(ours.reset(), peer.reset(), "reset obs")
    if same_spaces:
        assert ours.observation_space == peer.observation_space
    if reset_infos != "none":
        assert_tree_equal(list(ours.reset_infos), list(peer.reset_infos), "reset_infos")
    episodes = 0
    for t in range(steps):
        actions = sample_actions(space, ours.num_envs, rng)
        obs, rewards, dones, step_infos = ours.step(actions)
        ref_obs, ref_rewards, ref_dones, ref_infos = peer.step(_per_env(space, actions, ours.num_envs))
        assert_tree_equal(obs, ref_obs, f"step {t} obs")
        assert_tree_equal(rewards.astype(np.float32) if float32_rewards else rewards, ref_rewards, f"step {t} rewards")
        assert_tree_equal(dones, ref_dones, f"step {t} dones")
        assert_tree_equal(infos(list(step_infos)), infos(list(ref_infos)), f"step {t} infos")
        if reset_infos == "all":
            assert_tree_equal(list(ours.reset_infos), list(peer.reset_infos), f"step {t} reset_infos")
        if reset_infos != "none":
            for i in np.flatnonzero(dones):
                assert_tree_equal(ours.reset_infos[i], peer.reset_infos[i], f"step {t} reset_infos[{i}]")
        episodes += int(dones.sum())
    return episodes
