"""``ShmVecEnv``: SB3's ``SubprocVecEnv`` semantics on the shared-memory engine.

SB3's rules are the kernel's (:mod:`vecshm.vec_env.sb3_kernel`); this class says only that its rows
are its run's envs (:class:`~vecshm.row_maps.EnvRows`) and how a batch becomes SB3's results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from vecshm.options import ProcessOptions, resolved, takes_options
from vecshm.parent.core.inspection import RunProperties
from vecshm.parent.core.run import VecRun
from vecshm.parent.handback.results import Batch
from vecshm.row_maps import EnvRows
from vecshm.sb3 import stands_for
from vecshm.shared.protocol import AutoReset
from vecshm.vec_env.base import VecEnvObs, VecEnvStepReturn, stack_dynamic
from vecshm.vec_env.sb3_kernel import SB3AsyncBatches

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["ShmVecEnv"]


@stands_for("SubprocVecEnv", one_way=True)  # (a SubprocVecEnv lacks the async API)
@takes_options(ProcessOptions)
class ShmVecEnv(RunProperties, SB3AsyncBatches):
    """Drop-in replacement for ``SubprocVecEnv``: workers write straight into shared memory.

    :param env_fns: factories, one per env (cloudpickled, so lambdas work with every start method)
    :param start_method: ``"fork"``, ``"forkserver"`` or ``"spawn"``; default as SB3 (forkserver)

    ``device`` (vecshm's options, below) returns the results of ``recv()`` as torch tensors there;
    ``step`` and ``reset`` stay numpy, as SB3 expects (docs/gpu.md).

    >>> import gymnasium as gym
    >>> from vecshm import ShmVecEnv
    >>> venv = ShmVecEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])
    >>> obs = venv.reset()
    >>> obs, rewards, dones, infos = venv.step(np.zeros(4, dtype=np.int64))
    >>> venv.close()
    """

    def __init__(
        self,
        env_fns: list[Callable[[], gym.Env]],
        start_method: str | None = None,
        **options: Unpack[ProcessOptions],
    ) -> None:
        fns = list(env_fns)
        given = resolved("ShmVecEnv", options, ProcessOptions)
        copy = given.pop("copy")  # (the facade's: each batch's observations as arrays of their own, or views)
        run = VecRun(
            fns,
            given,
            autoreset=AutoReset.SAME_STEP,
            reward_codes=True,  # rewards in np.stack's dtype, as SubprocVecEnv returns them
            start_method=start_method,
            batch_dynamic=stack_dynamic,
        )
        self._started(run, EnvRows(len(fns)), copy, run.observation_space, run.action_space)

    # -- stepping ---------------------------------------------------------------------------------

    def _prepared(self) -> list[dict[str, Any]]:
        """The usual step's infos, made while the workers run rather than after (0.6 us for 8 envs)."""
        return [{"TimeLimit.truncated": False} for _ in range(self.num_envs)]

    def _step_results(self, batch: Batch, prepared: list[dict[str, Any]]) -> VecEnvStepReturn:
        obs, rewards, dones, _, _, infos = self._results(batch, device=False, usual=prepared)
        return obs, rewards, dones, infos

    def _results(self, batch: Batch, device: bool, usual: list | None = None) -> tuple[Any, Any, Any, Any, Any, list]:
        """SB3-shaped results of ``batch``: numpy (``step``), or observations, rewards and flags as
        the run's outputs give them (``device``: ``recv``, which hands tensors to a ``device``).

        ``reset_infos[i]`` takes the info of env ``i``'s automatic reset and keeps it until the
        env's next reset, as in SB3's DummyVecEnv. ``usual``: the infos of a step where no env said
        anything and no episode ended, made beforehand (else made here when needed).
        """
        ids, terminated, truncated = batch.ids, batch.terminated, batch.truncated
        dones = terminated | truncated
        flags = dones.tolist()
        if True not in flags and batch.infos_empty():  # the usual step: no info, no episode ended
            infos = usual if usual is not None else [{"TimeLimit.truncated": False} for _ in flags]
        else:
            infos = self._infos(batch, ids, terminated, truncated, flags)
        rewards = batch.stacked_rewards()
        if device:
            obs, rewards, terminated, truncated = self._run.step_results(batch, rewards, self.copy)
            return obs, rewards, dones, terminated, truncated, infos
        return batch.observations(self.copy), rewards, dones, terminated, truncated, infos

    def _infos(self, batch: Batch, ids: Sequence[int], terminated: Any, truncated: Any, flags: list[bool]) -> list:
        """SB3's info dicts of ``batch`` (``flags``: its envs' dones), with the final observation and
        info of each episode that ended, and ``worker_restarted`` where a restart ended one."""
        infos = batch.infos()
        for info, done in zip(infos, flags):
            if not done:
                info["TimeLimit.truncated"] = False  # as SubprocVecEnv, on every step; ended envs' below
        ended = [k for k, done in enumerate(flags) if done] if True in flags else []
        final_infos = batch.infos([ids[k] for k in ended], "final") if ended else []
        for k, step_info in zip(ended, final_infos):
            i = ids[k]
            step_info["TimeLimit.truncated"] = bool(truncated[k] and not terminated[k])
            step_info["terminal_observation"] = batch.final_observation(i)
            self.reset_infos[i] = infos[k]
            infos[k] = step_info
        if batch.restarted:
            for k, i in enumerate(ids):
                if i in batch.restarted:
                    infos[k]["worker_restarted"] = True
        return infos

    def _recv_results(self, batch: Batch) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict], np.ndarray]:
        obs, rewards, _, terminated, truncated, infos = self._results(batch, device=True)
        return obs, rewards, terminated, truncated, infos, batch.env_ids

    def _reset_results(self, batch: Batch) -> VecEnvObs:
        self.reset_infos = batch.infos()
        return batch.observations(self.copy)

    # -- lifecycle --------------------------------------------------------------------------------

    def __repr__(self) -> str:
        run = getattr(self, "_run", None)
        if run is None:
            return f"{type(self).__name__}(<not started>)"
        sizes = sorted({b - a for a, b in run.plan.process_slices})
        per_worker = "/".join(map(str, sizes))
        return (
            f"{type(self).__name__}(num_envs={run.num_envs}, workers={run.plan.num_processes}x{per_worker} envs, "
            f"start_method={run.start_method!r}, shared={run.nbytes / 2**20:.2f} MiB, "
            f"{'closed' if self.closed else 'open'})"
        )
