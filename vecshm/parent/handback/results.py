"""One command's results, as values the facades read: what :meth:`Engine.collect` returns.

The shared segment holds each env's latest results until its worker runs again. What does not fit
there travels beside it: infos and observation leaves too large for their arena slot come over
the worker's socket, and an episode a worker restart cut short ends with the last observation the
parent saw. :class:`Extras` carries those for the envs of the workers one wait found finished,
so nothing about a command is left on the engine for a later call to find in the right order.

A facade turns what it collected into a :class:`Batch` for the envs it returns: rewards and flags
copied out, and observations and infos read on demand, which is when their cost is paid. A
batch's readings are valid until its envs are sent again, as the segment's rows they come from.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from vecshm.shared.buffers import INFO_EMPTY, INFO_PIPED, REWARD_DTYPES, Buffers
from vecshm.shared.info_columns import INFO_COLUMNS_BASE, InfoRecords, SchemaCache, is_columns
from vecshm.shared.layout import assemble, merge_leaves

__all__ = [
    "Extras",
    "Collected",
    "ResultReader",
    "Batch",
    "NO_EXTRAS",
]


@dataclass(frozen=True)
class Extras:
    """What finished envs left beside the segment: ``piped`` values by ``(kind, env)`` (``kind`` is
    ``info``, ``final``, ``obs`` or ``final_obs``), and ``restarted``: env -> the last observation
    of the episode its worker's restart ended (its reset is what the segment now holds)."""

    piped: Mapping[tuple[str, int], bytes] = field(default_factory=dict)
    restarted: Mapping[int, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.piped or self.restarted)

    def merged(self, later: Extras) -> Extras:
        """Both envs' extras (an async wait may find more envs finished than one ``recv`` returns)."""
        if not later:
            return self
        if not self:
            return later
        return Extras({**self.piped, **later.piped}, {**self.restarted, **later.restarted})

    def split(self, env_ids: Sequence[int]) -> tuple[Extras, Extras]:
        """Those of ``env_ids``, and the rest (an async ``recv`` returns some finished envs, not all)."""
        if not self:
            return self, self
        mine = set(env_ids)
        return self._of(lambda i: i in mine), self._of(lambda i: i not in mine)

    def _of(self, keep: Callable[[int], bool]) -> Extras:
        """The extras of the envs ``keep`` accepts."""
        return Extras(
            {key: v for key, v in self.piped.items() if keep(key[1])},
            {i: v for i, v in self.restarted.items() if keep(i)},
        )


NO_EXTRAS = Extras()


class Collected(NamedTuple):
    """Workers one wait found finished, in the order asked (or, from the ring, of their units), and
    what their envs left beside the segment."""

    workers: np.ndarray
    extras: Extras


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
        self.one_array = len(obs_leaves) == 1 and not obs_leaves[0].dynamic and obs_leaves[0].path == ()
        self._stacked_dtypes: dict[bytes, np.dtype] = {}  # the reward codes of a batch -> np.stack's dtype

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
        at ``row`` of ``arrays`` (a slot's, or the ring's), its dynamic ones in its arena slot."""
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
        return self._unpickle(kind, env_index, int(lengths[env_index]), arena, piped)

    @staticmethod
    def _unpickle(kind: str, env_index: int, length: int, arena: np.ndarray, piped: Mapping) -> Any:
        """One env's value from its arena slot, or from ``piped`` when it did not fit (``INFO_PIPED``)."""
        if length == INFO_PIPED:
            return pickle.loads(piped[(kind, env_index)])
        return pickle.loads(arena[env_index, :length].tobytes())

    def infos(self, env_ids: Sequence[int], kind: str, piped: Mapping) -> list[dict[str, Any]]:
        """Info dicts of ``env_ids`` (``kind="final"``: of the episodes that ended)."""
        lengths, arena = self._info_arena(kind)
        sizes = lengths.tolist()
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
        self, reader: ResultReader, env_ids: np.ndarray | None, extras: Extras, fixed: list[np.ndarray] | None
    ) -> None:
        b = reader.buffers
        self.env_ids = env_ids
        if env_ids is None:
            self.ids: list[int] = list(range(reader.num_envs))
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

    def infos(self, env_ids: Sequence[int] | None = None, kind: str = "info") -> list[dict[str, Any]]:
        """Info dicts of ``env_ids`` (default: the batch's envs); ``kind="final"``: of the
        episodes that ended (``final_info``)."""
        return self._reader.infos(self.ids if env_ids is None else env_ids, kind, self._extras.piped)

    def info_records(self, env_ids: np.ndarray, kind: str = "info") -> InfoRecords | None:
        """The infos of ``env_ids`` as typed columns, when they came as columns of one schema."""
        return self._reader.info_records(env_ids, kind)

    def final_observation(self, env_index: int) -> Any:
        """The last observation of the episode env ``env_index`` just ended, as the env returned it
        (or, for a restarted worker's env, the last observation the parent saw)."""
        restarted = self._extras.restarted
        if env_index in restarted:
            return restarted[env_index]
        return self._reader.blob("final_obs", env_index, self._extras.piped)
