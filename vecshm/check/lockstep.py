"""Two vec envs of one API stepped alike, every result compared as it comes.

The same seed resets both and the same action batches step both; the first difference is returned
with the step, the env and the part (observations, rewards, flags, infos) it lies in. Comparing as
the runs go keeps nothing in memory, whatever the env's frames and the number of steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from vecshm.check.compare import Difference, first_difference, shown

__all__ = ["Actions", "StepDifference", "action_stream", "step_vector", "step_sb3"]


@dataclass(frozen=True)
class Actions:
    """The action batches of a run, each as a Gymnasium vector env and SB3's ``VecEnv`` take it."""

    batches: list[Any]  # Gymnasium's batch (and ShmVecEnv's)
    per_env: list[Any]  # what SB3's DummyVecEnv indexes: the batch, or a list of each env's action


def action_stream(space: spaces.Space, num_envs: int, steps: int, seed: int) -> Actions:
    """``steps`` batches of ``num_envs`` actions drawn from a copy of ``space`` seeded with ``seed``."""
    space = deepcopy(space)
    space.seed(seed)
    batches, per_env = [], []
    for _ in range(steps):
        samples = [space.sample() for _ in range(num_envs)]
        empty: Any = create_empty_array(space, num_envs)
        batch = concatenate(space, samples, empty)
        batches.append(batch)
        per_env.append(samples if isinstance(space, (spaces.Dict, spaces.Tuple)) else batch)
    return Actions(batches, per_env)


@dataclass(frozen=True)
class StepDifference:
    """Where two runs first differ: ``step`` (0: the reset), the env, the part and the difference."""

    step: int
    env: int | None
    part: str
    difference: Difference

    def describe(self, ours: str = "under vecshm", reference: str = "in the reference") -> str:
        """One sentence: where, and both values (``ours`` and ``reference`` say whose each is)."""
        when = "the reset" if self.step == 0 else f"step {self.step}"
        env = f", env {self.env}" if self.env is not None else ""
        d = self.difference
        what = f" ({d.what} differ)" if d.what != "values" else ""
        return f"at {when}{env}, {self.part}{d.where()}{what}: {shown(d.ours)} {ours}, {shown(d.reference)} {reference}"

    def __str__(self) -> str:
        return self.describe()


# With values not compared (an env that is not deterministic by itself), infos are left out too:
# where its episodes end differs from run to run, and with it which keys its infos hold.
_STRUCTURE_PARTS = ("obs", "rewards", "terminations", "truncations", "dones")


def _compare(
    step: int, parts: Sequence[tuple[str, Any, Any]], space: spaces.Space, num_envs: int, values: bool
) -> StepDifference | None:
    for part, ours, reference in parts:
        if not values and part not in _STRUCTURE_PARTS:
            continue
        found = first_difference(ours, reference, values=values)
        if found is not None:
            return StepDifference(step, _env_of(part, found, ours, reference, space, num_envs), part, found)
    return None


def _env_of(part: str, found: Difference, ours: Any, reference: Any, space: spaces.Space, num_envs: int) -> int | None:
    """The env a difference lies in: the first env whose observation differs (a Dict or Tuple
    batch is indexed by key first), else the first index on the path (a batch's row, or SB3's
    list of infos)."""
    if part == "obs" and found.what == "values":
        batched = batch_space(space, num_envs)
        try:
            pairs = zip(iterate(batched, ours), iterate(batched, reference))
            return next((i for i, (a, b) in enumerate(pairs) if first_difference(a, b) is not None), None)
        except Exception:  # a batch of another structure (its own difference, reported as it is)
            return None
    return next((int(p) for p in found.path if isinstance(p, (int, np.integer))), None)


def step_vector(
    ours: gym.vector.VectorEnv,
    reference: gym.vector.VectorEnv | None,
    actions: Actions,
    seed: int,
    values: bool = True,
) -> tuple[StepDifference | None, int]:
    """Reset both Gymnasium vector envs with ``seed`` and step them on ``actions``: the first
    difference (None: they are bit-identical; with ``values`` false, of the same structure) and
    the episodes ``ours`` ended. ``ours`` runs every step, the reference until they differ; with no
    ``reference``, ``ours`` runs alone."""
    space, n = ours.single_observation_space, ours.num_envs
    reset = ours.reset(seed=seed)
    found = None
    if reference is not None:
        found = _compare(0, list(zip(("obs", "infos"), reset, reference.reset(seed=seed))), space, n, values)
    episodes = 0
    for t, batch in enumerate(actions.batches, start=1):
        step = ours.step(batch)
        episodes += int(np.sum(step[2] | step[3]))
        if reference is not None and found is None:
            parts = list(zip(("obs", "rewards", "terminations", "truncations", "infos"), step, reference.step(batch)))
            found = _compare(t, parts, space, n, values)
    return found, episodes


def step_sb3(
    ours: Any, reference: Any | None, actions: Actions, seed: int, values: bool = True
) -> tuple[StepDifference | None, int]:
    """:func:`step_vector` for SB3's ``VecEnv`` API: ``seed()`` then ``reset()``, the 4-tuple of each
    step, and ``reset_infos``. Rewards compare in the reference's dtype: SB3's ``DummyVecEnv``
    casts them to float32, where vecshm keeps the dtype ``SubprocVecEnv`` returns."""
    space, n = ours.observation_space, ours.num_envs
    ours.seed(seed)
    obs = ours.reset()
    found = None
    if reference is not None:
        reference.seed(seed)
        parts = [("obs", obs, reference.reset()), ("reset_infos", list(ours.reset_infos), list(reference.reset_infos))]
        found = _compare(0, parts, space, n, values)
    episodes = 0
    for t, (batch, per_env) in enumerate(zip(actions.batches, actions.per_env), start=1):
        obs, rewards, dones, infos = ours.step(batch)
        episodes += int(np.sum(dones))
        if reference is not None and found is None:
            ref_obs, ref_rewards, ref_dones, ref_infos = reference.step(per_env)
            parts = [
                ("obs", obs, ref_obs),
                ("rewards", rewards.astype(ref_rewards.dtype), ref_rewards),
                ("dones", dones, ref_dones),
                ("infos", list(infos), list(ref_infos)),
                ("reset_infos", list(ours.reset_infos), list(reference.reset_infos)),
            ]
            found = _compare(t, parts, space, n, values)
    return found, episodes
