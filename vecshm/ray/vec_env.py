"""``RayVecEnv``: an SB3 ``VecEnv`` whose envs live in Ray actors, each a ``ShmVecEnv`` over a share of them."""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import ray
from ray.exceptions import RayActorError

from vecshm.options import StartOptions, resolved, takes_options
from vecshm.parent.core.actions import batch_actions
from vecshm.parent.processes.lifetime import describe_envs
from vecshm.ray.actor import launch_host
from vecshm.ray.ending import alive_nodes, close_actors, end_actors, unanswered
from vecshm.ray.failures import Failure, actor_died, first_answers, restarted_step, to_exception
from vecshm.ray.shares import concat, host_spaces, options_per_actor, places_by_actor, split, writable_terminals
from vecshm.shared.errors import AlreadyPendingCallError, ClosedError, FailedError, NoAsyncCallError
from vecshm.shared.layout import tree_map
from vecshm.shared.pickling import Pickled
from vecshm.shared.protocol import Phase
from vecshm.shared.registry import snapshot_registry
from vecshm.stats import VecStats
from vecshm.vec_env.base import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn
from vecshm.vec_env.shm import SB3_CALLS

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["RayVecEnv"]

MAX_RESTARTS_PER_ACTOR = 20
IN_FLIGHT_GRACE = 1.0  # seconds for a call still running at close() to finish before its actor is killed
START_TIMEOUT = 300.0  # default seconds for the actors to be placed and build their envs


