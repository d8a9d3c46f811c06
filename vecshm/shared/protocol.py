"""The words parent and workers exchange: commands, statuses, autoreset modes, rare calls."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Any

__all__ = [
    "Command",
    "Status",
    "AutoReset",
    "CallOp",
    "Phase",
    "Message",
    "Arena",
    "Rebuilt",
    "RebuiltReset",
    "receive_addressed",
]


class Command(IntEnum):
    """What a lane should do next; written to its command word before its doorbell is woken."""

    STEP = 1
    RESET = 2  # seeds and options follow on the control socket
    CALL = 3  # a rare call (get_attr, env_method, render, ...) follows on the control socket
    CLOSE = 4


class Status(IntEnum):
    """How a lane finished its last command; written before it wakes the parent's doorbell."""

    OK = 1
    OK_PIPED = 2  # values follow on the socket: infos too large for their arena row, or a call's answers
    ERROR = 3  # an env raised; the error follows on the socket


class AutoReset(IntEnum):
    """When an episode that just ended is reset (the engine stores raw results either way)."""

    SAME_STEP = 0  # SB3 and Gymnasium SAME_STEP: reset at once, keep the final obs and info aside
    NEXT_STEP = 1  # Gymnasium's default: the next step call resets instead of stepping
    DISABLED = 2  # the caller resets envs explicitly
    NEXT_STEP_AHEAD = 3  # NEXT_STEP, but an ended episode is reset right after its step is published


@dataclass(frozen=True)
class Rebuilt:
    """A reset request (in place of ``reset``'s keywords) for an env whose worker was rebuilt in the
    middle of its episode, in the NEXT_STEP and DISABLED modes: the worker resets the new env
    (without a seed) and returns ``last_obs``, the lost episode's last observation, as truncated
    with reward 0; ``hold_reset`` (NEXT_STEP) keeps the reset's results for the env's next step,
    as after any end of episode in that mode."""

    last_obs: Any
    hold_reset: bool


@dataclass(frozen=True)
class RebuiltReset:
    """A reset of an env whose worker was rebuilt, where no episode ends on the lost one: a reset
    that was in flight, redone, or one the caller asks of it (``kwargs``: its keywords). Its info
    says ``worker_restarted``: a seed the lost reset had is not redone."""

    kwargs: dict[str, Any]


class CallOp(IntEnum):
    """Rare operations carried over the control socket (pickled, never on the step path)."""

    GET_ATTR = 1
    SET_ATTR = 2
    HAS_ATTR = 3
    ENV_METHOD = 4
    IS_WRAPPED = 5
    RENDER = 6


class Message(str, Enum):
    """The tag of a message on a worker's control socket (the first item of its tuple)."""

    READY = "ready"  # worker -> parent: the envs exist; their spaces follow
    ATTACH = "attach"  # parent -> worker: map the segment (its spec, and its name or descriptor)
    ATTACHED = "attached"  # worker -> parent: the segment is mapped
    CLOSE = "close"  # parent -> worker, before the segment exists: close the envs and exit
    ERROR = "error"  # worker -> parent, at start-up: an env raised; its error record follows


class Arena(str, Enum):
    """Which per-env arena of the segment a pickled value lives in (or, piped, would have): the
    key of the values that come over the socket beside the segment, ``(Arena, env)``."""

    INFO = "info"  # the step's (or reset's) info
    FINAL_INFO = "final"  # the info of the episode that just ended
    OBS = "obs"  # the observation's dynamic leaves
    FINAL_OBS = "final_obs"  # the whole final observation of the episode that just ended
    ANSWER = "answer"  # a rare call's answer (it has no arena: it always comes piped)


class Phase(str, Enum):
    """What the workers were doing when a wait ended badly: errors name it, and it decides what
    else they can say (which env was running, why a worker that never reported died)."""

    CONSTRUCTION = "env construction"
    START_UP = "start-up"
    RESTART = "worker restart"
    STEP = "step"
    RESET = "reset"
    GET_ATTR = "get_attr"
    SET_ATTR = "set_attr"
    HAS_ATTR = "has_attr"
    ENV_METHOD = "env_method"
    IS_WRAPPED = "is_wrapped"
    RENDER = "render"

    def __str__(self) -> str:
        return self.value

    @property
    def runs_envs(self) -> bool:
        """Whether workers step or reset envs in this phase (and record which env is running)."""
        return self in (Phase.STEP, Phase.RESET)

    @classmethod
    def of_call(cls, op: CallOp) -> Phase:
        return cls[CallOp(op).name]


def receive_addressed(inbox: dict[int, deque[Any]], lane: int, receive: Callable[[], tuple[int, Any]]) -> Any:
    """The next message for ``lane`` on a connection its process's lanes share, whose messages
    come as ``(lane, message)``: from ``inbox``, else from ``receive``, keeping in ``inbox`` what
    arrives for the others meanwhile. Both ends (the worker process and the pool) read this way."""
    while not inbox.get(lane):
        sender, message = receive()
        inbox.setdefault(sender, deque()).append(message)
    return inbox[lane].popleft()
