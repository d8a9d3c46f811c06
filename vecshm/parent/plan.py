"""How a vec env's envs map to worker processes and lanes: decided once, then only read.

A worker *process* hosts a contiguous slice of envs. A *lane* is what a command runs on: the envs
it steps together, and publishes together when the last is done; each lane has its own control
words in the segment. By default a lane is a whole process's envs. For async batches that are not
exactly one process's envs, each env is a lane of its own, and a process hosts several: it runs
the commands of those that have one, one after the other, and publishes each env as soon as it is
done, so a batch fills env by env (docs/design.md, "Commands env by env"). The pool, the pinning
and the batches all read the one :class:`VecEnvPlan`; none works these tables out again.

Public names and error messages keep the peers' word for a process, *worker* (``envs_per_worker``,
``WorkerDiedError``, "worker 1 (envs 2-3) was killed"); inside the engine a *lane* is never called
a worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vecshm.shared.slices import split_envs

__all__ = ["VecEnvPlan", "as_env_list", "COMMANDS"]

COMMANDS = ("auto", "per_process", "per_env")  # how a plan sizes commands (see VecEnvPlan.build)


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


@dataclass(frozen=True)
class VecEnvPlan:
    """The tables of one vec env. ``process_slices[p]``: the envs process ``p`` hosts;
    ``lane_slices[lane]``: the envs a lane steps; ``process_lanes[p]``: the lanes process ``p``
    hosts; ``process_of[lane]``: a lane's process; ``env_lane[i]``: env ``i``'s lane."""

    num_envs: int
    process_slices: tuple[tuple[int, int], ...]
    lane_slices: tuple[tuple[int, int], ...]
    process_lanes: tuple[tuple[int, int], ...]
    process_of: tuple[int, ...]
    env_lane: np.ndarray
    all_lanes: np.ndarray
    env_table: np.ndarray | None  # envs by lane, where every lane holds as many (else None)

    @classmethod
    def build(
        cls,
        num_envs: int,
        envs_per_worker: int | None,
        num_cores: int,
        max_workers: int | None = None,
        async_batch: int | None = None,
        commands: str = "auto",
    ) -> VecEnvPlan:
        """The plan for ``num_envs`` envs: process slices from ``split_envs``. ``commands``:
        ``"auto"`` runs them env by env where async batches of ``async_batch`` envs are not exactly
        one process's envs; ``"per_process"`` never does, ``"per_env"`` always does (to measure
        the choice)."""
        if commands not in COMMANDS:
            raise ValueError(f"commands must be one of {COMMANDS}, got {commands!r}")
        processes = split_envs(num_envs, envs_per_worker, num_cores, max_workers)
        per_env = commands == "per_env" or (
            commands == "auto"
            and async_batch is not None
            and 0 < async_batch < num_envs
            and any(stop - start != async_batch for start, stop in processes)
        )
        if per_env:
            lanes, process_lanes = [(i, i + 1) for i in range(num_envs)], processes
        else:
            lanes, process_lanes = processes, [(p, p + 1) for p in range(len(processes))]
        sizes = [b - a for a, b in lanes]
        env_lane = np.repeat(np.arange(len(lanes)), sizes)
        uniform = len(set(sizes)) == 1
        return cls(
            num_envs=num_envs,
            process_slices=tuple(processes),
            lane_slices=tuple(lanes),
            process_lanes=tuple(process_lanes),
            process_of=tuple(p for p, (a, b) in enumerate(process_lanes) for _ in range(a, b)),
            env_lane=_frozen(env_lane),
            all_lanes=_frozen(np.arange(len(lanes))),
            env_table=_frozen(np.arange(num_envs).reshape(len(lanes), -1)) if uniform else None,
        )

    @property
    def num_processes(self) -> int:
        return len(self.process_slices)

    def core_each(self, num_cores: int) -> bool:
        """Whether the parent and every worker process may each have one of ``num_cores`` cores:
        else the parent shares one with a worker (it hands its core over in a synchronous step), and
        spins yield their core at every turn (vecshm.shared.sync.spin_for)."""
        return self.num_processes < num_cores

    @property
    def num_lanes(self) -> int:
        return len(self.lane_slices)

    def env_ids_of(self, lanes: np.ndarray) -> np.ndarray:
        """The envs of ``lanes``, lane by lane (a new array)."""
        if self.env_table is not None:
            return self.env_table[lanes].reshape(-1)
        return np.concatenate([np.arange(*self.lane_slices[lane]) for lane in lanes.tolist()])

    def lane_envs(self, lane: int) -> list[int]:
        return list(range(*self.lane_slices[lane]))

    def process_envs(self, p: int) -> list[int]:
        return list(range(*self.process_slices[p]))

    def ring_unit_rows(self, env_bytes: int, min_unit_bytes: int) -> int:
        """Rows per unit of the async ring (see :mod:`vecshm.parent.handback.ring`), or 0 to copy async batches.

        A unit holds one lane's envs, so every lane must hold as many. Observations of
        ``env_bytes`` too small for lending to pay (a unit under ``min_unit_bytes``) are copied."""
        if self.env_table is None:
            return 0
        rows = self.env_table.shape[1]
        return rows if env_bytes and rows * env_bytes >= min_unit_bytes else 0


def as_env_list(env_fns: Any) -> list[Any]:
    fns = list(env_fns)
    for i, fn in enumerate(fns):
        if not callable(fn):
            raise TypeError(
                f"env_fns[{i}] is {type(fn).__name__}, not a callable that returns an env; "
                "pass factories, e.g. [lambda: gym.make('CartPole-v1') for _ in range(n)]"
            )
    if not fns:
        raise ValueError("env_fns is empty: a vec env needs at least one env factory")
    return fns
