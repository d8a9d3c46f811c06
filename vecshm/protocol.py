"""The words parent and workers exchange: commands, statuses, autoreset modes, rare calls."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["Command", "Status", "AutoReset", "CallOp"]


class Command(IntEnum):
    """What a worker should do next; written to its command word before its doorbell rings."""

    STEP = 1
    RESET = 2  # seeds and options follow on the control socket
    CALL = 3  # a rare call (get_attr, env_method, render, ...) follows on the control socket
    CLOSE = 4


class Status(IntEnum):
    """How a worker finished its last command; written before it rings the parent's doorbell."""

    OK = 1
    OK_PIPED_INFOS = 2  # some infos did not fit their arena slot: they follow on the socket
    ERROR = 3  # an env raised; the error follows on the socket


class AutoReset(IntEnum):
    """When an episode that just ended is reset (the engine stores raw results either way)."""

    SAME_STEP = 0  # SB3 and Gymnasium SAME_STEP: reset at once, keep the final obs and info aside
    NEXT_STEP = 1  # Gymnasium's default: the next step call resets instead of stepping
    DISABLED = 2  # the caller resets envs explicitly
    NEXT_STEP_AHEAD = 3  # NEXT_STEP, but an ended episode is reset right after its step is published


class CallOp(IntEnum):
    """Rare operations carried over the control socket (pickled, never on the step path)."""

    GET_ATTR = 1
    SET_ATTR = 2
    HAS_ATTR = 3
    ENV_METHOD = 4
    IS_WRAPPED = 5
    RENDER = 6
