"""Row maps: which rows a vec env has, and where each lives among its run's envs.

Every public vec env class is a kernel (SB3's rules, :mod:`vecshm.vec_env.sb3_kernel`, or
Gymnasium's, :mod:`vecshm.vector.gym_kernel`) plus a row map and a result shape. The kernel speaks
to the run in the run's envs; the caller speaks in rows. The row map turns one into the other:

- :class:`EnvRows`: a row is an env of the run (``ShmVecEnv``, ``ShmVectorEnv``, and ``RayVecEnv``,
  whose run places each env on its actor);
- :class:`~vecshm.pettingzoo.copies.CopyRows`: a row is an agent of a copy of a ``ParallelEnv``,
  and the run's env is the copy (row ``k * num_agents + a`` lives in copy ``k``).

A row map holds no state that changes: it is fixed when the vec env starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = ["EnvRows"]


class EnvRows:
    """Rows that are the run's envs, one each, in the run's order."""

    word = "envs"  # what the run's envs are called in errors (a copy map: "copies")
    regroups = False  # whether actions must be regrouped by the run's envs (to_envs); not here
    # Around each wait for results, where the run's envs go by another name in errors; None: the
    # engine's names stand, and the step path enters no context at all.
    naming: Callable[[], contextlib.AbstractContextManager[None]] | None = None

    def __init__(self, num_envs: int) -> None:
        self.num_rows = num_envs
        self.num_envs = num_envs  # the run's envs

    def env_of(self, row: int) -> int:
        """The run's env that hosts ``row``."""
        return row

    def first_rows(self) -> Sequence[int]:
        """Each of the run's envs' first row, in the run's order (whose seed and options reset it)."""
        return range(self.num_envs)

    def to_envs(self, actions: Any, envs: int) -> Any:
        """A batch of ``envs`` of the run's envs' actions, from the rows' actions."""
        return actions

    def envs_of(self, rows: Iterable[int]) -> list[int]:
        """The run's envs a call on ``rows`` runs on, each once where rows share one. Here each
        row as it is: a repeat or a negative index is the run's to take or refuse, as a list's."""
        return list(rows)

    def per_row(self, rows: Sequence[int], envs: Sequence[int], answers: list[Any]) -> list[Any]:
        """Each of ``rows``'s answer, from the answers of ``envs`` (what :meth:`envs_of` gave)."""
        return answers

    def render_envs(self) -> list[int]:
        """The run's envs whose images the vec env returns."""
        return list(range(self.num_envs))

    def all_rows(self) -> range:
        return range(self.num_rows)

    def waiting(self) -> contextlib.AbstractContextManager[None]:
        """Around a wait off the step path (a reset, a call): :attr:`naming`, or nothing."""
        return self.naming() if self.naming is not None else contextlib.nullcontext()
