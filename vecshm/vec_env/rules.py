"""SB3's state rules, written once for every SB3-facing vec env on a run.

``SubprocVecEnv`` and ``DummyVecEnv`` keep one piece of state, ``waiting`` (a ``step_async`` whose
``step_wait`` has not come yet), and a few rules around it, which vecshm's SB3-facing classes keep
alike: :class:`~vecshm.ShmVecEnv` (an env a row) and :class:`~vecshm.pettingzoo.AgentVecEnv` (an
agent of a copy a row). :class:`SB3RunVecEnv` holds them, and each subclass says only how its rows
map onto the run's envs and how a batch becomes SB3's results:

- ``step_wait`` without a pending ``step_async`` is a ``NoAsyncCallError``;
- a call on the envs (``get_attr``, ``env_method``, ...) while a step is pending, or while envs sent
  with ``send`` are in flight, is an ``AlreadyPendingCallError``: ``SubprocVecEnv`` would hand the
  step's results to the call and the call's to ``step_wait``, so no answer is the peers';
- ``reset()`` cancels a pending step (finished, its results dropped) and whatever async batches
  have in flight, then resets every env with the seeds and options set since the last reset;
- ``close()`` may be called twice; every other call after it is a ``ClosedError``;
- ``get_images()`` warns and returns Nones unless the envs render ``rgb_array``, as SB3's.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from vecshm.parent.core.inspection import RunProperties
from vecshm.parent.handback.results import Batch
from vecshm.shared.errors import AlreadyPendingCallError, NoAsyncCallError
from vecshm.shared.protocol import CallOp
from vecshm.vec_env.base import VecEnv

__all__ = ["SB3RunVecEnv"]


class SB3RunVecEnv(RunProperties, VecEnv):
    """SB3's ``VecEnv`` on a run, with SB3's state rules (see the module)."""

    waiting: bool
    closed: bool
    copy: bool
    in_flight_rows = "envs"  # what the run's envs are, in the errors (the multi-agent class: copies)
    # Around each wait for results, where the run's envs go by another name in errors (the
    # multi-agent class: copies); None: none (no context entered on the step path)
    naming: Callable[[], contextlib.AbstractContextManager[None]] | None = None

    def _reset_requests(self) -> list[dict[str, Any]]:
        """Each of the run's envs' ``reset`` keywords, from the seeds and options set since the last reset."""
        raise NotImplementedError

    def _render_ids(self) -> list[int]:
        """The run's envs whose images ``get_images()`` returns."""
        return list(range(self._run.num_envs))

    # -- stepping ---------------------------------------------------------------------------------

    def step_async(self, actions: np.ndarray) -> None:
        self._check_idle("step_async")
        self._run.start_step(actions, self.copy)
        self.waiting = True

    def _pending_step(self) -> Batch:
        """The results of the pending step (``step_wait``'s), which is then no longer pending."""
        self._run.check_usable()
        if not self.waiting:
            raise NoAsyncCallError("step_wait() was called without a pending step_async()")
        self.waiting = False
        if self.naming is None:
            return self._run.finish()
        with self.naming():
            return self._run.finish()

    def _reset_batch(self) -> Batch:
        """``reset()``'s results: a pending step and the async batches in flight are finished and
        dropped first; the seeds and options set since the last reset are used up."""
        self._run.check_usable()
        with self.naming() if self.naming is not None else contextlib.nullcontext():
            if self.waiting:
                self.waiting = False
                self._run.finish()
            self._run.drain()
            self._run.start_reset(self._reset_requests(), self.copy)
            batch = self._run.finish()
        self._reset_seeds()
        self._reset_options()
        return batch

    # -- async batches (EnvPool style) ------------------------------------------------------------

    def async_reset(self) -> None:
        """Reset every env without waiting; ``recv()`` returns the reset observations batch by batch."""
        self._run.check_usable()
        self._run.async_reset(self._reset_requests())
        self._reset_seeds()
        self._reset_options()

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Step ``env_ids`` (default: the batch the last ``recv`` returned) without waiting."""
        self._run.check_usable()
        self._run.send(actions, env_ids)

    def _next_batch(self) -> Batch:
        """``recv()``'s results: the first ``batch_size`` of the run's envs to finish."""
        self._run.check_usable()
        if self.naming is None:
            return self._run.recv()
        with self.naming():
            return self._run.recv()

    # -- calls ------------------------------------------------------------------------------------

    def _check_idle(self, name: str) -> None:
        """Raise unless the vec env is usable and no step holds its workers (``name``: the caller's method)."""
        self._run.check_usable()
        if self.waiting:
            raise AlreadyPendingCallError(f"{name}() was called while a step is pending; call step_wait() first")
        if self._run.in_flight:
            raise AlreadyPendingCallError(
                f"{name}() was called while {self.in_flight_rows} are in flight from send()/async_reset(); "
                "recv() them first"
            )

    def get_images(self) -> Sequence[np.ndarray | None]:
        ids = self._render_ids()
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it is `rgb_array` to obtain images.",
                stacklevel=2,
            )
            return [None for _ in ids]
        self._check_idle("get_images")
        return self._run.call(CallOp.RENDER, ids)

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.waiting = False
        self._run.close()
