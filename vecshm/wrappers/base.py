"""Hook bases: a wrapper that only transforms observations overrides one method."""

from __future__ import annotations

from typing import Any

import numpy as np

from vecshm.vec_env.base import VecEnvObs, VecEnvStepReturn, VecEnvWrapper

__all__ = ["VecEnvObservationWrapper"]


class VecEnvObservationWrapper(VecEnvWrapper):
    """Applies ``observation`` to reset and step observations and to each ``terminal_observation``.

    ``observation`` receives either a batch (leading env axis) or one env's terminal observation;
    stateless transforms written with NumPy indexing from the end handle both.
    """

    def observation(self, observation: Any) -> Any:
        raise NotImplementedError

    def reset(self) -> VecEnvObs:
        return self.observation(self.venv.reset())

    def step_wait(self) -> VecEnvStepReturn:
        observations, rewards, dones, infos = self.venv.step_wait()
        for i in np.flatnonzero(dones):
            if "terminal_observation" in infos[i]:
                infos[i]["terminal_observation"] = self.observation(infos[i]["terminal_observation"])
        return self.observation(observations), rewards, dones, infos
