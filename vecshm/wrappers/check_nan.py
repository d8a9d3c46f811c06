"""``VecCheckNan``: find where NaN or inf first appear, in actions or observations, and which env."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from gymnasium import spaces

from vecshm.sb3 import stands_for
from vecshm.vec_env.base import VecEnv, VecEnvObs, VecEnvStepReturn, VecEnvWrapper

__all__ = ["VecCheckNan"]


@stands_for("VecCheckNan")
class VecCheckNan(VecEnvWrapper):
    """Warns (or raises ``ValueError``) on NaN/inf in actions, observations or rewards (SB3 semantics).

    Messages name the array, the env indices and whether the value came from the model (actions)
    or the environment (observations, rewards).
    """

    def __init__(self, venv: VecEnv, raise_exception: bool = False, warn_once: bool = True, check_inf: bool = True):
        super().__init__(venv)
        self.raise_exception = raise_exception
        self.warn_once = warn_once
        self.check_inf = check_inf
        self._user_warned = False
        self._actions: np.ndarray
        self._observations: VecEnvObs
        if isinstance(venv.action_space, spaces.Dict):
            raise NotImplementedError("VecCheckNan doesn't support dict action spaces")

    def step_async(self, actions: np.ndarray) -> None:
        self._check_val(event="step_async", actions=actions)
        self._actions = actions
        self.venv.step_async(actions)

    def step_wait(self) -> VecEnvStepReturn:
        observations, rewards, dones, infos = self.venv.step_wait()
        self._check_val(event="step_wait", observations=observations, rewards=rewards, dones=dones)
        self._observations = observations
        return observations, rewards, dones, infos

    def reset(self) -> VecEnvObs:
        observations = self.venv.reset()
        self._check_val(event="reset", observations=observations)
        self._observations = observations
        return observations

    def check_array_value(self, name: str, value: np.ndarray) -> list[tuple[str, str]]:
        """``(name, "inf"|"nan")`` for each problem in ``value``, naming the envs it is in."""
        value = np.asarray(value)
        if value.dtype.kind not in "fc":
            return []
        found = []
        for kind, bad in (("inf", np.isinf(value) if self.check_inf else None), ("nan", np.isnan(value))):
            if bad is not None and bad.any():
                envs: Any = np.flatnonzero(bad.reshape(len(bad), -1).any(axis=1)) if bad.ndim else []
                found.append((f"{name} (envs {list(map(int, envs))})" if len(envs) else name, kind))
        return found

    def _check_val(self, event: str, **kwargs: Any) -> None:
        if not self.raise_exception and self.warn_once and self._user_warned:
            return
        found = []
        for name, value in kwargs.items():
            if isinstance(value, (np.ndarray, list)):
                found += self.check_array_value(name, np.asarray(value))
            elif isinstance(value, dict):
                for inner_name, inner_val in value.items():
                    found += self.check_array_value(f"{name}.{inner_name}", inner_val)
            elif isinstance(value, tuple):
                for idx, inner_val in enumerate(value):
                    found += self.check_array_value(f"{name}.{idx}", inner_val)
            else:
                raise TypeError(f"Unsupported observation type {type(value)}.")
        if not found:
            return
        self._user_warned = True
        msg = ", ".join(f"found {kind} in {name}" for name, kind in found)
        if event == "reset":
            msg += ".\r\nOriginated from the environment observation (at reset)"
        elif event == "step_wait":
            msg += f".\r\nOriginated from the environment, Last given value was: \r\n\taction={self._actions}"
        else:
            msg += f".\r\nOriginated from the RL model, Last given value was: \r\n\tobservations={self._observations}"
        if self.raise_exception:
            raise ValueError(msg)
        warnings.warn(msg, UserWarning, stacklevel=3)
