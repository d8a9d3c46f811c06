"""``VecFrameStack``: the last ``n_stack`` observations of each env, stacked on the channel axis."""

from __future__ import annotations

from collections.abc import Mapping

from gymnasium import spaces

from vecshm.sb3 import stands_for
from vecshm.shared.errors import InvalidArgumentError
from vecshm.vec_env.base import VecEnv, VecEnvObs, VecEnvStepReturn, VecEnvWrapper
from vecshm.wrappers.pinned import page_locker
from vecshm.wrappers.stacked_observations import StackedObservations

__all__ = ["VecFrameStack"]


@stands_for("VecFrameStack")
class VecFrameStack(VecEnvWrapper):
    """Frame stacking (SB3 semantics), for Box and Dict observation spaces.

    >>> import gymnasium as gym
    >>> from vecshm import DummyVecEnv, VecFrameStack
    >>> venv = VecFrameStack(DummyVecEnv([lambda: gym.make("CartPole-v1")]), n_stack=4)
    >>> venv.reset().shape
    (1, 16)
    """

    def __init__(self, venv: VecEnv, n_stack: int, channels_order: str | Mapping[str, str] | None = None) -> None:
        if not isinstance(venv.observation_space, (spaces.Box, spaces.Dict)):
            raise InvalidArgumentError(
                f"VecFrameStack only works with Box and Dict observation spaces, not {venv.observation_space}"
            )
        self.stacked_obs = StackedObservations(
            venv.num_envs, n_stack, venv.observation_space, channels_order, pinned=page_locker(venv)
        )
        super().__init__(venv, observation_space=self.stacked_obs.stacked_observation_space)

    def step_wait(self) -> VecEnvStepReturn:
        observations, rewards, dones, infos = self.venv.step_wait()
        observations, infos = self.stacked_obs.update(observations, dones, infos)  # type: ignore[arg-type]
        return observations, rewards, dones, infos

    def reset(self) -> VecEnvObs:
        return self.stacked_obs.reset(self.venv.reset())  # type: ignore[arg-type]
