"""Gymnasium's info dict-of-arrays for a batch of envs, built one array per key where that gives the same result.

``VectorEnv._add_info`` adds one env's info at a time: for ALE's three scalar keys that is three
array lookups, assignments and mask updates per env per step, in the parent, while every worker
waits for the next command. When the infos of a batch are flat dicts with the same keys and the
same scalar types (ALE's ``lives``/``episode_frame_number``/``frame_number``, most envs' counters),
each key's array and mask are filled in one assignment instead: same keys, order, dtypes and values
as ``_add_info`` gives. Infos that came as typed columns (:mod:`vecshm.shared.info_columns`) are batched
straight from the columns, without a dict per env. Anything else (nested dicts, arrays, objects,
keys or types that differ between envs, ``final_obs``) goes through ``_add_info`` itself, env by env.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from vecshm.parent.handback.results import StepInfoParts
from vecshm.shared.info_columns import InfoRecords, one_array_per_key

__all__ = ["batch_infos", "batch_records", "InfoBatch", "step_infos", "vector_infos"]

AddInfo = Callable[[dict[str, Any], dict[str, Any], int], dict[str, Any]]


def _is_scalar(value: Any) -> bool:
    """Whether ``_add_info`` makes an array of ``type(value)`` for it (Python int/float/bool, NumPy numbers)."""
    kind = type(value)
    return kind in (int, float, bool) or issubclass(kind, np.number)


@functools.lru_cache(maxsize=1024)
def _plain_keys(keys: tuple[Any, ...]) -> bool:
    """Whether a dict's keys batch one array each: strings, and as :func:`one_array_per_key` says
    (the others are left to ``_add_info``). Worked out once per key tuple: the same keys come on
    every step."""
    return all(type(key) is str for key in keys) and one_array_per_key(keys)


def _uniform(infos: list[dict[str, Any]]) -> tuple[tuple[str, ...], tuple[type, ...]] | None:
    """The keys and value types every info shares, when all are flat scalar dicts alike; else None."""
    first = infos[0]
    keys = tuple(first)
    types = tuple(type(value) for value in first.values())
    if not all(_is_scalar(value) for value in first.values()) or not _plain_keys(keys):
        return None
    for info in infos[1:]:
        if tuple(info) != keys or tuple(type(value) for value in info.values()) != types:
            return None
    return keys, types


def _batch_columns(
    num_envs: int, positions: Any, keys: Sequence[str], types: Sequence[type], columns: Sequence[Any]
) -> dict[str, Any]:
    """Each key's array (of its type, zero where an env has no info) and mask, as ``_add_info`` builds them;
    ``positions`` ascending."""
    vector_infos: dict[str, Any] = {}
    every_env = len(positions) == num_envs  # positions are then 0..num_envs-1, in order
    for key, kind, column in zip(keys, types, columns):
        if every_env:  # the usual case (ALE's infos come on every step): no scatter
            array, mask = np.array(column, dtype=kind), np.ones(num_envs, dtype=np.bool_)
        else:
            array = np.zeros(num_envs, dtype=kind)
            array[positions] = column
            mask = np.zeros(num_envs, dtype=np.bool_)
            mask[positions] = True
        vector_infos[key], vector_infos[f"_{key}"] = array, mask
    return vector_infos


def batch_infos(num_envs: int, infos: Sequence[dict[str, Any]], add_info: AddInfo) -> dict[str, Any]:
    """The vector info of ``infos`` (the info of env ``k`` at position ``k``), as ``add_info`` would build it."""
    positions = [k for k, info in enumerate(infos) if info]
    if not positions:
        return {}
    filled = [infos[k] for k in positions]
    shape = _uniform(filled)
    if shape is None:
        vector_infos: dict[str, Any] = {}
        for k in positions:
            vector_infos = add_info(vector_infos, infos[k], k)
        return vector_infos
    keys, types = shape
    return _batch_columns(num_envs, positions, keys, types, [[info[key] for info in filled] for key in keys])


def batch_records(num_envs: int, env_positions: Any, infos: InfoRecords) -> dict[str, Any]:
    """The vector info of infos read as columns (their keys batch one array each), the env with
    ``infos.positions[j]`` at ``env_positions[j]``."""
    schema = infos.schema
    if schema is None:
        return {}
    return _batch_columns(num_envs, env_positions, schema.keys, schema.types, schema.columns(infos.records))


class InfoBatch:
    """Gymnasium's info batching (``VectorEnv._add_info``) for a batch smaller than ``num_envs``."""

    _add_info = gym.vector.VectorEnv._add_info

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


def vector_infos(
    parts: InfoRecords | list[dict[str, Any]], size: int, at: np.ndarray, vector_env: Any
) -> dict[str, Any]:
    """The vector info of ``size`` positions from ``parts`` (:meth:`Batch.info_parts
    <vecshm.parent.handback.results.Batch.info_parts>`: columns, or dicts), the info of the ``k``-th
    env at position ``at[k]``. Dicts are batched by ``vector_env``'s ``_add_info`` (a batch of all
    its envs), or a batch's own (None)."""
    if isinstance(parts, InfoRecords):  # (columns whose keys batch one array each)
        return batch_records(size, at[parts.positions], parts)
    infos: list[dict[str, Any]] = [{} for _ in range(size)]
    for k, info in zip(at.tolist(), parts):
        infos[k] = info
    adder = vector_env if vector_env is not None else InfoBatch(size)
    return batch_infos(size, infos, adder._add_info)


def step_infos(
    parts: StepInfoParts, same_step: bool, all_ids: np.ndarray, vector_env: gym.vector.VectorEnv
) -> dict[str, Any]:
    """The infos of a step as ``AsyncVectorEnv`` returns them, from what the batch read at once
    (:meth:`Batch.step_info_parts <vecshm.parent.handback.results.Batch.step_info_parts>`):
    ``same_step``: its SAME_STEP autoreset mode, with ``final_info`` and ``final_obs``; ``all_ids``:
    ``arange(num_envs)``."""
    ids, endings = parts.ids, parts.endings
    restarted: Any = parts.restarted  # envs whose episode a worker restart cut short: their info says so
    if same_step:
        for i in restarted:  # in the final info, as the episode's end (a redone reset's own info says so)
            if i in endings:
                endings[i][0]["worker_restarted"] = True
        restarted = ()
    whole = parts.env_ids is None
    if not (endings or restarted):
        return vector_infos(parts.infos, len(ids), all_ids[: len(ids)], vector_env if whole else None)
    # final_info, final_obs, then the step's keys, env by env, as AsyncVectorEnv adds them
    adder = vector_env if whole else InfoBatch(len(ids))
    step_dicts = parts.infos
    assert isinstance(step_dicts, list), "a step whose episodes ended reads its infos as dicts"
    infos: dict[str, Any] = {}
    for k, (i, step_info) in enumerate(zip(ids, step_dicts)):
        if i in endings:
            final_info, final_obs = endings[i]
            infos = adder._add_info(infos, {"final_info": final_info, "final_obs": final_obs}, k)
        if i in restarted:  # NEXT_STEP, DISABLED: in the step's info (the step returns the last observation)
            step_info = {**step_info, "worker_restarted": True}
        infos = adder._add_info(infos, step_info, k)
    return infos