@takes_options(StartOptions)
class RayVecEnv(VecEnv):
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
        self.closed = True  # until actors exist: close() must not touch a half-built object
        self.waiting = False
        if on_actor_failure not in ("raise", "restart"):
            raise ValueError(f"on_actor_failure must be 'raise' or 'restart', got {on_actor_failure!r}")
        self._fns = list(env_fns)
        if not self._fns:
            raise ValueError("RayVecEnv needs at least one env factory")
        if not ray.is_initialized():
            ray.init()  # what Ray does on first use anyway; here before the nodes are counted
        n_actors = num_actors if num_actors is not None else min(len(self._fns), alive_nodes())
        if not 1 <= n_actors <= len(self._fns):
            raise ValueError(
                f"num_actors must be between 1 and the number of envs ({len(self._fns)}), got {num_actors}"
            )
        self._shares = split(len(self._fns), n_actors)
        self._starts = [start for start, _ in self._shares]
        self._per_actor = options_per_actor(actor_options, n_actors)
        resolved("RayVecEnv", shm_options, StartOptions)  # (a keyword no ShmVecEnv takes fails here, not in each actor)
        self._shm_options: dict[str, Any] = dict(shm_options)
        self._restart_actors = on_actor_failure == "restart"
        self.actor_timeout = actor_timeout
        self.start_timeout = start_timeout
        self._registry = snapshot_registry()
        self._restarts = [0] * n_actors
        self._last_obs: list[Any] = [None] * n_actors
        self._pending: list[ray.ObjectRef] = []
        self._awaited: dict[int, ray.ObjectRef] = {}  # the last call sent to each actor (for close)
        self._failure = ""
        self.actors: list[Any] = []
        self.closed = False
        describing: list[Any] = []
        try:
            self.actors = [self._launch(k) for k in range(n_actors)]
            describing = [a.describe.remote() for a in self.actors]
            self.hosts = self._gather(describing, "start", timeout=start_timeout)
            observation_space, action_space = host_spaces(self.hosts)
            super().__init__(len(self._fns), observation_space, action_space)
        except BaseException:
            # Actors still building their envs (Ctrl-C, say) would answer a close only once built
            self._close(busy=unanswered(dict(enumerate(describing)), wait=0.0))
            raise

    def _launch(self, k: int) -> Any:
        start, stop = self._shares[k]
        return launch_host(self._fns, (start, stop), k, self._per_actor[k], self._shm_options, self._registry)

    def _check_usable(self) -> None:
        if self.closed:
            raise ClosedError("this vec env is closed; create a new one")
        if self._failure:
            raise FailedError(f"this vec env failed earlier and can only be closed: {self._failure}")

    def _envs_of(self, k: int) -> list[int]:
        return list(range(*self._shares[k]))

    def _where(self, k: int) -> str:
        hosts = getattr(self, "hosts", None)
        return hosts[k]["where"] if hosts and isinstance(hosts[k], dict) else f"Ray actor {k}"

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
        end_actors(self.actors, getattr(self, "hosts", []), busy)
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
            stacklevel=4,
        )
        ray.kill(self.actors[k], no_restart=True)
        self.actors[k] = self._launch(k)
        start, stop = self._shares[k]
        seeds = self._seeds[start:stop] if command == "reset" else [None] * (stop - start)
        options = self._options[start:stop] if command == "reset" else [{}] * (stop - start)
        refs = [self.actors[k].describe.remote(), self.actors[k].reset.remote(seeds, options)]
        answers = first_answers(refs, self.start_timeout, where, f"restart after {command}", self._envs_of(k))
        if isinstance(answers, Failure):
            return answers
        self.hosts[k], answer = answers
        if command == "reset":
            return answer
        obs, reset_infos = answer
        return restarted_step(obs, reset_infos, self._last_obs[k], stop - start)

    # -- stepping -----------------------------------------------------------------------------------

    def reset(self) -> VecEnvObs:
        self._check_usable()
        if self.waiting:  # SB3: reset cancels a pending step; finish it and drop its results
            self.waiting = False
            self._gather(self._pending, "step")
        refs = [
            actor.reset.remote(self._seeds[start:stop], self._options[start:stop])
            for actor, (start, stop) in zip(self.actors, self._shares)
        ]
        answers = self._gather(refs, "reset")
        self._last_obs = [obs for obs, _ in answers]
        self.reset_infos = [info for _, infos in answers for info in infos]
        self._reset_seeds()
        self._reset_options()
        return concat(self._last_obs)

    def step_async(self, actions: np.ndarray) -> None:
        self._check_usable()
        if self.waiting:
            raise AlreadyPendingCallError("step_async() was called while a step is pending; call step_wait() first")
        # one batch (Dict/Tuple actions given one per env, as SB3 allows, are stacked), then each actor's rows
        actions = batch_actions(self.action_space, actions, self.num_envs)
        self._pending = [
            actor.step.remote(tree_map(lambda leaf, a=start, b=stop: leaf[a:b], actions))
            for actor, (start, stop) in zip(self.actors, self._shares)
        ]
        self._awaited = dict(enumerate(self._pending))
        self.waiting = True

    def step_wait(self) -> VecEnvStepReturn:
        self._check_usable()
        if not self.waiting:
            raise NoAsyncCallError("step_wait() was called without a pending step_async()")
        try:
            answers = self._gather(self._pending, "step")
        finally:
            self.waiting = False
            self._pending = []
        infos: list[dict] = []
        for start, (_, _, _, actor_infos, reset_infos) in zip(self._starts, answers):
            infos += writable_terminals(actor_infos)
            for i, info in reset_infos.items():
                self.reset_infos[start + i] = info
        self._last_obs = [answer[0] for answer in answers]
        rewards = np.concatenate([answer[1] for answer in answers])
        dones = np.concatenate([answer[2] for answer in answers])
        return concat(self._last_obs), rewards, dones, infos

    # -- calls on some envs -------------------------------------------------------------------------

    def _call(self, name: str, indices: VecEnvIndices, /, *args: Any, **kwargs: Any) -> list[Any]:
        """``name`` on the envs in ``indices`` (in that order, repeats and negatives allowed, as SubprocVecEnv)."""
        self._check_usable()
        envs = range(self.num_envs)
        targets = [envs[i] for i in self._get_indices(indices)]  # IndexError as SubprocVecEnv's list lookup
        by_actor = places_by_actor(self._starts, targets)
        envs_of = {k: [local for _, local in places] for k, places in by_actor.items()}
        results: list[Any] = [None] * len(targets)
        for places, values in zip(by_actor.values(), self._call_actors(name, envs_of, *args, **kwargs)):
            for (position, _), value in zip(places, values):
                results[position] = value
        return results

    def _call_actors(self, name: str, envs_of: dict[int, list[int]], /, *args: Any, **kwargs: Any) -> list[list[Any]]:
        """SB3's call ``name`` on each actor ``k``'s local envs ``envs_of[k]``: a list of results per actor.

        The arguments travel pickled to the workers, and the results pickled back, without being
        loaded in the actors (:class:`~vecshm.shared.pickling.Pickled` says why)."""
        op, call_args = SB3_CALLS[name](*args, **kwargs)
        pickled = Pickled.of(call_args)
        refs = [self.actors[k].call.remote(name, op, envs, pickled) for k, envs in envs_of.items()]
        answers = self._gather(refs, Phase.of_call(op).value, list(envs_of))  # named as ShmVecEnv names it
        return [[pickle.loads(blob) for blob in blobs] for blobs in answers]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._call("get_attr", indices, attr_name)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._call("set_attr", indices, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        return self._call("env_method", indices, method_name, *method_args, **method_kwargs)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return self._call("env_is_wrapped", indices, wrapper_class)

    def has_attr(self, attr_name: str) -> bool:
        self._check_usable()
        return all(value for values in self._call_actors("has_attr", self._local_envs(), attr_name) for value in values)

    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it is `rgb_array` to obtain images.",
                stacklevel=2,
            )
            return [None for _ in range(self.num_envs)]
        self._check_usable()
        return [image for images in self._call_actors("get_images", self._local_envs()) for image in images]

    def _local_envs(self) -> dict[int, list[int]]:
        """Every actor's envs, by their indices within it."""
        return {k: list(range(stop - start)) for k, (start, stop) in enumerate(self._shares)}

    @property
    def stats(self) -> tuple[VecStats, ...]:
        """Each actor's :attr:`ShmVecEnv.stats <vecshm.ShmVecEnv.stats>`, in actor order (docs/usage.md,
        "Where the time goes"): one remote call per actor, made only when asked. Within actor ``k``
        the envs are numbered from 0 (the driver's ``actor_envs[k][0]`` on), and "the caller" is all the
        time outside that actor's vec env: this driver's work and Ray's round trips alike. A restarted
        actor counts afresh."""
        self._check_usable()
        return tuple(self._gather([actor.stats.remote() for actor in self.actors], "stats"))

    def reset_stats(self) -> None:
        """Count every actor's :attr:`stats` from now."""
        self._check_usable()
        self._gather([actor.reset_stats.remote() for actor in self.actors], "stats")

    @property
    def actor_envs(self) -> list[tuple[int, int]]:
        """The envs each actor hosts, ``(start, stop)`` in the driver's numbering."""
        return list(self._shares)

    def worker_pids(self) -> list[list[int]]:
        """Each actor's vecshm worker pids (to check placement or to inject a fault in a test)."""
        self._check_usable()
        return ray.get([a.worker_pids.remote() for a in self.actors])

    # -- lifecycle ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Close every actor's vec env, then end the actors; on this host, wait until their processes are gone.

        An actor still in the last call sent to it (a step left in flight, or one interrupted by
        Ctrl-C) runs the close only after that call: it gets ``IN_FLIGHT_GRACE`` seconds to finish
        it, then is killed (an env that hangs would otherwise hold ``close()`` for ``CLOSE_TIMEOUT``).
        """
        awaited = getattr(self, "_awaited", {}) if ray.is_initialized() else {}
        self._close(busy=unanswered(awaited, wait=IN_FLIGHT_GRACE))

    def _close(self, busy: list[int]) -> None:
        """``close()``; ``busy`` actors are known to be in a call and are killed without waiting."""
        if self.closed:
            return
        self.closed = True
        self.waiting = False
        close_actors(self.actors, getattr(self, "hosts", []), busy, ask=not self._failure)

    def __repr__(self) -> str:
        shares = "/".join(str(stop - start) for start, stop in self._shares) if hasattr(self, "_shares") else "?"
        state = "closed" if self.closed else ("failed" if self._failure else "open")
        return f"{type(self).__name__}(num_envs={len(self._fns)}, actors={len(self._shares)}x{shares} envs, {state})"
