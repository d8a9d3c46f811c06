"""``ShmVectorEnv``: a ``gymnasium.vector.VectorEnv`` (and ``AsyncVectorEnv`` drop-in) on the engine.

Gymnasium's rules are the kernel's (:mod:`vecshm.vector.gym_kernel`), and so is Gymnasium's own
result shape, of a batch whose rows are the run's envs: this class takes ``AsyncVectorEnv``'s
constructor and says that its rows are its run's envs (:class:`~vecshm.row_maps.EnvRows`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from vecshm.options import VecOptions, resolved, takes_options
from vecshm.parent.core.inspection import RunProperties
from vecshm.parent.core.run import VecRun
from vecshm.parent.engine_options import tuple_of_values
from vecshm.parent.processes.start_methods import gymnasium_start_method
from vecshm.row_maps import EnvRows
from vecshm.shared.protocol import AutoReset, CallOp
from vecshm.vector.gym_kernel import GymKernel
from vecshm.vector.rules import (
    AUTORESET,
    check_async_options,
    check_spaces,
    custom_worker_argument,
    refuse_what_shared_memory_refuses,
    vector_spaces,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["ShmVectorEnv"]


@takes_options(VecOptions)
class ShmVectorEnv(RunProperties, GymKernel):
    """Gymnasium's vector API on shared memory; accepts ``AsyncVectorEnv``'s constructor keywords.

    >>> import gymnasium as gym
    >>> from vecshm import ShmVectorEnv
    >>> envs = ShmVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])
    >>> obs, infos = envs.reset(seed=0)
    >>> obs, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
    >>> envs.close()

    With a custom ``worker`` (Gymnasium's pipe protocol) the envs run on ``AsyncVectorEnv`` itself:
    see :mod:`vecshm.vector.on_pipes`.

    The arguments before ``*`` are ``AsyncVectorEnv``'s, with its meanings (``shared_memory`` is
    always true here; ``max_concurrency`` caps the worker processes); ``reset_ahead=True`` resets an
    env whose episode ended while the caller computes, so that the next step does not wait for it
    (``autoreset_mode`` NEXT_STEP only; docs/gymnasium.md, "Resetting ahead"). ``device`` (vecshm's
    options, below) returns observations, rewards and flags of ``step``, ``reset`` and ``recv`` as
    torch tensors there (docs/gpu.md).
    """

    # The subclass that runs a custom ``worker`` on AsyncVectorEnv's pipes: it names itself, where it
    # is defined (``class ...(..., ShmVectorEnv, runs_custom_workers=True)``, vecshm.vector.on_pipes,
    # which vecshm.vector imports with this class). Not an import of it here: it derives from this
    # class, so each importing the other would be a circle.
    _on_pipes: type | None = None

    def __init_subclass__(cls, runs_custom_workers: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if runs_custom_workers:
            ShmVectorEnv._on_pipes = cls

    def __new__(cls, *args: Any, **kwargs: Any) -> ShmVectorEnv:
        """``ShmVectorEnv(..., worker=fn)`` is the subclass on pipes; any other call, this class."""
        on_pipes = ShmVectorEnv._on_pipes
        if cls is ShmVectorEnv and on_pipes is not None and custom_worker_argument(args, kwargs) is not None:
            cls = on_pipes
        return super().__new__(cls)

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        shared_memory: bool = True,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        worker: Callable[..., None] | None = None,
        observation_mode: str | tuple[gym.Space, gym.Space] = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        max_concurrency: int | None = None,
        *,
        reset_ahead: bool = False,
        **options: Unpack[VecOptions],
    ) -> None:
        self.env_fns = env_fns
        self.worker = worker  # None here: ShmVectorEnv(worker=fn) is a ShmVectorEnvOnPipes
        self.shared_memory = shared_memory  # always shared here; kept for AsyncVectorEnv compatibility
        self.context = context
        self.daemon = daemon
        self.observation_mode = observation_mode
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        check_async_options(worker, observation_mode, max_concurrency)
        if reset_ahead and self.autoreset_mode is not AutoresetMode.NEXT_STEP:
            raise ValueError(f"reset_ahead=True needs autoreset_mode NEXT_STEP, got {self.autoreset_mode}")
        self.max_concurrency = max_concurrency
        fns = list(env_fns)
        given = resolved("ShmVectorEnv", options)
        run = VecRun(
            fns,
            given,
            autoreset=AutoReset.NEXT_STEP_AHEAD if reset_ahead else AUTORESET[self.autoreset_mode],
            start_method=context if context is not None else gymnasium_start_method(sys._getframe(), fns),
            daemon=daemon,
            check_spaces=functools.partial(check_spaces, observation_mode),
            batch_dynamic=tuple_of_values,
            max_workers=max_concurrency,
        )
        self._started(run, EnvRows(run.num_envs), copy)
        self.device = given["device"]
        try:
            single_obs, obs_space, single_action, action_space = vector_spaces(run, self.num_envs, observation_mode)
            self.single_observation_space, self.observation_space = single_obs, obs_space
            self.single_action_space, self.action_space = single_action, action_space
            if shared_memory:
                refuse_what_shared_memory_refuses(self.single_observation_space)
            metadata = run.call(CallOp.GET_ATTR, [0], "metadata")[0]
            render_mode = run.call(CallOp.GET_ATTR, [0], "render_mode")[0]
        except BaseException:
            self.close()
            raise
        self.metadata = {**metadata, "autoreset_mode": self.autoreset_mode}
        self.render_mode = render_mode
