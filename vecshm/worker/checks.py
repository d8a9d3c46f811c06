"""What an env returned that the segment's columns or its space cannot hold, as errors that name the env."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vecshm.shared.buffers import Buffers
from vecshm.shared.errors import RemoteError
from vecshm.shared.protocol import Phase

__all__ = ["ObservationError", "unwritable_scalars"]


class ObservationError(ValueError):
    """An env returned an observation that does not fit its declared observation space."""


def unwritable_scalars(
    buffers: Buffers, start: int, rewards: Sequence[Any], terminated: Sequence[Any], truncated: Sequence[Any]
) -> list[RemoteError]:
    """A record naming each env (the first at ``start``) whose reward or flag its column cannot hold
    (the slow path, once writing them all at once failed): a number each, as the peers' arrays need."""
    columns = (
        ("reward", buffers.rewards, rewards),
        ("terminated", buffers.terminated, terminated),
        ("truncated", buffers.truncated, truncated),
    )
    records = []
    for offset in range(len(rewards)):
        index = start + offset
        for name, column, values in columns:
            try:
                column[index] = values[offset]
            except Exception as exc:
                problem = ValueError(
                    f"step() returned {name}={values[offset]!r:.100} ({type(values[offset]).__name__}), "
                    f"which is not a single number: {exc}"
                )
                records.append(RemoteError(problem, index, Phase.STEP))
                break
    return records
