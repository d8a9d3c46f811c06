"""One command's results, as values the facades read, and where a whole batch's observations land.

A facade turns what it collected into a :class:`Batch` for the envs it returns: rewards and flags
copied out, and observations and infos read on demand, which is when their cost is paid. A
batch's readings are valid until its envs are sent again, as the segment's rows they come from.
What finished envs left beside the segment comes with it (:mod:`vecshm.parent.handback.extras`).

A command's observations go to slot 0 (views the next command overwrites: ``copy=False``), or to a
lendable slot, whose arrays :meth:`ObservationSlots.lend` hands out: the slot belongs to them until
the last of them is garbage collected (below). Async batches lend the ring's units the same way
(:mod:`vecshm.parent.handback.ring`), and a copy to a device holds what it reads until its event
passed (:mod:`vecshm.parent.handback.delivery`).
"""

from __future__ import annotations

import ctypes
import functools
import pickle
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from vecshm.parent.handback.extras import SideResults
from vecshm.shared.buffers import FINAL_IN_ROWS, INFO_EMPTY, INFO_PIPED, REWARD_DTYPES, Buffers
from vecshm.shared.info_columns import INFO_COLUMNS_BASE, InfoRecords, SchemaCache, is_columns
from vecshm.shared.layout import assemble, merge_leaves, one_array

__all__ = [
    "ResultReader",
    "Batch",
    "ObservationSlots",
    "DEFAULT_LENDABLE_SLOTS",
    "lend_arrays",
    "Region",
]


