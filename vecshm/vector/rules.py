"""Gymnasium's rules for ``ShmVectorEnv``: AsyncVectorEnv's argument checks, errors and info batching.

A drop-in raises what its peer raises, with its messages, and batches infos as it does; these are
the pieces of ``gymnasium.vector.AsyncVectorEnv``'s behaviour that ``ShmVectorEnv`` reproduces
(read from the installed Gymnasium where it can be), kept apart from the facade's own flow.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from enum import Enum
from typing import Any, NoReturn

import gymnasium as gym
import numpy as np
from gymnasium import logger
from gymnasium.error import CustomSpaceError
from gymnasium.spaces.utils import is_space_dtype_shape_equiv
from gymnasium.vector import AutoresetMode
from gymnasium.vector.async_vector_env import _async_worker
from gymnasium.vector.utils import batch_differing_spaces, batch_space, create_shared_memory

from vecshm.parent.core.run import VecRun
from vecshm.shared.errors import AlreadyPendingCallError, NoAsyncCallError, SpaceMismatchError, WorkerError
from vecshm.shared.protocol import AutoReset

# Gymnasium's autoreset modes -> the workers' (vecshm.shared.protocol.AutoReset)
AUTORESET = {
    AutoresetMode.NEXT_STEP: AutoReset.NEXT_STEP,
    AutoresetMode.SAME_STEP: AutoReset.SAME_STEP,
    AutoresetMode.DISABLED: AutoReset.DISABLED,
}

ASYNC_SIGNATURE = inspect.signature(gym.vector.AsyncVectorEnv.__init__)  # the installed Gymnasium's
# Where ``worker`` sits among the positional arguments (after ``self``): the sixth in Gymnasium 1.1 and 1.4
_WORKER_POSITION = list(ASYNC_SIGNATURE.parameters).index("worker") - 1


def custom_worker_argument(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The ``worker`` a ``ShmVectorEnv(...)`` call passes, by position (as in ``AsyncVectorEnv``) or
    by keyword; ``None`` when it passes none."""
    return args[_WORKER_POSITION] if len(args) > _WORKER_POSITION else kwargs.get("worker")


def raise_as_async_vector_env(error: WorkerError) -> NoReturn:
    """Env failures logged and raised as AsyncVectorEnv does: each failing env's traceback through
    ``gymnasium.logger.error``, then the last failure raised (still a ``WorkerError`` with the env
    index and command, and an instance of the env's own exception type). Called from ``except``
    clauses, so the step path pays nothing for it."""
    errors = error.errors or [error]
    for failure in errors:
        logger.error(f"Received the following error from Worker-{failure.env_index} - Shutting it down")
        logger.error(f"{failure.remote_traceback}")
    logger.error("Raising the last exception back to the main process.")
    raise errors[-1] from None


def check_worker_signature(worker: Callable[..., None]) -> None:
    """AsyncVectorEnv's first check of a custom ``worker``: it must take the arguments Gymnasium's
    own worker takes (its error, word for word). A subclass of ShmVectorEnv refuses any after it."""
    expected = inspect.signature(_async_worker)
    try:
        inspect.signature(worker).bind(*(None,) * len(expected.parameters))
    except TypeError as error:
        raise ValueError(
            f"A custom `worker` must accept {len(expected.parameters)} arguments. Got the signature "
            f"{inspect.signature(worker)} which should match {expected}."
        ) from error


def check_async_options(worker: Any, observation_mode: Any, max_concurrency: Any) -> None:
    """AsyncVectorEnv's argument checks, with its exception types and messages."""
    if max_concurrency is not None:
        if not isinstance(max_concurrency, (int, np.integer)):
            raise ValueError(f"`max_concurrency` must be an integer or None, got {type(max_concurrency)}.")
        if max_concurrency < 1:
            raise ValueError(f"`max_concurrency` must be a positive or None, got {max_concurrency}.")
    if worker is not None:  # only a subclass gets here (ShmVectorEnv itself runs it on pipes)
        check_worker_signature(worker)
        raise ValueError(
            "a subclass of ShmVectorEnv runs vecshm's own worker loop, so it cannot take a custom `worker`; "
            "ShmVectorEnv itself runs one on Gymnasium's AsyncVectorEnv pipe protocol"
        )
    if isinstance(observation_mode, tuple) and len(observation_mode) == 2:
        if not all(isinstance(space, gym.Space) for space in observation_mode):
            raise TypeError(
                "Expected both elements of observation_mode to be Spaces, "
                f"got {type(observation_mode[0])} and {type(observation_mode[1])}"
            )
    elif observation_mode not in ("same", "different"):
        raise ValueError(
            "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and batch observation "
            f"space, actual got {observation_mode}"
        )


