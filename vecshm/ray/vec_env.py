"""``RayVecEnv``: an SB3 ``VecEnv`` whose envs live in Ray actors, each a ``ShmVecEnv`` over a share of them.

SB3's rules are the kernel's (:mod:`vecshm.vec_env.sb3_kernel`), exactly as ``ShmVecEnv``'s; the
actors are its run (:class:`~vecshm.ray.actor_run.RayRun`). This class says only how the actors'
answers become SB3's results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import ray

from vecshm.options import StartOptions, resolved, takes_options
from vecshm.ray.actor_run import RayRun
from vecshm.ray.ending import alive_nodes
from vecshm.ray.shares import concat, split, writable_terminals
from vecshm.row_maps import EnvRows
from vecshm.vec_env.base import VecEnvObs
from vecshm.vec_env.sb3_kernel import SB3Kernel

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["RayVecEnv"]

START_TIMEOUT = 300.0  # default seconds for the actors to be placed and build their envs


@takes_options(StartOptions)
class RayVecEnv(SB3Kernel):
    """SB3's ``VecEnv`` over Ray actors: each actor hosts a ``ShmVecEnv`` over a contiguous share of ``env_fns``.

    Semantics are ``SubprocVecEnv``'s (and ``ShmVecEnv``'s): same constructor order, auto-reset with
    ``terminal_observation`` and ``TimeLimit.truncated``, ``reset_infos``, ``seed``/``set_options``,
    ``get_attr``/``set_attr``/``env_method``/``env_is_wrapped`` with ``indices``, ``render``, ``close``.

    :param env_fns: factories, one per env (pickled to the actors with cloudpickle)
    :param num_actors: actors to spread the envs over; default one per alive node (at most one per env)
    :param actor_options: Ray actor options (``num_cpus``, ``resources``, ``scheduling_strategy``,
        placement groups, ...), one dict for every actor or a sequence with one per actor. Default
        ``{"num_cpus": 1, "scheduling_strategy": "SPREAD"}``; an actor runs as many vecshm worker
        processes as the CPUs it reserves (or as ``envs_per_worker`` implies)
    :param on_actor_failure: ``"raise"`` (default): an actor or node that dies ends the vec env with an
        ``ActorDiedError`` naming its envs. ``"restart"``: start a new actor from the same factories;
        its envs' episodes end as truncated (``TimeLimit.truncated``, ``actor_restarted`` in the info)
    :param actor_timeout: seconds to wait for the actors on any call before a ``StepTimeoutError``
        (default: wait; a dead actor or node still ends the wait as soon as Ray notices it)
    :param start_timeout: seconds for the actors (and a restarted one) to be placed and build their
        envs before a ``StepTimeoutError``: a cluster short of the resources asked for fails instead of
        hanging (None: wait, e.g. for an autoscaler)
    :param shm_options: passed to each actor's ``ShmVecEnv`` (``start_method``, ``envs_per_worker``,
        ``step_timeout``, ``on_worker_failure``, ...)

    >>> import gymnasium as gym, ray
    >>> from vecshm.ray import RayVecEnv
    >>> venv = RayVecEnv([lambda: gym.make("CartPole-v1") for _ in range(8)], num_actors=2)
    >>> obs = venv.reset()
    >>> venv.close()
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_actors: int | None = None,
        actor_options: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
        *,
        on_actor_failure: str = "raise",
        actor_timeout: float | None = None,
        start_timeout: float | None = START_TIMEOUT,
        **shm_options: Unpack[StartOptions],
    ) -> None:
        if on_actor_failure not in ("raise", "restart"):
            raise ValueError(f"on_actor_failure must be 'raise' or 'restart', got {on_actor_failure!r}")
        fns = list(env_fns)
        if not fns:
            raise ValueError("RayVecEnv needs at least one env factory")
        if not ray.is_initialized():
            ray.init()  # what Ray does on first use anyway; here before the nodes are counted
        n_actors = num_actors if num_actors is not None else min(len(fns), alive_nodes())
        if not 1 <= n_actors <= len(fns):
            raise ValueError(f"num_actors must be between 1 and the number of envs ({len(fns)}), got {num_actors}")
        resolved("RayVecEnv", shm_options, StartOptions)  # (a keyword no ShmVecEnv takes fails here, not in each actor)
        run = RayRun(
            fns,
            split(len(fns), n_actors),
            actor_options,
            dict(shm_options),
            restart_actors=on_actor_failure == "restart",
            actor_timeout=actor_timeout,
            start_timeout=start_timeout,
        )
        self._started(run, EnvRows(len(fns)), False, run.observation_space, run.action_space)

    _run: RayRun

    # -- the result shape: the actors' answers joined ---------------------------------------------

    def _results(self, batch: list[Any], device: bool) -> tuple[Any, Any, Any, Any, Any, list]:
        """Each actor's ``(obs, rewards, dones, infos, reset_infos)`` joined, in actor order; the
        actors' arrays copied (Ray's are read-only views of its object store). Only ``step_wait``
        asks (the actors have no async batches), so ``terminated`` and ``truncated`` are None."""
        infos: list[dict] = []
        for (start, _), (_, _, _, actor_infos, reset_infos) in zip(self._run.shares, batch):
            infos += writable_terminals(actor_infos)
            for i, info in reset_infos.items():
                self.reset_infos[start + i] = info
        rewards = np.concatenate([answer[1] for answer in batch])
        dones = np.concatenate([answer[2] for answer in batch])
        return concat([answer[0] for answer in batch]), rewards, dones, None, None, infos

    def _reset_results(self, batch: list[Any]) -> VecEnvObs:
        self.reset_infos = [info for _, infos in batch for info in infos]
        return concat([obs for obs, _ in batch])

    # -- what actors add --------------------------------------------------------------------------

    @property
    def actors(self) -> list[Any]:
        """The Ray actors, in order (a restarted actor replaces its old one)."""
        return self._run.actors

    @property
    def hosts(self) -> list[dict[str, Any]]:
        """Where each actor runs: its spaces, host name, pid, node id and a description."""
        return self._run.hosts

    @property
    def actor_timeout(self) -> float | None:
        return self._run.actor_timeout

    @property
    def start_timeout(self) -> float | None:
        return self._run.start_timeout

    @property
    def actor_envs(self) -> list[tuple[int, int]]:
        """The envs each actor hosts, ``(start, stop)`` in the driver's numbering."""
        return list(self._run.shares)

    def worker_pids(self) -> list[list[int]]:
        """Each actor's vecshm worker pids (to check placement or to inject a fault in a test)."""
        return self._run.worker_pids()

    def __repr__(self) -> str:
        run = getattr(self, "_run", None)
        if run is None:
            return f"{type(self).__name__}(<not started>)"
        shares = "/".join(str(stop - start) for start, stop in run.shares)
        return f"{type(self).__name__}(num_envs={run.num_envs}, actors={len(run.shares)}x{shares} envs, {run.state})"