class ResultReader:
    """Reads envs' results from the segment: observations, infos, pickled leaves, by env."""

    def __init__(
        self,
        buffers: Buffers,
        observation_space: spaces.Space,
        batch_dynamic: Callable[[spaces.Space, list[Any]], Any],
    ) -> None:
        self.buffers = buffers
        self.spec = buffers.spec
        self.num_envs = self.spec.num_envs
        self.observation_space = observation_space
        self.batch_dynamic = batch_dynamic
        self.info_schemas = SchemaCache()
        # an observation that is one array: assembling it is taking that array (without assemble's dispatch)
        obs_leaves = self.spec.obs_leaves
        self.one_array = one_array(obs_leaves)
        self._stacked_dtypes: dict[bytes, np.dtype] = {}  # the reward codes of a batch -> np.stack's dtype
        self.all_ids: tuple[int, ...] = tuple(range(self.num_envs))  # a whole batch's ids, made once

    def stacked_reward_dtype(self, env_ids: np.ndarray | None) -> np.dtype:
        """The dtype ``np.stack`` gives the latest rewards of ``env_ids`` (None: every env), from the
        codes their workers wrote (see ``REWARD_DTYPES``). Batches of one code repeat: a cache
        keyed by the codes' bytes makes that a lookup."""
        codes = self.buffers.reward_code if env_ids is None else self.buffers.reward_code[env_ids]
        key = codes.tobytes()
        dtype = self._stacked_dtypes.get(key)
        if dtype is None:
            dtype = np.result_type(*(REWARD_DTYPES[code] for code in set(codes.tolist())))
            if len(self._stacked_dtypes) < 64:  # envs whose reward types keep changing must not grow it
                self._stacked_dtypes[key] = dtype
        return dtype

    def observations(
        self, env_ids: np.ndarray | None, copy: bool, fixed: list[np.ndarray] | None, piped: Mapping
    ) -> Any:
        """Observations of ``env_ids`` (None: every env) from ``fixed`` (leaves lent with the
        batch), else copied out of slot 0 (``copy``) or as views of it that the next command
        overwrites. Dynamic leaves are unpickled and batched by ``batch_dynamic``."""
        return self.assembled(env_ids, self.fixed_leaves(env_ids, copy, fixed), piped)

    def fixed_leaves(self, env_ids: np.ndarray | None, copy: bool, fixed: list[np.ndarray] | None) -> list[Any]:
        """The fixed leaves of :meth:`observations`, one array each (``fixed`` when lent)."""
        if fixed is not None:
            return fixed
        arrays = self.buffers.obs_slots[0]
        if env_ids is not None:
            return [a[env_ids] for a in arrays]
        return [a.copy() for a in arrays] if copy else arrays

    def assembled(self, env_ids: np.ndarray | None, fixed: list[Any], piped: Mapping) -> Any:
        """The observations of ``env_ids`` with ``fixed`` as their fixed leaves (arrays, or tensors
        made from them), the dynamic ones unpickled and batched by ``batch_dynamic``."""
        if self.one_array:
            return fixed[0]
        if not self.spec.obs_dynamic:
            return assemble(self.observation_space, fixed)
        ids = range(self.num_envs) if env_ids is None else env_ids.tolist()
        per_env = [self.blob("obs", i, piped) for i in ids]
        dynamic_leaves = [leaf for leaf in self.spec.obs_leaves if leaf.dynamic]
        dynamic = [
            self.batch_dynamic(leaf.space, [values[j] for values in per_env]) for j, leaf in enumerate(dynamic_leaves)
        ]
        return assemble(self.observation_space, merge_leaves(self.spec.obs_leaves, fixed, dynamic))

    def observation_in(self, arrays: list[np.ndarray], row: int, env_index: int, piped: Mapping) -> Any:
        """A copy of env ``env_index``'s observation as its last command wrote it: its fixed leaves
        at ``row`` of ``arrays`` (a slot's, or the ring's), its dynamic ones in its arena row."""
        fixed = [a[row].copy() for a in arrays]
        dynamic = self.blob("obs", env_index, piped) if self.spec.obs_dynamic else []
        return assemble(self.observation_space, merge_leaves(self.spec.obs_leaves, fixed, dynamic))

    def blob(self, kind: str, env_index: int, piped: Mapping) -> Any:
        """What the last command pickled for env ``env_index``: ``obs``, its observation's dynamic
        leaves; ``final_obs``, the whole final observation of the episode it ended."""
        b = self.buffers
        lengths, arena = (
            (b.obs_blob_len, b.obs_blob_arena) if kind == "obs" else (b.final_obs_blob_len, b.final_obs_blob_arena)
        )
        length = int(lengths[env_index])
        if length == FINAL_IN_ROWS:  # (a final observation the worker wrote as a row, unpickled)
            return b.final_rows[0][env_index].copy()
        return self._unpickle(kind, env_index, length, arena, piped)

    @staticmethod
    def _unpickle(kind: str, env_index: int, length: int, arena: np.ndarray, piped: Mapping) -> Any:
        """One env's value from its arena row, or from ``piped`` when it did not fit (``INFO_PIPED``)."""
        if length == INFO_PIPED:
            return pickle.loads(piped[(kind, env_index)])
        return pickle.loads(arena[env_index, :length].tobytes())

    def infos(self, env_ids: Sequence[int], kind: str, piped: Mapping) -> list[dict[str, Any]]:
        """Info dicts of ``env_ids`` (``kind="final"``: of the episodes that ended)."""
        lengths, arena = self._info_arena(kind)
        sizes = lengths.tolist()
        if not any(sizes):  # (INFO_EMPTY is 0) no env returned an info: the usual step
            return [{} for _ in env_ids]
        row_bytes = arena.shape[1]
        out: list[dict[str, Any]] = []
        for i in env_ids:
            size = sizes[i]
            if size == INFO_EMPTY:
                out.append({})
            elif size <= INFO_COLUMNS_BASE:  # typed columns (vecshm.shared.info_columns)
                out.append(self.info_schemas.schema(size, arena, i).dict_at(arena, i * row_bytes))
            else:
                out.append(self._unpickle(kind, i, size, arena, piped))
        return out

    def info_records(self, env_ids: np.ndarray, kind: str) -> InfoRecords | None:
        """The infos of ``env_ids`` as columns, when every one that is not empty was written as
        columns of one schema (see :mod:`vecshm.shared.info_columns`); else None."""
        lengths, arena = self._info_arena(kind)
        sizes = lengths[env_ids]
        positions = (sizes != INFO_EMPTY).nonzero()[0]
        if len(positions) == 0:
            return InfoRecords(positions, None, None)
        size = int(sizes[positions[0]])
        if not is_columns(size) or np.count_nonzero(sizes[positions] == size) < len(positions):
            return None
        schema = self.info_schemas.schema(size, arena, int(env_ids[positions[0]]))
        return InfoRecords(positions, schema, self.info_schemas.records(arena, env_ids[positions], schema))

    def _info_arena(self, kind: str) -> tuple[np.ndarray, np.ndarray]:
        b = self.buffers
        return (b.info_len, b.info_arena) if kind == "info" else (b.final_info_len, b.final_info_arena)


class StepInfoParts(NamedTuple):
    """What a step's vector info is built from (:meth:`Batch.step_info_parts`): the batch's env
    ids (``env_ids`` None: every env), their infos (columns or dicts, :meth:`Batch.info_parts`),
    the final info and observation of each env whose episode ended, and the envs a worker
    restart cut short."""

    ids: Sequence[int]
    env_ids: np.ndarray | None
    infos: InfoRecords | list[dict[str, Any]]
    endings: dict[int, tuple[dict[str, Any], Any]]
    restarted: Any


