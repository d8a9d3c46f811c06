"""``VecNormalize``: running normalisation of observations and of rewards by the discounted return."""

from __future__ import annotations

import inspect
import pickle
from copy import deepcopy
from typing import Any

import numpy as np
from gymnasium import spaces

from vecshm.sb3 import stands_for
from vecshm.vec_env.base import VecEnv, VecEnvObs, VecEnvStepReturn, VecEnvWrapper
from vecshm.wrappers.image import is_image_space
from vecshm.wrappers.running_mean_std import RunningMeanStd

__all__ = ["VecNormalize"]


@stands_for("VecNormalize")
class VecNormalize(VecEnvWrapper):
    """Normalises observations (running mean/std) and rewards (by the std of the discounted return).

    SB3 semantics and file format: ``save``/``load`` pickle the statistics without the wrapped
    vec env; ``set_venv`` attaches one after loading.

    :param venv: the vec env to wrap
    :param training: update the statistics (turn off for evaluation)
    :param norm_obs: normalise observations
    :param norm_reward: normalise rewards
    :param clip_obs: clip normalised observations to +-``clip_obs``
    :param clip_reward: clip normalised rewards to +-``clip_reward``
    :param gamma: discount of the return whose std scales rewards
    :param epsilon: avoids division by zero
    :param norm_obs_keys: Dict observations: the keys to normalise (default: all)
    """

    obs_spaces: dict[str, spaces.Space]
    old_obs: np.ndarray | dict[str, np.ndarray]

    def __init__(
        self,
        venv: VecEnv,
        training: bool = True,
        norm_obs: bool = True,
        norm_reward: bool = True,
        clip_obs: float = 10.0,
        clip_reward: float = 10.0,
        gamma: float = 0.99,
        epsilon: float = 1e-8,
        norm_obs_keys: list[str] | None = None,
    ) -> None:
        VecEnvWrapper.__init__(self, venv)
        self.norm_obs = norm_obs
        self.norm_obs_keys = norm_obs_keys
        if self.norm_obs:
            self._sanity_checks()
            if isinstance(self.observation_space, spaces.Dict):
                self.observation_space = deepcopy(self.observation_space)
                self.obs_spaces = self.observation_space.spaces
                self.obs_rms = {key: RunningMeanStd(shape=self.obs_spaces[key].shape) for key in self.norm_obs_keys}
                for key in self.obs_rms:
                    if is_image_space(self.obs_spaces[key]):
                        self.observation_space.spaces[key] = spaces.Box(
                            -clip_obs, clip_obs, self.obs_spaces[key].shape, np.float32
                        )
            else:
                self.obs_rms = RunningMeanStd(shape=self.observation_space.shape)
                if is_image_space(self.observation_space):
                    self.observation_space = spaces.Box(-clip_obs, clip_obs, self.observation_space.shape, np.float32)
        self.ret_rms = RunningMeanStd(shape=())
        self.clip_obs = clip_obs
        self.clip_reward = clip_reward
        self.returns = np.zeros(self.num_envs)
        self.gamma = gamma
        self.epsilon = epsilon
        self.training = training
        self.norm_reward = norm_reward
        self.old_reward = np.array([])

    def _sanity_checks(self) -> None:
        if isinstance(self.observation_space, spaces.Dict):
            if self.norm_obs_keys is None:
                self.norm_obs_keys = list(self.observation_space.spaces.keys())
            for key in self.norm_obs_keys:
                if key not in self.observation_space.spaces:
                    raise ValueError(f"norm_obs_keys names {key!r}, which the Dict observation space does not have")
                if not isinstance(self.observation_space.spaces[key], spaces.Box):
                    raise ValueError(
                        f"VecNormalize only supports `gym.spaces.Box` observation spaces but {key} "
                        f"is of type {self.observation_space.spaces[key]}. "
                        "You should probably explicitly pass the observation keys "
                        " that should be normalized via the `norm_obs_keys` parameter."
                    )
        elif isinstance(self.observation_space, spaces.Box):
            if self.norm_obs_keys is not None:
                raise ValueError("`norm_obs_keys` param is applicable only with `gym.spaces.Dict` observation spaces")
        else:
            raise ValueError(
                "VecNormalize only supports `gym.spaces.Box` and `gym.spaces.Dict` observation spaces, "
                f"not {self.observation_space}"
            )

    # -- pickling: statistics only, never the wrapped vec env -------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["venv"]
        del state["class_attributes"]
        del state["returns"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "norm_obs_keys" not in state and isinstance(state["observation_space"], spaces.Dict):
            state["norm_obs_keys"] = list(state["observation_space"].spaces.keys())
        self.__dict__.update(state)
        self.venv = None  # type: ignore[assignment]

    def set_venv(self, venv: VecEnv) -> None:
        """Attach a vec env after unpickling (its observation shape must match)."""
        if self.venv is not None:
            raise ValueError("Trying to set venv of already initialized VecNormalize wrapper.")
        if _shapes(self.observation_space) != _shapes(venv.observation_space):
            raise ValueError(
                f"the saved statistics are for observations {self.observation_space}, "
                f"but the vec env has {venv.observation_space}"
            )
        self.venv = venv
        self.num_envs = venv.num_envs
        self.class_attributes = dict(inspect.getmembers(self.__class__))
        self.render_mode = venv.render_mode
        self.returns = np.zeros(self.num_envs)

    # -- stepping ---------------------------------------------------------------------------------

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = self.venv.step_wait()
        self.old_obs = obs
        self.old_reward = rewards
        if self.training and self.norm_obs:
            self._update_obs_stats(obs)
        obs = self.normalize_obs(obs)
        if self.training:
            self._update_reward(rewards)
        rewards = self.normalize_reward(rewards)
        for idx in np.flatnonzero(dones):
            if "terminal_observation" in infos[idx]:
                infos[idx]["terminal_observation"] = self.normalize_obs(infos[idx]["terminal_observation"])
        self.returns[dones] = 0
        return obs, rewards, dones, infos

    def reset(self) -> VecEnvObs:
        obs = self.venv.reset()
        self.old_obs = obs
        self.returns = np.zeros(self.num_envs)
        if self.training and self.norm_obs:
            self._update_obs_stats(obs)
        return self.normalize_obs(obs)

    def _update_obs_stats(self, obs: Any) -> None:
        if isinstance(obs, dict) and isinstance(self.obs_rms, dict):
            for key in self.obs_rms:
                self.obs_rms[key].update(obs[key])
        else:
            self.obs_rms.update(obs)

    def _update_reward(self, reward: np.ndarray) -> None:
        self.returns = self.returns * self.gamma + reward
        self.ret_rms.update(self.returns)

    # -- transforms -------------------------------------------------------------------------------

    def _normalize_obs(self, obs: np.ndarray, obs_rms: RunningMeanStd) -> np.ndarray:
        return np.clip((obs - obs_rms.mean) / np.sqrt(obs_rms.var + self.epsilon), -self.clip_obs, self.clip_obs)

    def _unnormalize_obs(self, obs: np.ndarray, obs_rms: RunningMeanStd) -> np.ndarray:
        return (obs * np.sqrt(obs_rms.var + self.epsilon)) + obs_rms.mean

    def normalize_obs(self, obs: np.ndarray | dict[str, np.ndarray]) -> np.ndarray | dict[str, np.ndarray]:
        """Normalised copy of ``obs`` (statistics unchanged)."""
        if not self.norm_obs:
            return deepcopy(obs)
        if isinstance(obs, dict) and isinstance(self.obs_rms, dict):
            return {
                key: self._normalize_obs(value, self.obs_rms[key]).astype(np.float32)
                if key in self.obs_rms
                else deepcopy(value)
                for key, value in obs.items()
            }
        return self._normalize_obs(obs, self.obs_rms).astype(np.float32)

    def normalize_reward(self, reward: np.ndarray) -> np.ndarray:
        """Rewards scaled by the return's std and clipped, as float32 (statistics unchanged)."""
        if self.norm_reward:
            reward = np.clip(reward / np.sqrt(self.ret_rms.var + self.epsilon), -self.clip_reward, self.clip_reward)
        return reward.astype(np.float32)

    def unnormalize_obs(self, obs: np.ndarray | dict[str, np.ndarray]) -> np.ndarray | dict[str, np.ndarray]:
        obs_ = deepcopy(obs)
        if self.norm_obs:
            if isinstance(obs, dict) and isinstance(self.obs_rms, dict):
                for key in self.norm_obs_keys:
                    obs_[key] = self._unnormalize_obs(obs[key], self.obs_rms[key])
            else:
                obs_ = self._unnormalize_obs(obs, self.obs_rms)
        return obs_

    def unnormalize_reward(self, reward: np.ndarray) -> np.ndarray:
        if self.norm_reward:
            return reward * np.sqrt(self.ret_rms.var + self.epsilon)
        return reward

    def get_original_obs(self) -> np.ndarray | dict[str, np.ndarray]:
        """The observations of the last step or reset, before normalisation."""
        return deepcopy(self.old_obs)

    def get_original_reward(self) -> np.ndarray:
        """The rewards of the last step, before normalisation."""
        return self.old_reward.copy()

    # -- files ------------------------------------------------------------------------------------

    @staticmethod
    def load(load_path: str, venv: VecEnv) -> VecNormalize:
        """Load statistics saved with ``save`` (or by SB3's VecNormalize) and wrap ``venv`` with them."""
        try:
            with open(load_path, "rb") as file_handler:
                vec_normalize = pickle.load(file_handler)
        except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, IndexError) as exc:
            raise ValueError(f"{load_path} is not a saved VecNormalize: {type(exc).__name__}: {exc}") from exc
        if not hasattr(vec_normalize, "set_venv") or not hasattr(vec_normalize, "ret_rms"):
            raise ValueError(f"{load_path} holds a {type(vec_normalize).__name__}, not a saved VecNormalize")
        vec_normalize.set_venv(venv)
        return vec_normalize

    def save(self, save_path: str) -> None:
        """Save the statistics and settings (not the wrapped vec env)."""
        with open(save_path, "wb") as file_handler:
            pickle.dump(self, file_handler)


def _shapes(space: spaces.Space) -> Any:
    if isinstance(space, spaces.Dict):
        return {key: _shapes(sub) for key, sub in space.spaces.items()}
    return space.shape
