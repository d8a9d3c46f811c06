"""A failure inside a Ray actor, carried to the driver as data, with the envs numbered as the driver numbers them.

Raised inside an actor, vecshm's exceptions would reach the driver wrapped in Ray's ``RayTaskError``,
naming env indices that count from the actor's first env. The actor returns a :class:`Failure`
instead, and the driver rebuilds vecshm's own exception from it, so ``except WorkerError``,
``error.env_index`` and ``error.env_indices`` mean what they mean with ``ShmVecEnv``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import cloudpickle
import numpy as np
import ray
from ray.exceptions import RayActorError

from vecshm.parent.processes.lifetime import describe_envs, describe_exit
from vecshm.shared.errors import (
    ActorDiedError,
    RemoteError,
    StepTimeoutError,
    WorkerDiedError,
    WorkerError,
    remote_errors,
)
from vecshm.shared.layout import tree_map

__all__ = ["Failure", "capture", "actor_died", "to_exception", "restarted_step", "first_answers"]


@dataclass
class Failure:
    """What went wrong in one actor: ``kind`` is "env", "worker died", "timeout", "actor died" or "other"."""

    kind: str
    where: str  # "Ray actor 1 (node 10.0.0.2, pid 4242)"
    command: str
    env_indices: list[int] = field(default_factory=list)
    records: list[RemoteError] = field(default_factory=list)  # kind "env": each env's exception
    exitcode: int | None = None
    detail: str = ""
    exception: bytes | None = None  # kind "other": the exception itself, cloudpickled when it can be


def capture(error: BaseException, offset: int, where: str, command: str) -> Failure:
    """The failure ``error`` (raised by the actor's vec env, whose env 0 is the driver's ``offset``) describes."""
    every = (error.errors or [error]) if isinstance(error, WorkerError) else []
    if every and all(e.record is not None for e in every):
        records = []
        for e in every:
            record = copy.copy(cast(RemoteError, e.record))  # not None: checked above
            if record.env_index is not None:
                record.env_index += offset
            record.command = f"{record.command} in {where}"
            records.append(record)
        envs = [r.env_index for r in records if r.env_index is not None]
        return Failure("env", where, command, envs, records)
    if isinstance(error, WorkerDiedError):
        envs = [i + offset for i in error.env_indices]
        return Failure("worker died", where, command, envs, exitcode=error.exitcode)
    if isinstance(error, StepTimeoutError):
        return Failure("timeout", where, command, [i + offset for i in error.env_indices])
    try:
        blob = cloudpickle.dumps(error)
    except Exception:
        blob = None
    return Failure("other", where, command, detail=f"{type(error).__qualname__}: {error}", exception=blob)


def actor_died(where: str, command: str, env_indices: list[int], reason: BaseException | str) -> Failure:
    """The failure of an actor that died (or whose node was lost) while it hosted ``env_indices``."""
    first, _, rest = str(reason).strip().partition("\n")
    detail = first.rstrip(".") + (f".\n\nRay's report:\n{rest.strip()}" if rest.strip() else "")
    return Failure("actor died", where, command, list(env_indices), detail=detail)


def to_exception(failures: list[Failure]) -> BaseException:
    """The exception to raise in the driver for the failures of one command (one per failed actor)."""
    envs_failed = [f for f in failures if f.kind == "env"]
    if envs_failed:  # every env's exception, in env order, as ShmVecEnv reports them
        return remote_errors([record for f in envs_failed for record in f.records])
    first = failures[0]
    if first.kind == "worker died":
        return WorkerDiedError(
            f"the vecshm worker hosting {describe_envs(first.env_indices)} in {first.where} "
            f"{describe_exit(first.exitcode)} during {first.command}. "
            "The vec env cannot continue; close() it and create a new one.",
            first.env_indices,
            first.exitcode,
        )
    if first.kind == "timeout":
        hint = f" ({first.detail})" if first.detail else ""
        return StepTimeoutError(
            f"env(s) {first.env_indices} in {first.where} did not finish {first.command} within the timeout{hint}; "
            "the vec env can only be closed now",
            first.env_indices,
        )
    if first.kind == "actor died":
        summary, _, report = first.detail.partition("\n")
        return ActorDiedError(
            f"{first.where}, hosting {describe_envs(first.env_indices)}, died during {first.command}: "
            f"{summary.rstrip('.')}. "
            "The vec env cannot continue; close() it and create a new one "
            "(or pass on_actor_failure='restart')." + (f"\n{report}" if report else ""),
            first.env_indices,
            None,
        )
    if first.exception is not None:
        try:
            error = cloudpickle.loads(first.exception)
        except Exception:
            error = None
        if isinstance(error, BaseException):
            if hasattr(error, "add_note"):  # Python 3.11+: say where it was raised
                error.add_note(f"(raised in {first.where} during {first.command})")
            return error
    return RuntimeError(f"{first.where} failed during {first.command}: {first.detail}")


def restarted_step(obs: Any, reset_infos: list[dict], last: Any, n: int) -> tuple[Any, ...]:
    """An actor's step answer for its ``n`` envs after a restart: the new actor's reset ``obs``, each
    episode ended as truncated on the ``last`` observation the driver saw, and the reset infos."""

    def row(i: int) -> Callable[[np.ndarray], np.ndarray]:
        return lambda leaf: leaf[i].copy()

    infos = [
        {
            "TimeLimit.truncated": True,
            "terminal_observation": tree_map(row(i), last),
            "actor_restarted": True,
            "worker_restarted": True,
        }
        for i in range(n)
    ]
    # rewards of 0.0 as a Python float's, the dtype ShmVecEnv gives a reset's
    return obs, np.zeros(n, dtype=np.float64), np.ones(n, dtype=bool), infos, dict(enumerate(reset_infos))


def first_answers(refs: list[Any], timeout: float | None, where: str, what: str, envs: list[int]) -> Any:
    """The answers to a new actor's first calls (``refs``), or the :class:`Failure` that ended them:
    not answered within ``timeout``, the actor dead, or a failure it reported (``what``: the command)."""
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
    if len(ready) < len(refs):
        return Failure("timeout", where, what, envs, detail="the new actor")
    try:
        answers = ray.get(refs)
    except RayActorError as died:
        return actor_died(where, what, envs, died)
    return next((answer for answer in answers if isinstance(answer, Failure)), answers)