class Batch:
    """The results of one command for the envs of ``env_ids`` (None: every env, in order).

    ``rewards``, ``terminated`` and ``truncated`` are copies, in the segment's dtypes; ``restarted``
    names the envs whose episode a worker restart ended (they read as truncated). Observations
    and infos are read from the segment when asked for, so before the batch's envs run again;
    lent observation leaves (a whole batch's slot, an async batch's ring units) are the batch's
    own, and go back when the last array made from them is dropped.
    """

    __slots__ = ("env_ids", "ids", "rewards", "terminated", "truncated", "restarted", "_reader", "_extras", "_fixed")

    def __init__(
        self, reader: ResultReader, env_ids: np.ndarray | None, extras: SideResults, fixed: list[np.ndarray] | None
    ) -> None:
        b = reader.buffers
        self.env_ids = env_ids
        if env_ids is None:
            self.ids: Sequence[int] = reader.all_ids
            self.rewards, self.terminated, self.truncated = b.rewards.copy(), b.terminated.copy(), b.truncated.copy()
        else:  # indexing with an array copies
            self.ids = env_ids.tolist()
            self.rewards, self.terminated = b.rewards[env_ids], b.terminated[env_ids]
            self.truncated = b.truncated[env_ids]
        self.restarted = extras.restarted.keys()
        self._reader, self._extras, self._fixed = reader, extras, fixed

    def stacked_rewards(self) -> np.ndarray:
        """The rewards in the dtype ``np.stack`` gives the envs' own values, as SubprocVecEnv returns
        them (float64 for Python floats, float32 for ``np.float32``, int64 for Python ints)."""
        return self.rewards.astype(self._reader.stacked_reward_dtype(self.env_ids), copy=False)

    def observations(self, copy: bool = True) -> Any:
        """The batch's observations: the lent leaves it came with, else read from slot 0 (``copy``:
        copied out; else views the next command overwrites)."""
        return self._reader.observations(self.env_ids, copy, self._fixed, self._extras.piped)

    @property
    def lent(self) -> bool:
        """Whether the observations' fixed leaves are lent with the batch (they own their slot or
        ring units), rather than read from slot 0."""
        return self._fixed is not None

    def fixed_leaves(self, copy: bool = True) -> list[Any]:
        """The observations' fixed leaves, one array each, as :meth:`observations` would use them."""
        return self._reader.fixed_leaves(self.env_ids, copy, self._fixed)

    def assembled(self, fixed: list[Any]) -> Any:
        """The observations with ``fixed`` (arrays or tensors, one per fixed leaf) as their fixed leaves."""
        return self._reader.assembled(self.env_ids, fixed, self._extras.piped)

    def infos_empty(self) -> bool:
        """Whether no env of the batch returned an info and no worker restart ended an episode:
        its vector info is ``{}`` (``final_info`` aside), and a facade need not build it."""
        if self._extras.piped or self.restarted:
            return False
        lengths = self._reader.buffers.info_len  # (INFO_EMPTY is 0)
        # (a list's any(): NumPy's takes a microsecond on a few words)
        return not any((lengths if self.env_ids is None else lengths[self.env_ids]).tolist())

    def infos(self, env_ids: Sequence[int] | None = None, kind: str = "info") -> list[dict[str, Any]]:
        """Info dicts of ``env_ids`` (default: the batch's envs); ``kind="final"``: of the
        episodes that ended (``final_info``)."""
        return self._reader.infos(self.ids if env_ids is None else env_ids, kind, self._extras.piped)

    def info_parts(self, env_ids: np.ndarray) -> InfoRecords | list[dict[str, Any]]:
        """The infos of ``env_ids`` as a vector info is built from them, read at once: typed
        columns, when every info came as columns of one schema whose keys batch one array each
        (or no env has an info), else each env's dict."""
        records = self._reader.info_records(env_ids, "info")
        if records is not None and (records.schema is None or records.schema.one_array_per_key):
            return records
        return self.infos(env_ids.tolist())

    def step_info_parts(self, same_step: bool, all_ids: np.ndarray) -> StepInfoParts:
        """What a step's vector info is built from, read at once (``same_step``: Gymnasium's
        SAME_STEP, where an episode's end adds its final info and observation; ``all_ids``:
        ``arange(num_envs)``)."""
        ids = self.ids
        endings: dict[int, tuple[dict[str, Any], Any]] = {}
        if same_step:
            ended = [ids[k] for k in (self.terminated | self.truncated).nonzero()[0].tolist()]
            finals = self.infos(ended, "final") if ended else []
            endings = {i: (info, self.final_observation(i)) for i, info in zip(ended, finals)}
        restarted = self.restarted
        if endings or (restarted and not same_step):  # built env by env, from dicts
            return StepInfoParts(ids, self.env_ids, self.infos(), endings, restarted)
        return StepInfoParts(
            ids, self.env_ids, self.info_parts(all_ids if self.env_ids is None else self.env_ids), {}, ()
        )

    def final_observation(self, env_index: int) -> Any:
        """The last observation of the episode env ``env_index`` just ended, as the env returned it
        (or, for a restarted worker's env, the last observation the parent saw)."""
        restarted = self._extras.restarted
        if env_index in restarted:
            return restarted[env_index]
        return self._reader.blob("final_obs", env_index, self._extras.piped)


