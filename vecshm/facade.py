"""What ``ShmVecEnv`` and ``ShmVectorEnv`` share: an engine, its async batches, and EnvPool's calls.

Each facade keeps its peer's API and state rules (SB3's ``waiting``, AsyncVectorEnv's pending-call
states and messages) and shapes a :class:`~vecshm.results.Batch` as its peer would. Everything
else about running envs is here or below: starting the engine, and ``send``/``recv`` over
:class:`~vecshm.batching.AsyncBatches`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from vecshm.batching import AsyncBatches
from vecshm.engine import Engine
from vecshm.results import Batch

__all__ = ["EngineFacade"]


class EngineFacade:
    """Base of both facades: ``self._engine`` and ``self._batches``, and ``send`` with its default ids."""

    _engine: Engine
    _batches: AsyncBatches
    _last_batch: np.ndarray | None

    def _start_engine(self, env_fns: Sequence[Callable[[], Any]], batch_size: int | None, **options: Any) -> None:
        """Start the workers (``options`` go to :class:`Engine`) and the async batches of ``batch_size``
        envs; nothing is left running if either fails."""
        # the engine sizes its commands for the batches (see Engine); AsyncBatches checks the size
        batch = int(batch_size) if isinstance(batch_size, (int, np.integer)) else None
        self._engine = Engine(env_fns, async_batch=batch, **options)
        self._last_batch = None
        try:
            self._batches = AsyncBatches(self._engine, batch_size)
        except BaseException:
            self._engine.close()
            raise

    @property
    def processes(self) -> list[Any]:
        """The worker processes (``multiprocessing.Process``), as the peers' ``processes``: one per
        worker, each hosting ``envs_per_worker`` envs, so fewer than ``num_envs`` when a worker hosts
        several. A restarted worker's new process replaces its old one."""
        return list(self._engine.pool.processes)

    def _check_send(self) -> None:
        """Raise if the facade's state does not allow ``send`` now (each peer has its own rules)."""
        raise NotImplementedError

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Step ``env_ids`` (default: the batch the last ``recv`` returned) without waiting."""
        self._check_send()
        if env_ids is None:
            if self._last_batch is None:
                raise ValueError("send() needs env_ids before the first recv()")
            env_ids = self._last_batch
        self._batches.send(actions, env_ids)

    def _recv_batch(self, timeout: float | None = None) -> Batch:
        """The first ``batch_size`` envs to finish; their ids become ``send``'s default."""
        batch = self._batches.recv(timeout)
        self._last_batch = batch.env_ids
        return batch
