"""The body of a ``RayVecEnv`` actor: a ``ShmVecEnv`` over a contiguous share of the envs.

Every method returns its result, or a :class:`~vecshm.ray.failures.Failure` naming the driver's env
indices; nothing is raised across the Ray boundary on purpose. Observations leave through Ray's
object store as they are read from the shared segment (``copy=False``): Ray serializes a method's
return value before the actor runs its next method, so the views are never overwritten first.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Callable
from typing import Any

import numpy as np
import ray

from vecshm.ray.failures import Failure, capture
from vecshm.shared import sharing
from vecshm.shared.pickling import Pickled, PickledFactory, factories_by_value
from vecshm.shared.protocol import CallOp
from vecshm.shared.registry import adopt_registry
from vecshm.vec_env.shm_vec_env import ShmVecEnv

__all__ = ["EnvHost", "assigned_cpus", "host_options", "launch_host"]


def assigned_cpus() -> int | None:
    """Whole CPUs Ray reserved for this actor (None outside an actor, or when none were reserved)."""
    try:
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    except Exception:
        return None
    return max(1, math.floor(cpus)) if cpus else None


def host_options(num_envs: int, options: dict[str, Any]) -> dict[str, Any]:
    """The vec env options inside an actor: as many worker processes as the actor has CPUs, unless
    ``envs_per_worker`` is given (Ray does not pin actors; without this each actor would start one
    process per core of its node, and several actors per node would oversubscribe it)."""
    options = dict(options)
    cpus = assigned_cpus()
    if options.get("envs_per_worker") is None and cpus is not None:
        options["envs_per_worker"] = math.ceil(num_envs / min(cpus, num_envs))
    return options


class EnvHost:
    """Hosts envs ``offset, offset + 1, ...`` of a ``RayVecEnv`` (Ray actor ``index``).

    ``env_fns`` arrive still pickled (:class:`~vecshm.shared.pickling.PickledFactory`) and go on to the
    vecshm workers so: only the worker that builds an env loads its factory and imports its modules
    (the actor would hold PyTorch for an SB3 script's envs, 140 MiB more PSS and 1.3 s more to
    start, for nothing).
    A factory that cannot be loaded on this node (its module is not installed there) fails there,
    with its own exception, and is reported like any other start-up failure, with the actor and its
    envs named, instead of as Ray's argument-deserialization error.
    """

    def __init__(
        self, env_fns: list[PickledFactory], offset: int, index: int, options: dict[str, Any], registry: bytes
    ) -> None:
        self.offset = offset
        self.where = f"Ray actor {index} (node {ray.util.get_node_ip_address()}, pid {os.getpid()})"
        self.venv: ShmVecEnv | None = None
        self.broken: Failure | None = None
        try:
            adopt_registry(registry)  # env ids the driver registered at run time
            options = {**host_options(len(env_fns), options), "copy": False}
            self.venv = ShmVecEnv(env_fns, **options)
        except Exception as error:  # reported by the first call, with the envs named
            self.broken = capture(error, offset, self.where, "start")

    def _run(self, command: str, body: Callable[[ShmVecEnv], Any]) -> Any:
        if self.broken is not None:
            return self.broken
        try:
            return body(self.venv)
        except Exception as error:
            return capture(error, self.offset, self.where, command)

    def describe(self) -> Any:
        """Spaces and where the actor runs (host name and pid: ``close()`` waits for local actors to exit)."""
        return self._run(
            "start",
            lambda venv: {
                "observation_space": venv.observation_space,
                "action_space": venv.action_space,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "node_id": ray.get_runtime_context().get_node_id(),
                "where": self.where,
            },
        )

    def reset(self, seeds: list[int | None], options: list[dict]) -> Any:
        def body(venv: ShmVecEnv) -> tuple[Any, list[dict]]:
            venv._seeds, venv._options = list(seeds), list(options)
            obs = venv.reset()
            return obs, venv.reset_infos

        return self._run("reset", body)

    def step(self, actions: Any) -> Any:
        """``(obs, rewards, dones, infos, reset_infos)``; ``reset_infos`` only for the envs that ended."""

        def body(venv: ShmVecEnv) -> tuple[Any, ...]:
            obs, rewards, dones, infos = venv.step(actions)
            ended = np.flatnonzero(dones).tolist()
            return obs, rewards, dones, infos, {i: venv.reset_infos[i] for i in ended}

        return self._run("step", body)

    def call(self, op: CallOp, envs: list[int], args: Pickled) -> Any:
        """The engine's rare operation ``op`` on ``args`` on this actor's ``envs``: each env's result
        as its worker pickled it. Neither is loaded here (:class:`~vecshm.shared.pickling.Pickled`)."""
        return self._run(CallOp(op).name.lower(), lambda venv: venv.run.call_pickled(op, envs, args))

    def stats(self) -> Any:
        """This actor's ``ShmVecEnv.stats`` (a :class:`~vecshm.stats.VecStats`, a value that pickles)."""
        return self._run("stats", lambda venv: venv.stats)

    def reset_stats(self) -> Any:
        return self._run("stats", lambda venv: venv.reset_stats())

    def worker_pids(self) -> list[int]:
        """The pids of this actor's vecshm worker processes (for tests and for diagnosing a node)."""
        return [] if self.venv is None else [p.pid for p in self.venv.processes]

    def close(self) -> None:
        if self.venv is not None:
            self.venv.close()


_EnvHostActor = ray.remote(EnvHost)


def launch_host(
    fns: list[Any],
    share: tuple[int, int],
    k: int,
    actor_options: dict[str, Any],
    shm_options: dict[str, Any],
    registry: bytes,
) -> Any:
    """Start actor ``k`` (with Ray's ``actor_options``), hosting the envs ``fns[start:stop]`` (``share``)
    in a ``ShmVecEnv`` with ``shm_options``; each factory travels by value, loaded only on its node."""
    start, stop = share
    with sharing.collecting() as shared:
        factories = [
            PickledFactory(factories_by_value(fns, i, i + 1, f"Ray actor {k}", can_fork=False))
            for i in range(start, stop)
        ]
    if shared:
        raise ValueError(
            f"env_fns[{start}:{stop}] hold arrays shared with vecshm.share, which is per machine: a Ray actor, on this "
            "node or another, cannot map this process's segment. Load or share the data inside the env factory "
            "instead (each actor's ShmVecEnv then shares it among its own workers); docs/scaling.md"
        )
    return _EnvHostActor.options(**actor_options).remote(factories, start, k, shm_options, registry)
