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

from vecshm.parent.handback.results import Batch
from vecshm.shared.info_columns import InfoRecords

__all__ = ["batch_infos", "batch_records", "InfoBatch", "step_infos", "vector_infos"]

AddInfo = Callable[[dict[str, Any], dict[str, Any], int], dict[str, Any]]


def _is_scalar(value: Any) -> bool:
    """Whether ``_add_info`` makes an array of ``type(value)`` for it (Python int/float/bool, NumPy numbers)."""
    kind = type(value)
    return kind in (int, float, bool) or issubclass(kind, np.number)


@functools.lru_cache(maxsize=1024)
def _plain_keys(keys: tuple[Any, ...]) -> bool:
    """Whether keys batch one array each: strings, no ``final_obs`` (an object array) and no ``_key``,
    whose mask could collide with a key of that name (those are left to ``_add_info``). Worked out
    once per key tuple: the same keys come on every step."""
    return "final_obs" not in keys and all(type(key) is str and not key.startswith("_") for key in keys)


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


def batch_records(num_envs: int, env_positions: Any, infos: InfoRecords) -> dict[str, Any] | None:
    """The vector info of infos read as columns, the env with ``infos.positions[j]`` at
    ``env_positions[j]``; None when its keys need ``_add_info`` (then batch their dicts)."""
    schema = infos.schema
    if schema is None:
        return {}
    if not _plain_keys(schema.keys):
        return None
    return _batch_columns(num_envs, env_positions, schema.keys, schema.types, schema.columns(infos.records))


class InfoBatch:
    """Gymnasium's info batching (``VectorEnv._add_info``) for a batch smaller than ``num_envs``."""

    _add_info = gym.vector.VectorEnv._add_info

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


def vector_infos(batch: Batch, size: int, env_ids: np.ndarray, at: np.ndarray, vector_env: Any) -> dict[str, Any]:
    """The vector info of ``size`` positions, the info of env ``env_ids[k]`` at position ``at[k]``;
    built from their columns when they came as columns. Dicts are batched by ``vector_env``'s
    ``_add_info`` (a batch of all its envs), or a batch's own (None)."""
    records = batch.info_records(env_ids)
    if records is not None:
        if records.schema is None:  # no env has an info
            return {}
        vector_infos = batch_records(size, at[records.positions], records)
        if vector_infos is not None:
            return vector_infos
    infos: list[dict[str, Any]] = [{} for _ in range(size)]
    for k, info in zip(at.tolist(), batch.infos(env_ids.tolist())):
        infos[k] = info
    adder = vector_env if vector_env is not None else InfoBatch(size)
    return batch_infos(size, infos, adder._add_info)


def step_infos(batch: Batch, same_step: bool, all_ids: np.ndarray, vector_env: gym.vector.VectorEnv) -> dict[str, Any]:
    """The infos of a step's ``batch`` as ``AsyncVectorEnv`` returns them (``same_step``: its SAME_STEP
    autoreset mode, with ``final_info`` and ``final_obs``); ``all_ids``: ``arange(num_envs)``."""
    ids = batch.ids
    finals: dict[int, dict[str, Any]] = {}
    restarted: Any = batch.restarted  # envs whose episode a worker restart cut short: their info says so
    if same_step:
        ended = [ids[k] for k in (batch.terminated | batch.truncated).nonzero()[0].tolist()]
        finals = dict(zip(ended, batch.infos(ended, "final")))
        for i in restarted:  # in the final info, as the episode's end (a redone reset's own info says so)
            if i in finals:
                finals[i]["worker_restarted"] = True
        restarted = ()
    whole = batch.env_ids is None
    if not (finals or restarted):
        id_array = all_ids if whole else batch.env_ids
        return vector_infos(batch, len(ids), id_array, all_ids[: len(ids)], vector_env if whole else None)
    # final_info, final_obs, then the step's keys, env by env, as AsyncVectorEnv adds them
    adder = vector_env if whole else InfoBatch(len(ids))
    infos: dict[str, Any] = {}
    for k, (i, step_info) in enumerate(zip(ids, batch.infos())):
        if i in finals:
            infos = adder._add_info(infos, {"final_info": finals[i], "final_obs": batch.final_observation(i)}, k)
        if i in restarted:  # NEXT_STEP, DISABLED: in the step's info (the step returns the last observation)
            step_info = {**step_info, "worker_restarted": True}
        infos = adder._add_info(infos, step_info, k)
    return infos