class _NoAllocation:
    """A stand-in multiprocessing context for Gymnasium's ``create_shared_memory``: its checks run,
    nothing is allocated."""

    @staticmethod
    def Array(*args: Any, **kwargs: Any) -> None:  # noqa: N802  (multiprocessing's name)
        return None


def refuse_what_shared_memory_refuses(space: gym.Space) -> None:
    """Raise what ``AsyncVectorEnv(shared_memory=True)`` raises for an observation space it cannot
    put in shared memory: a ``TypeError`` for Sequence and Graph (no fixed shape), a ``ValueError``
    for a custom ``Space``. vecshm itself could take them (it pickles the leaves without a fixed
    size), but a drop-in raises where its peer raises; ``shared_memory=False`` takes every space in
    both. Gymnasium's own ``create_shared_memory`` decides, with nothing allocated."""
    try:
        create_shared_memory(space, n=1, ctx=_NoAllocation)  # type: ignore[arg-type]  # stands in for multiprocessing
    except CustomSpaceError as error:
        raise ValueError(
            "Using `AsyncVector(..., shared_memory=True)` caused an error, you can disable this feature with "
            "`shared_memory=False` however this is slower."
        ) from error


def check_spaces(observation_mode: Any, env_spaces: list[tuple[gym.Space, gym.Space]]) -> None:
    """AsyncVectorEnv's ``_check_spaces``: every env's spaces against env 0's, same errors and messages."""
    single_obs, single_action = env_spaces[0]
    if isinstance(observation_mode, tuple):
        single_obs = observation_mode[1]
    elif observation_mode == "different":
        try:  # AsyncVectorEnv's first check in this mode, with its message
            batch_differing_spaces([obs for obs, _ in env_spaces])
        except (ValueError, AssertionError, TypeError) as error:
            raise SpaceMismatchError(str(error)) from error
    for obs_space, _ in env_spaces:
        same = (
            single_obs == obs_space if observation_mode == "same" else is_space_dtype_shape_equiv(single_obs, obs_space)
        )
        if not same and observation_mode == "same":
            raise SpaceMismatchError(
                "AsyncVectorEnv(..., observation_mode='same') however some of the sub-environments observation spaces "
                "are not equivalent. If this is intentional, use `observation_mode='different'` instead."
            )
        if not same:
            raise SpaceMismatchError(
                "AsyncVectorEnv(..., observation_mode='different' or custom space) however the sub-environment's "
                "observation spaces do not share a common shape and dtype."
            )
    if not all(action_space == single_action for _, action_space in env_spaces):
        raise SpaceMismatchError(
            f"Some environments have an action space different from `{single_action}`. "
            "In order to batch actions, the action spaces from all environments must be equal."
        )


def _gymnasium_version() -> tuple[int, int]:
    major, minor = (re.findall(r"\d+", gym.__version__) + ["0", "0"])[:2]
    return int(major), int(minor)


# Gymnasium 1.1 to 1.3's AsyncVectorEnv asserts its reset arguments; 1.4 raises ValueError and
# TypeError, with other words for the mask. vecshm raises what the installed one raises.
_RESET_ARGUMENTS_ASSERTED = _gymnasium_version() < (1, 4)


def _bad_reset_argument(kind: type[Exception], message: str, asserted: str | None = None) -> Exception:
    """The error for a bad seed list or mask: ``kind(message)``, or the ``AssertionError`` (with
    the wording ``asserted``, where it differs) that Gymnasium before 1.4 raises."""
    return AssertionError(asserted or message) if _RESET_ARGUMENTS_ASSERTED else kind(message)


