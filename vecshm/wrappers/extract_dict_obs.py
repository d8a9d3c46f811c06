"""``VecExtractDictObs``: one key of a Dict observation space, as the whole observation."""

from __future__ import annotations

from typing import Any

from gymnasium import spaces

from vecshm.sb3 import stands_for
from vecshm.shared.errors import InvalidArgumentError
from vecshm.vec_env.base import VecEnv
from vecshm.wrappers.base import VecEnvObservationWrapper

__all__ = ["VecExtractDictObs"]


@stands_for("VecExtractDictObs")
class VecExtractDictObs(VecEnvObservationWrapper):
    """Keeps ``observation[key]`` only (terminal observations too)."""

    def __init__(self, venv: VecEnv, key: str) -> None:
        if not isinstance(venv.observation_space, spaces.Dict):
            raise InvalidArgumentError(
                f"VecExtractDictObs can only be used with Dict obs space, not {venv.observation_space}"
            )
        if key not in venv.observation_space.spaces:
            raise KeyError(f"key {key!r} is not in the Dict observation space; it has {list(venv.observation_space)}")
        self.key = key
        super().__init__(venv=venv, observation_space=venv.observation_space.spaces[key])

    def observation(self, observation: Any) -> Any:
        return observation[self.key]
