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

from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

__all__ = ["EnvRows"]


class EnvRows:
    """Rows that are the run's envs, one each, in the run's order."""

    word = "envs"  # what the run's envs are called in errors (a copy map: "copies")
    regroups = False  # whether actions must be regrouped by the run's envs (to_envs); not here

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

    def sent(self, actions: Any, env_ids: Any) -> Any:
        """The run's envs' actions for an async batch sent to ``env_ids`` (None, before any
        ``recv``: as given, for the run to refuse), from the rows' actions."""
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

    def named(self, error: BaseException) -> BaseException:
        """``error`` of the engine, which calls each of the run's envs an env, as the rows' caller
        should read it (here: as it is)."""
        return error

    def raise_named(self, error: BaseException) -> NoReturn:
        """Raise ``error`` as :meth:`named` gives it. The kernels call it from an ``except`` clause,
        so that the step path pays nothing for it."""
        named = self.named(error)
        if named is error:
            raise error
        raise named from None
