"""Rare calls on some envs (``get_attr``, ``env_method``, ``render``, ...): which lanes host the envs.

A call travels the same trip as a step (:class:`~vecshm.parent.core.commands.Commands`: start,
wait, collect, with the same failure policy); the only thing it adds is how the envs it names are
grouped by the lanes hosting them, which this module says.
"""

from __future__ import annotations

from collections.abc import Sequence

from vecshm.parent.plan import VecEnvPlan

__all__ = ["by_lane"]


def by_lane(plan: VecEnvPlan, env_ids: Sequence[int]) -> tuple[list[int], dict[int, list[int]]]:
    """``env_ids`` checked, a negative index counting from the end as in a list (an ``IndexError``
    past either end), and the envs of each lane hosting one of them, in the order given."""
    n = plan.num_envs
    ids = [int(i) for i in env_ids]
    for i in ids:
        if not -n <= i < n:
            raise IndexError(f"env index {i} is out of range for {n} envs")
    ids = [i % n for i in ids]
    lanes: dict[int, list[int]] = {}
    for i in ids:
        lanes.setdefault(int(plan.env_lane[i]), []).append(i)
    return ids, lanes
