"""``VecMonitor``: episode return, length and time in ``info["episode"]``, and SB3's monitor CSV."""

from __future__ import annotations

import time
import warnings

import numpy as np

from vecshm.monitor import Monitor, ResultsWriter
from vecshm.sb3 import stands_for
from vecshm.vec_env.base import VecEnv, VecEnvObs, VecEnvStepReturn, VecEnvWrapper

__all__ = ["VecMonitor"]


@stands_for("VecMonitor")
class VecMonitor(VecEnvWrapper):
    """Monitor at the vec env level (SB3 semantics; SB3's ``load_results`` reads its CSV).

    :param venv: the vec env to wrap
    :param filename: where to write the monitor CSV (a directory, or a path prefix); None: no file
    :param info_keywords: extra info keys to copy into each episode record
    """

    def __init__(self, venv: VecEnv, filename: str | None = None, info_keywords: tuple[str, ...] = ()) -> None:
        try:
            is_wrapped_with_monitor = venv.env_is_wrapped(Monitor)[0] or _sb3_monitor_wraps(venv)
        except AttributeError:
            is_wrapped_with_monitor = False
        if is_wrapped_with_monitor:
            warnings.warn(
                "The environment is already wrapped with a `Monitor` wrapper but you are wrapping it with a "
                "`VecMonitor` wrapper, the `Monitor` statistics will be overwritten by the `VecMonitor` ones.",
                UserWarning,
                stacklevel=2,
            )
        VecEnvWrapper.__init__(self, venv)
        self.episode_count = 0
        self.t_start = time.time()
        env_id = None
        if hasattr(venv, "spec") and venv.spec is not None:
            env_id = venv.spec.id
        self.results_writer: ResultsWriter | None = None
        if filename:
            self.results_writer = ResultsWriter(
                filename, header={"t_start": self.t_start, "env_id": str(env_id)}, extra_keys=info_keywords
            )
        self.info_keywords = info_keywords
        self.episode_returns = np.zeros(self.num_envs, dtype=np.float32)
        self.episode_lengths = np.zeros(self.num_envs, dtype=np.int32)

    def reset(self) -> VecEnvObs:
        obs = self.venv.reset()
        self.episode_returns = np.zeros(self.num_envs, dtype=np.float32)
        self.episode_lengths = np.zeros(self.num_envs, dtype=np.int32)
        return obs

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = self.venv.step_wait()
        self.episode_returns += rewards
        self.episode_lengths += 1
        new_infos = list(infos[:])
        for i in np.flatnonzero(dones):
            info = infos[i].copy()
            episode_info = {
                "r": self.episode_returns[i],
                "l": self.episode_lengths[i],
                "t": round(time.time() - self.t_start, 6),
            }
            for key in self.info_keywords:
                episode_info[key] = info[key]
            info["episode"] = episode_info
            self.episode_count += 1
            self.episode_returns[i] = 0
            self.episode_lengths[i] = 0
            if self.results_writer:
                self.results_writer.write_row(episode_info)
            new_infos[i] = info
        return obs, rewards, dones, new_infos

    def close(self) -> None:
        if self.results_writer:
            self.results_writer.close()
        return self.venv.close()


def _sb3_monitor_wraps(venv: VecEnv) -> bool:
    """Also warn when SB3's own Monitor is used (only if SB3 is already imported: never import it here)."""
    import sys

    module = sys.modules.get("stable_baselines3.common.monitor")
    return bool(module is not None and venv.env_is_wrapped(module.Monitor)[0])
