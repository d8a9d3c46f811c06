"""How a RayVecEnv's envs are shared among its actors, and the actors' results joined into one batch."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from vecshm.shared.errors import SpaceMismatchError
from vecshm.shared.layout import tree_map

DEFAULT_ACTOR_OPTIONS = {"num_cpus": 1, "scheduling_strategy": "SPREAD"}

__all__ = ["split", "concat", "writable", "writable_terminals", "options_per_actor", "host_spaces", "places_by_actor"]


def split(num_envs: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous ``[start, stop)`` shares, sizes differing by at most one, larger ones first."""
    bounds, start = [], 0
    for k in range(parts):
        stop = start + num_envs // parts + (k < num_envs % parts)
        bounds.append((start, stop))
        start = stop
    return bounds


def concat(parts: list[Any]) -> Any:
    """One batch from the actors' batches (Dict and Tuple observations key by key); always a fresh,
    writable array: Ray hands out read-only views of its object store."""
    first = parts[0]
    if isinstance(first, dict):
        return {key: concat([p[key] for p in parts]) for key in first}
    if isinstance(first, tuple):
        return tuple(concat([p[j] for p in parts]) for j in range(len(first)))
    return np.concatenate(parts)


def writable(value: Any) -> Any:
    """``value`` with every array in it copied (Ray's are read-only views of its object store)."""
    return tree_map(lambda leaf: leaf.copy() if isinstance(leaf, np.ndarray) else leaf, value)


def writable_terminals(infos: list[dict]) -> list[dict]:
    for info in infos:
        if "terminal_observation" in info:
            info["terminal_observation"] = writable(info["terminal_observation"])
    return infos


def options_per_actor(options: dict[str, Any] | Sequence[dict[str, Any]] | None, n_actors: int) -> list[dict]:
    """Each actor's Ray options: one dict for all, or one per actor, over the defaults."""
    if options is None or isinstance(options, dict):
        return [{**DEFAULT_ACTOR_OPTIONS, **(options or {})}] * n_actors
    options = list(options)
    if len(options) != n_actors:
        raise ValueError(f"actor_options has {len(options)} entries for {n_actors} actors")
    return [{**DEFAULT_ACTOR_OPTIONS, **o} for o in options]


def host_spaces(hosts: list[dict]) -> tuple[gym.Space, gym.Space]:
    first = hosts[0]
    for host in hosts[1:]:
        for name in ("observation_space", "action_space"):
            if host[name] != first[name]:
                raise SpaceMismatchError(
                    f"the envs of {host['where']} have {name} {host[name]}, those of {first['where']} have "
                    f"{first[name]}; every env of a vec env must have the same spaces"
                )
    return first["observation_space"], first["action_space"]


def places_by_actor(starts: list[int], targets: list[int]) -> dict[int, list[tuple[int, int]]]:
    """For each actor ``k`` (whose first env is ``starts[k]``), the ``(position in targets, index
    within the actor)`` of each of ``targets`` it hosts, in the targets' order."""
    by_actor: dict[int, list[tuple[int, int]]] = {}
    for position, i in enumerate(targets):
        k = bisect.bisect_right(starts, i) - 1
        by_actor.setdefault(k, []).append((position, i - starts[k]))
    return by_actor
