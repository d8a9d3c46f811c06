"""The run of a ``RayVecEnv``: its envs in Ray actors, each hosting a ``ShmVecEnv`` over a share of them.

:class:`RayRun` speaks the run protocol of SB3's kernel (:class:`~vecshm.vec_env.sb3_kernel.SB3Run`),
as the local run does: start a step or a reset, finish it, call, close, stats. SB3's rules are the
kernel's, so a ``RayVecEnv`` keeps them exactly as a ``ShmVecEnv`` does; this module holds only what
actors add: placing the envs, gathering the actors' answers, a dead actor's failure or restart, and
ending the actors at close.

``finish`` returns each actor's answer, in actor order, which ``RayVecEnv``'s result shape joins.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import gymnasium as gym
import ray
from ray.exceptions import RayActorError

from vecshm.parent.core.actions import batch_actions
from vecshm.parent.processes.lifetime import describe_envs
from vecshm.ray.actor import launch_host
from vecshm.ray.ending import close_actors, end_actors, unanswered
from vecshm.ray.failures import Failure, actor_died, first_answers, restarted_step, to_exception
from vecshm.ray.shares import host_spaces, options_per_actor, places_by_actor
from vecshm.shared.errors import ClosedError, FailedError
from vecshm.shared.layout import tree_map
from vecshm.shared.pickling import Pickled
from vecshm.shared.protocol import CallOp, Phase
from vecshm.shared.registry import snapshot_registry
from vecshm.stats import VecStats

__all__ = ["IN_FLIGHT_GRACE", "MAX_RESTARTS_PER_ACTOR", "RayRun"]

MAX_RESTARTS_PER_ACTOR = 20
IN_FLIGHT_GRACE = 1.0  # seconds for a call still running at close() to finish before its actor is killed

Results = TypeVar("Results")


class RayRun:
    """The actors of one ``RayVecEnv`` and the commands sent to them (see the module).

    :param fns: the env factories, pickled to the actors with cloudpickle
    :param shares: each actor's envs, ``(start, stop)``
    :param actor_options: each actor's Ray options
    :param shm_options: each actor's ``ShmVecEnv`` options
    :param restart_actors: whether a dead actor is replaced (its envs' episodes end as truncated)
    :param actor_timeout: seconds to wait for the actors on any call (None: wait)
    :param start_timeout: seconds for the actors to be placed and build their envs
    """

    in_flight = False  # (the actors step whole batches only: nothing is ever in flight between calls)

    def __init__(
        self,
        fns: list[Callable[[], gym.Env]],
        shares: list[tuple[int, int]],
        actor_options: Any,
        shm_options: dict[str, Any],
        *,
        restart_actors: bool,
        actor_timeout: float | None,
        start_timeout: float | None,
    ) -> None:
        self._fns, self.shares = fns, shares
        self._starts = [start for start, _ in shares]
        self._per_actor = options_per_actor(actor_options, len(shares))
        self._shm_options = shm_options
        self._restart_actors = restart_actors
        self.actor_timeout, self.start_timeout = actor_timeout, start_timeout
        self._registry = snapshot_registry()
        self._restarts = [0] * len(shares)
        self._last_obs: list[Any] = [None] * len(shares)
        self._last_reset: list[tuple[list[Any], list[dict]]] = []  # each actor's seeds and options, last reset
        self._pending: tuple[str, list[ray.ObjectRef]] | None = None  # the command between start_* and finish
        self._awaited: dict[int, ray.ObjectRef] = {}  # the last call sent to each actor (for close)
        self._failure = ""
        self.closed = False
        self.actors: list[Any] = []
        self.hosts: list[Any] = []
        describing: list[Any] = []
        try:
            self.actors = [self._launch(k) for k in range(len(shares))]
            describing = [a.describe.remote() for a in self.actors]
            self.hosts = self._gather(describing, "start", timeout=start_timeout)
            self.observation_space, self.action_space = host_spaces(self.hosts)
            self.num_envs = len(fns)
        except BaseException:
            # Actors still building their envs (Ctrl-C, say) would answer a close only once built
            self._close(busy=unanswered(dict(enumerate(describing)), wait=0.0))
            raise

    def _launch(self, k: int) -> Any:
        return launch_host(self._fns, self.shares[k], k, self._per_actor[k], self._shm_options, self._registry)

    def _envs_of(self, k: int) -> list[int]:
        return list(range(*self.shares[k]))

    def _where(self, k: int) -> str:
        hosts = self.hosts
        return hosts[k]["where"] if hosts and isinstance(hosts[k], dict) else f"Ray actor {k}"

    # -- the run protocol -------------------------------------------------------------------------

    def check_usable(self) -> None:
        if self.closed:
            raise ClosedError("this vec env is closed; create a new one")
        if self._failure:
            raise FailedError(f"this vec env failed earlier and can only be closed: {self._failure}")

    def start_step(self, actions: Any, lend: bool) -> None:
        """Send each actor its envs' rows of ``actions`` (one batch: Dict/Tuple actions given one
        per env, as SB3 allows, are stacked first). ``lend``: the actors' arrays are copies anyway."""
        actions = batch_actions(self.action_space, actions, self.num_envs)

        def share(start: int, stop: int) -> Any:
            return tree_map(lambda leaf: leaf[start:stop], actions)

        refs = [actor.step.remote(share(*envs)) for actor, envs in zip(self.actors, self.shares)]
        self._awaited = dict(enumerate(refs))
        self._pending = ("step", refs)

    def start_reset(self, requests: Sequence[dict[str, Any] | None], lend: bool) -> None:
        """Reset each actor's envs with their ``requests`` (each env's ``reset`` keywords)."""
        seeds = [None if r is None else r.get("seed") for r in requests]
        options = [{} if r is None else r.get("options", {}) for r in requests]
        self._last_reset = [(seeds[start:stop], options[start:stop]) for start, stop in self.shares]
        refs = [actor.reset.remote(*share) for actor, share in zip(self.actors, self._last_reset)]
        self._pending = ("reset", refs)

    def finish(self) -> list[Any]:
        """Each actor's answer to the pending step or reset, in actor order."""
        assert self._pending is not None, "finish() without a command started"
        command, refs = self._pending
        try:
            answers = self._gather(refs, command)
        finally:
            self._pending = None
        self._last_obs = [answer[0] for answer in answers]
        return answers

    def drain(self) -> None:
        """Nothing: the actors have no async batches."""

    def call(self, op: CallOp, env_ids: Sequence[int], *args: Any) -> list[Any]:
        """The rare operation ``op`` on ``env_ids`` (in that order, repeats and negatives allowed, as
        SubprocVecEnv's list lookup): each env's result.

        The arguments travel pickled to the workers, and the results pickled back, without being
        loaded in the actors (:class:`~vecshm.shared.pickling.Pickled` says why)."""
        envs = range(self.num_envs)
        targets = [envs[i] for i in env_ids]  # IndexError as SubprocVecEnv's list lookup
        by_actor = places_by_actor(self._starts, targets)
        pickled = Pickled.of(args)
        refs = [
            self.actors[k].call.remote(op, [local for _, local in places], pickled) for k, places in by_actor.items()
        ]
        answers = self._gather(refs, Phase.of_call(op).value, list(by_actor))  # named as ShmVecEnv names it
        results: list[Any] = [None] * len(targets)
        for places, blobs in zip(by_actor.values(), answers):
            for (position, _), blob in zip(places, blobs):
                results[position] = pickle.loads(blob)
        return results

    def stats(self) -> tuple[VecStats, ...]:
        """Each actor's ``ShmVecEnv.stats``, in actor order: one remote call per actor."""
        self.check_usable()
        return tuple(self._gather([actor.stats.remote() for actor in self.actors], "stats"))

    def reset_stats(self) -> None:
        self.check_usable()
        self._gather([actor.reset_stats.remote() for actor in self.actors], "stats")

    def hand_back(self, results: Results) -> Results:
        return results

    def worker_pids(self) -> list[list[int]]:
        self.check_usable()
        return ray.get([a.worker_pids.remote() for a in self.actors])

    def close(self) -> None:
        """Close every actor's vec env, then end the actors; on this host, wait until their processes are gone.

        An actor still in the last call sent to it (a step left in flight, or one interrupted by
        Ctrl-C) runs the close only after that call: it gets ``IN_FLIGHT_GRACE`` seconds to finish
        it, then is killed (an env that hangs would otherwise hold ``close()`` for ``CLOSE_TIMEOUT``).
        """
        awaited = self._awaited if ray.is_initialized() else {}
        self._close(busy=unanswered(awaited, wait=IN_FLIGHT_GRACE))

    def _close(self, busy: list[int]) -> None:
        """``close()``; ``busy`` actors are known to be in a call and are killed without waiting."""
        if self.closed:
            return
        self.closed = True
        self._pending = None
        close_actors(self.actors, self.hosts, busy, ask=not self._failure)

    @property
    def state(self) -> str:
        return "closed" if self.closed else ("failed" if self._failure else "open")

    # -- gathering the actors' answers ------------------------------------------------------------

    def _gather(
        self, refs: list[Any], command: str, actors: list[int] | None = None, timeout: float | None = None
    ) -> list[Any]:
        """Every answer to ``refs`` (sent to ``actors``, default all, in order); raise for any failure.

        ``timeout`` replaces ``actor_timeout`` for this wait.

        A failure during ``start``, ``reset`` or ``step`` leaves the vec env failed (only ``close()``
        works), as in ``ShmVecEnv``; a failed ``get_attr``/``env_method`` does not.
        """
        actors = list(range(len(refs))) if actors is None else actors
        self._awaited = dict(zip(actors, refs))
        fatal = command in ("start", "reset", "step")
        timeout = self.actor_timeout if timeout is None and command != "start" else timeout
        _, late = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        if late:
            envs = [i for k, ref in zip(actors, refs) if ref in late for i in self._envs_of(k)]
            where = ", ".join(self._where(k) for k, ref in zip(actors, refs) if ref in late)
            hint = "was it placed? Ray waits for the resources its actor_options ask for" if command == "start" else ""
            busy = [k for k, ref in zip(actors, refs) if ref in late]
            self._fail_with([Failure("timeout", where, command, envs, detail=hint)], busy)
        answers, failures = [], []
        for k, ref in zip(actors, refs):
            try:
                answer = ray.get(ref)
            except RayActorError as error:
                if self._restart_actors and command in ("reset", "step"):
                    answer = self._restart(k, command, error)
                else:
                    answer = actor_died(self._where(k), command, self._envs_of(k), error)
            if isinstance(answer, Failure):
                failures.append(answer)
            answers.append(answer)
        if failures:
            if fatal:
                self._fail_with(failures)
            raise to_exception(failures)
        return answers

    def _fail_with(self, failures: list[Failure], busy: Sequence[int] = ()) -> None:
        """Stop every actor (they can do nothing useful now) and raise the failures' exception;
        ``busy`` actors are still running a call (or were never placed) and are killed at once."""
        error = to_exception(failures)
        self._failure = str(error).split("\n", 1)[0]
        end_actors(self.actors, self.hosts, busy)
        raise error

    def _restart(self, k: int, command: str, error: BaseException) -> Any:
        """A new actor for dead actor ``k``, its envs reset; for a step, their episodes end as truncated."""
        self._restarts[k] += 1
        where = self._where(k)
        if self._restarts[k] > MAX_RESTARTS_PER_ACTOR:
            return actor_died(
                where, f"{command} (after {MAX_RESTARTS_PER_ACTOR} restarts, giving up)", self._envs_of(k), error
            )
        warnings.warn(
            f"{where}, hosting {describe_envs(self._envs_of(k))}, died during {command}; starting a new actor "
            f"from their factories (restart {self._restarts[k]}); their episodes end as truncated",
            RuntimeWarning,
            stacklevel=5,
        )
        ray.kill(self.actors[k], no_restart=True)
        self.actors[k] = self._launch(k)
        start, stop = self.shares[k]
        seeds, options = self._last_reset[k] if command == "reset" else ([None] * (stop - start), [{}] * (stop - start))
        refs = [self.actors[k].describe.remote(), self.actors[k].reset.remote(seeds, options)]
        answers = first_answers(refs, self.start_timeout, where, f"restart after {command}", self._envs_of(k))
        if isinstance(answers, Failure):
            return answers
        self.hosts[k], answer = answers
        if command == "reset":
            return answer
        obs, reset_infos = answer
        return restarted_step(obs, reset_infos, self._last_obs[k], stop - start)
