"""What finished envs leave beside the segment, and what one wait collects: values, passed along.

The shared segment holds each env's latest results until its lane runs again. What does not fit
there travels beside it: infos and observation leaves too large for their arena row come over
the lane's socket, and an episode a process restart cut short ends with the last observation the
parent saw. :class:`SideResults` carries those for the envs of the lanes one wait found finished,
so nothing about a command is left on the engine for a later call to find in the right order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

__all__ = ["SideResults", "NO_SIDE_RESULTS", "CollectedLanes", "new_collected_lanes"]


@dataclass(frozen=True)
class SideResults:
    """What finished envs left beside the segment: ``piped`` values by ``(kind, env)`` (``kind`` is
    ``info``, ``final``, ``obs`` or ``final_obs``), and ``restarted``: env -> the last observation
    of the episode its process's restart ended (its reset is what the segment now holds)."""

    piped: Mapping[tuple[str, int], bytes] = field(default_factory=dict)
    restarted: Mapping[int, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.piped or self.restarted)

    def merged(self, later: SideResults) -> SideResults:
        """Both envs' extras (an async wait may find more envs finished than one ``recv`` returns)."""
        if not later:
            return self
        if not self:
            return later
        return SideResults({**self.piped, **later.piped}, {**self.restarted, **later.restarted})

    def split(self, env_ids: Sequence[int]) -> tuple[SideResults, SideResults]:
        """Those of ``env_ids``, and the rest (an async ``recv`` returns some finished envs, not all)."""
        if not self:
            return self, self
        mine = set(env_ids)
        return self._of(lambda i: i in mine), self._of(lambda i: i not in mine)

    def _of(self, keep: Callable[[int], bool]) -> SideResults:
        """The extras of the envs ``keep`` accepts."""
        return SideResults(
            {key: v for key, v in self.piped.items() if keep(key[1])},
            {i: v for i, v in self.restarted.items() if keep(i)},
        )


NO_SIDE_RESULTS = SideResults()


class CollectedLanes(NamedTuple):
    """Lanes one wait found finished, in the order asked (or, from the ring, of their units), and
    what their envs left beside the segment."""

    lanes: np.ndarray
    extras: SideResults


# ``new_collected_lanes((lanes, extras))``: a CollectedLanes made without the Python ``__new__`` a NamedTuple
# has (one is made per wait, on the step path).
new_collected_lanes: Callable[[tuple[Any, ...]], CollectedLanes] = functools.partial(tuple.__new__, CollectedLanes)