# -- lent observations -----------------------------------------------------------------------------
#
# Observation batches handed to the caller without a copy, yet never overwritten behind its back.
#
# A whole-batch step or reset writes its observations into a free *slot* of the shared segment. The
# arrays the caller gets are views of that slot that own it: the slot goes back to the free list
# only when the last array, slice, or tensor made from them is garbage collected. So every result
# is a fresh array, as with a copy, but the parent never touches the bytes the workers wrote (on
# other cores, that copy-out costs more than the step itself for large frames). Should a caller
# hold on to every lendable slot, the next command uses slot 0 and the result is copied out.

# SB3 keeps two batches alive at once (``_last_obs`` and the new one); the rest is headroom. Slots
# nobody has used cost no memory: the segment's pages are allocated on first write.
DEFAULT_LENDABLE_SLOTS = 6


class _Grant:
    """Calls ``release`` once, when the last lease holding it is gone."""

    __slots__ = ("_release",)

    def __init__(self, release: Callable[[], None]) -> None:
        self._release = release

    def __del__(self) -> None:
        self._release()


@functools.lru_cache(maxsize=256)
def _span(nbytes: int) -> type[ctypes.Array[ctypes.c_char]]:
    """The ctypes type of ``nbytes`` bytes: its instances, made at an address, are the leases."""
    return ctypes.c_char * nbytes


Region = tuple[int, np.dtype, tuple[int, ...], int]  # address, dtype, shape and size of a C-contiguous array


def lend_arrays(regions: list[Region], mapping: object, release: Callable[[], None]) -> list[np.ndarray]:
    """Arrays over ``regions`` of ``mapping``, made as they will be returned (no view or reshape
    after: a microsecond a batch); ``release()`` runs once every array, and everything viewing
    one, has been garbage collected.

    Each array's base is a lease: a ctypes object over its bytes, which holds the grant (and the
    mapping: an array exported from the mmap, so that it cannot be closed under us). Made at an
    address, it is the cheapest buffer NumPy will take that can carry them.
    """
    grant = _Grant(release)
    arrays = []
    for address, dtype, shape, nbytes in regions:
        lease = _span(nbytes).from_address(address)
        lease.__dict__["holds"] = (grant, mapping)
        arrays.append(np.ndarray(shape, dtype, lease))
    return arrays


class ObservationSlots:
    """The free list of lendable slots (1 .. n) and the arrays that own a lent slot."""

    def __init__(self, buffers: Buffers, min_bytes: int) -> None:
        """Slots lend batches of at least ``min_bytes`` (``EngineOptions.lend_min_bytes``)."""
        spec = buffers.spec
        plan = spec.plan()
        self._mapping: np.ndarray | None = buffers.mapping  # None once closed
        base = buffers.mapping.ctypes.data
        first = spec.slot_fields(plan, 0)
        self._regions: list[list[Region]] = []
        self.free: list[int] = []
        if not first:  # every observation leaf is dynamic (pickled): nothing to lend
            return
        start = first[0].offset
        span = first[-1].offset + first[-1].nbytes - start  # bytes of one batch, all leaves
        # each slot's leaves, as lend_arrays takes them (slot 0, never lent, included for the indices)
        self._regions = [
            [(base + f.offset, f.dtype, f.shape, f.nbytes) for f in spec.slot_fields(plan, slot)]
            for slot in range(spec.obs_slots)
        ]
        lendable = range(spec.obs_slots - 1, 0, -1) if span >= min_bytes else ()
        # the free lendable slots: ``free.pop()`` takes one (the lowest: fewest pages touched), as
        # :meth:`acquire` does; the run object pops it itself on the step path (one call fewer)
        self.free = list(lendable)

    def acquire(self) -> int:
        """A free lendable slot, or 0 when every one is still held by the caller (or batches are too small)."""
        return self.free.pop() if self.free else 0

    def lend(self, slot: int) -> list[np.ndarray]:
        """Arrays (one per observation leaf) viewing ``slot``, which now belongs to them."""
        return lend_arrays(self._regions[slot], self._mapping, lambda: self.free.append(slot))

    def close(self) -> None:
        """Drop the engine's own hold on the mapping; lent arrays keep theirs."""
        self._mapping = None