def seed_list(seed: int | list[int | None] | None, num_envs: int) -> list[int | None]:
    if seed is None:
        return [None] * num_envs
    if isinstance(seed, (int, np.integer)):
        return [int(seed) + i for i in range(num_envs)]
    seeds = list(seed)
    if len(seeds) != num_envs:
        raise _bad_reset_argument(
            ValueError,
            f"If seeds are passed as a list the length must match num_envs={num_envs} but got length={len(seeds)}.",
        )
    return seeds


def check_reset_mask(mask: Any, num_envs: int) -> np.ndarray:
    old = "`options['reset_mask': mask]`"
    if not isinstance(mask, np.ndarray):
        raise _bad_reset_argument(
            TypeError,
            f"`options['reset_mask']` must be a numpy array, got {type(mask)}",
            f"{old} must be a numpy array, got {type(mask)}",
        )
    if mask.shape != (num_envs,):
        raise _bad_reset_argument(
            ValueError,
            f"`options['reset_mask']` must have shape `({num_envs},)`, got {mask.shape}",
            f"{old} must have shape `({num_envs},)`, got {mask.shape}",
        )
    if mask.dtype != np.bool_:
        raise _bad_reset_argument(
            TypeError,
            f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}",
            f"{old} must have `dtype=np.bool_`, got {mask.dtype}",
        )
    if not mask.any():
        raise _bad_reset_argument(
            ValueError,
            f"`options['reset_mask']` must contain a boolean array with at least one True value, got reset_mask={mask}",
            f"{old} must contain a boolean array, got reset_mask={mask}",
        )
    return mask


def vector_spaces(
    run: VecRun, num_envs: int, observation_mode: Any
) -> tuple[gym.Space, gym.Space, gym.Space, gym.Space]:
    """``(single_observation_space, observation_space, single_action_space, action_space)`` as
    AsyncVectorEnv sets them for ``observation_mode`` (checked already by ``check_async_options``)."""
    single_action = run.action_space
    if isinstance(observation_mode, tuple) and len(observation_mode) == 2:
        observation_space, single_observation = observation_mode
    elif observation_mode == "same":
        single_observation = run.observation_space
        observation_space = batch_space(single_observation, num_envs)
    else:  # "different": every env's own space
        spaces = [obs_space for obs_space, _ in run.env_spaces]
        single_observation, observation_space = spaces[0], batch_differing_spaces(spaces)
    return single_observation, observation_space, single_action, batch_space(single_action, num_envs)


class CallState(Enum):
    """Which of ``AsyncVectorEnv``'s calls is pending (its ``AsyncState``, with its values)."""

    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"
    WAITING_CALL = "call"


def expect_idle(state: CallState, call: str, in_flight: bool) -> None:
    """Raise what ``AsyncVectorEnv`` raises when ``call`` comes while another call is pending, or
    (vecshm's async batches) while envs are in flight from ``send`` (``send`` and ``async_reset`` aside)."""
    if in_flight and call not in ("send", "async_reset"):
        raise AlreadyPendingCallError(
            f"Calling `{call}` while envs are in flight from send(); recv() them first", "recv"
        )
    if state is not CallState.DEFAULT:
        end = "" if call == "reset_async" else "."  # AsyncVectorEnv's messages, to the character
        raise AlreadyPendingCallError(
            f"Calling `{call}` while waiting for a pending call to `{state.value}` to complete{end}", str(state.value)
        )


def expect_pending(state: CallState, wanted: CallState, call: str, opener: str) -> None:
    """Raise what ``AsyncVectorEnv`` raises when ``call`` comes without its ``opener`` before it."""
    if state is not wanted:
        raise NoAsyncCallError(f"Calling `{call}` without any prior call to `{opener}`.", wanted.value)


def values_per_env(values: Any, num_envs: int) -> list[Any] | tuple[Any, ...]:
    """``set_attr``'s values, one per env: a list or tuple as given, any other value for every env;
    a list of another length raises what ``AsyncVectorEnv`` raises."""
    if not isinstance(values, (list, tuple)):
        return [values for _ in range(num_envs)]
    if len(values) != num_envs:
        raise ValueError(
            "Values must be a list or tuple with length equal to the number of environments. "
            f"Got `{len(values)}` values for {num_envs} environments."
        )
    return values
