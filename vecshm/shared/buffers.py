"""The arrays one vec env shares with its workers, described once from the spaces.

Parent and workers build the same :class:`BufferSpec` (it is small and picklable) and get the same
views; each env's row of every array belongs to the lane that hosts it, so writes never collide.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces

from vecshm.shared.layout import Leaf, leaves
from vecshm.shared.memory import Field, NamedSegment, Segment, SegmentPlan, mapping_array
from vecshm.shared.protocol import Arena
from vecshm.shared.step_times import COLUMNS as STEP_TIME_COLUMNS

__all__ = ["BufferSpec", "Buffers", "REWARD_DTYPES", "REWARD_TYPES", "reward_codes"]

INFO_EMPTY = 0
INFO_PIPED = -1  # the info did not fit the arena row and follows on the control socket
# in ``final_obs_blob_len``: the final observation is in the env's row of ``final_rows``, not pickled
FINAL_IN_ROWS = -2
NO_ENV = -1  # in ``progress``: the lane is between commands, no env of it runs

# Actions reach the env in the dtype the caller gave them, as AsyncVectorEnv and SubprocVecEnv pass
# them on (an env may call ``time.sleep(action)``, which takes a float64 but not a float32). Each
# element of an action leaf has room for 8 bytes, and a word per env and leaf names the dtype the
# bytes hold. Dtypes outside this table are cast to the space's dtype.
ACTION_DTYPES = tuple(
    np.dtype(t)
    for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
    + (np.float16, np.float32, np.float64)
)


# Rewards travel as float64, which holds exactly every float32 and float64, every bool and every int
# up to 2**53. SubprocVecEnv returns ``np.stack`` of the envs' own rewards, whose dtype follows
# their types (a Python float gives float64, ``np.float32`` float32, a Python int int64), so each
# env's row also holds a code naming the dtype of its latest reward, and ShmVecEnv casts a batch to
# the dtype ``np.stack`` would give it. Code 0, what a fresh segment holds, is a Python float's.
REWARD_DTYPES = tuple(
    np.dtype(t)
    for t in (np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8)
    + (np.uint64, np.uint32, np.uint16, np.uint8, np.bool_)
)
_REWARD_CODE = {dtype: code for code, dtype in enumerate(REWARD_DTYPES)}
# The types whose values all give one dtype (a Python int: the platform's default integer).
_REWARD_CODE_OF_TYPE: dict[type, int] = {
    float: 0,
    int: _REWARD_CODE[np.asarray(0).dtype],
    bool: _REWARD_CODE[np.dtype(np.bool_)],
    **{dtype.type: code for code, dtype in enumerate(REWARD_DTYPES)},
}
REWARD_TYPES = frozenset(_REWARD_CODE_OF_TYPE)  # a reward of one of these types always has the same code


def reward_codes(rewards: Sequence[Any]) -> list[int]:
    """The code of ``np.asarray(reward).dtype`` for each reward (0 for what the table lacks: such
    a reward is refused when written, unless it is a number, which then reads as a float64)."""
    codes = [_REWARD_CODE_OF_TYPE.get(type(reward), -1) for reward in rewards]
    if -1 in codes:  # arrays, and types the table does not name
        codes = [_REWARD_CODE.get(np.asarray(r).dtype, 0) if c == -1 else c for r, c in zip(rewards, codes)]
    return codes


def action_dtypes(leaf: Leaf) -> tuple[np.dtype, ...]:
    """The dtypes one action leaf can carry, indexed by the code written next to each row."""
    return ACTION_DTYPES if leaf.dtype in ACTION_DTYPES else (*ACTION_DTYPES, leaf.dtype)


def _action_row_bytes(leaf: Leaf) -> int:
    elements = max(1, int(np.prod(leaf.shape, dtype=np.int64)))
    return elements * max(8, leaf.dtype.itemsize)


@dataclass(frozen=True)
class BufferSpec:
    """Everything needed to lay out the segment: spaces, counts, and the info arena size."""

    observation_space: spaces.Space
    action_space: spaces.Space
    num_envs: int
    num_lanes: int
    info_bytes: int
    obs_slots: int = 1
    # async batches: ``ring_units`` units of ``unit_rows`` observation rows each (see vecshm.parent.handback.ring)
    ring_units: int = 0
    unit_rows: int = 0
    # a row for each env's final observation (autoreset in the same step: SB3's terminal_observation),
    # where an observation is one array
    final_rows: bool = False
    obs_leaves: tuple[Leaf, ...] = field(init=False)  # every leaf, dynamic ones included
    action_leaves: tuple[Leaf, ...] = field(init=False)
    obs_fixed: tuple[Leaf, ...] = field(init=False)  # the leaves that live in shared memory
    action_fixed: tuple[Leaf, ...] = field(init=False)
    # whether some leaves travel pickled: observations through the observation arenas, actions on
    # the control socket with the command (fields rather than properties: read on every step)
    obs_dynamic: bool = field(init=False)
    action_dynamic: bool = field(init=False)

    def __post_init__(self) -> None:
        for name, space in (("obs", self.observation_space), ("action", self.action_space)):
            all_leaves = tuple(leaves(space))
            fixed = tuple(leaf for leaf in all_leaves if not leaf.dynamic)
            object.__setattr__(self, f"{name}_leaves", all_leaves)
            object.__setattr__(self, f"{name}_fixed", fixed)
            object.__setattr__(self, f"{name}_dynamic", len(fixed) < len(all_leaves))

    def plan(self) -> SegmentPlan:
        n, w = self.num_envs, self.num_lanes
        blob_bytes = self.info_bytes if self.obs_dynamic else 0  # the dynamic leaves of each env's observation
        arrays: list[tuple[str, tuple[int, ...], np.dtype]] = [
            ("cmd_seq", (w,), np.dtype(np.int64)),
            ("cmd", (w,), np.dtype(np.int64)),
            ("done_seq", (w,), np.dtype(np.int64)),
            ("status", (w,), np.dtype(np.int64)),
            ("progress", (w,), np.dtype(np.int64)),
            ("obs_slot", (w,), np.dtype(np.int64)),
            ("prev_slot", (w,), np.dtype(np.int64)),  # the slot of the command before (a restart reads it)
            ("busy", (w,), np.dtype(np.float64)),  # seconds each lane has spent running commands
            # the parent's recent turnaround: seconds from a wait's end to the next wait (a moving
            # average), which the workers' spin follows (vecshm.worker.main)
            ("turnaround", (1,), np.dtype(np.float64)),
            # 1 while the process hosting a lane sleeps on its doorbell, and while the parent
            # sleeps on its own: the other side rings only then (vecshm.shared.sync)
            ("asleep", (w,), np.dtype(np.int64)),
            ("parent_asleep", (1,), np.dtype(np.int64)),
            ("unit_lane", (max(1, self.ring_units),), np.dtype(np.int64)),
            ("rewards", (n,), np.dtype(np.float64)),
            ("reward_code", (n,), np.dtype(np.int8)),  # the dtype each env's reward had (REWARD_DTYPES)
            ("terminated", (n,), np.dtype(np.bool_)),
            ("truncated", (n,), np.dtype(np.bool_)),
            ("info_len", (n,), np.dtype(np.int64)),
            ("final_info_len", (n,), np.dtype(np.int64)),
            ("info_arena", (n, self.info_bytes), np.dtype(np.uint8)),
            ("final_info_arena", (n, self.info_bytes), np.dtype(np.uint8)),
            ("obs_blob_len", (n,), np.dtype(np.int64)),
            ("final_obs_blob_len", (n,), np.dtype(np.int64)),
            ("obs_blob_arena", (n, blob_bytes), np.dtype(np.uint8)),
            ("final_obs_blob_arena", (n, self.info_bytes), np.dtype(np.uint8)),  # whole final obs, pickled
            ("act_dtype", (n, max(1, len(self.action_fixed))), np.dtype(np.int64)),
        ]
        arrays += [
            (f"act:{i}", (n, _action_row_bytes(leaf)), np.dtype(np.uint8)) for i, leaf in enumerate(self.action_fixed)
        ]
        for prefix in [f"obs{slot}" for slot in range(self.obs_slots)]:
            arrays += [(f"{prefix}:{i}", (n, *leaf.shape), leaf.dtype) for i, leaf in enumerate(self.obs_fixed)]
        if self.final_rows:
            arrays += [(f"final:{i}", (n, *leaf.shape), leaf.dtype) for i, leaf in enumerate(self.obs_fixed)]
        rows = self.ring_units * self.unit_rows
        if rows:
            arrays += [(f"ring:{i}", (rows, *leaf.shape), leaf.dtype) for i, leaf in enumerate(self.obs_fixed)]
        # Last, for vecshm.stats: inserted earlier, they moved every frame's offset in the segment, and
        # frames stepped 5% slower (benchmarks/ab_paired.py; the copies' alignment, most likely)
        arrays += [
            ("done_at", (w,), np.dtype(np.float64)),  # when each lane finished its last command (perf_counter)
            ("env_stats", (n, STEP_TIME_COLUMNS), np.dtype(np.float64)),  # step times (vecshm.shared.step_times)
        ]
        return SegmentPlan(arrays)

    def slot_fields(self, plan: SegmentPlan, slot: int) -> list[Field]:
        """Where the fixed observation leaves of ``slot`` lie in the segment, in leaf order (contiguous)."""
        return [plan.fields[f"obs{slot}:{i}"] for i in range(len(self.obs_fixed))]


class Buffers:
    """Named views of the segment; ``actions`` and each of ``obs_slots`` are lists in fixed-leaf order.

    ``actions[i][code]`` views action leaf ``i`` as the dtype ``action_dtypes(leaf)[code]``;
    ``action_codes[env, i]`` says which one holds each env's action.

    Observations have several slots: a whole-batch command may write a slot that is lent out to
    the caller (see :mod:`vecshm.parent.handback.results`); slot 0 is the one partial batches and copies use. Async
    batches write the ``ring`` (one array per fixed leaf), unit by unit, in finishing order.
    ``final_rows`` (one array, or none) hold the envs' final observations where the episode's last
    step resets the env and an observation is one array (see :meth:`vecshm.worker.runner.EnvRunner._write_final_obs`).
    """

    def __init__(self, spec: BufferSpec, segment: Segment | NamedSegment) -> None:
        self.spec = spec
        self.segment = segment
        assert segment.buffer is not None, "a closed segment"
        self.mapping = mapping_array(segment.buffer)  # every view below, and every lent array, derives from it
        views = spec.plan().views(self.mapping)
        self.cmd_seq = views["cmd_seq"]
        self.cmd = views["cmd"]
        self.done_seq = views["done_seq"]
        self.status = views["status"]
        self.progress = views["progress"]
        self.obs_slot = views["obs_slot"]
        self.prev_slot = views["prev_slot"]
        self.busy = views["busy"]
        self.done_at = views["done_at"]
        self.env_stats = views["env_stats"]
        self.turnaround = views["turnaround"]
        self.asleep = views["asleep"]
        self.parent_asleep = views["parent_asleep"]
        self.unit_lane = views["unit_lane"]
        self.rewards = views["rewards"]
        self.reward_code = views["reward_code"]
        self.terminated = views["terminated"]
        self.truncated = views["truncated"]
        self.info_len = views["info_len"]
        self.final_info_len = views["final_info_len"]
        self.info_arena = views["info_arena"]
        self.final_info_arena = views["final_info_arena"]
        self.obs_blob_len = views["obs_blob_len"]
        self.final_obs_blob_len = views["final_obs_blob_len"]
        self.obs_blob_arena = views["obs_blob_arena"]
        self.final_obs_blob_arena = views["final_obs_blob_arena"]
        # each arena of pickled values, with its per-env lengths, by kind
        self.arenas = {
            Arena.INFO: (self.info_len, self.info_arena),
            Arena.FINAL_INFO: (self.final_info_len, self.final_info_arena),
            Arena.OBS: (self.obs_blob_len, self.obs_blob_arena),
            Arena.FINAL_OBS: (self.final_obs_blob_len, self.final_obs_blob_arena),
        }
        self.action_codes = views["act_dtype"]
        # per fixed action leaf, its column of codes (1-d: cheaper to index than a 2-d array)
        self.action_code_columns = [self.action_codes[:, i] for i in range(len(spec.action_fixed))]
        self.actions = [_typed_views(views[f"act:{i}"], leaf) for i, leaf in enumerate(spec.action_fixed)]
        leaf_count = len(spec.obs_fixed)
        self.obs_slots = [[views[f"obs{s}:{i}"] for i in range(leaf_count)] for s in range(spec.obs_slots)]
        self.ring = [views[f"ring:{i}"] for i in range(leaf_count)] if spec.ring_units else []
        self.final_rows = [views[f"final:{i}"] for i in range(leaf_count)] if spec.final_rows else []

    def release(self) -> None:
        """Drop every view so the mapping can be closed."""
        for name in list(vars(self)):
            if name not in ("spec", "segment"):
                delattr(self, name)


def scalar_rows_allowed(leaf: Leaf) -> bool:
    """A leaf of one element with a shape (``Box(0, 1, (1,))``) may also be given one scalar per env,
    which reaches the env as that scalar, as AsyncVectorEnv and SubprocVecEnv pass rows as given."""
    return leaf.shape != () and int(np.prod(leaf.shape, dtype=np.int64)) == 1


def _typed_views(raw: np.ndarray, leaf: Leaf) -> list[np.ndarray]:
    """``(num_envs, *leaf.shape)`` views of one action leaf's bytes, one per dtype it may carry;
    then, where scalar rows are allowed, ``(num_envs,)`` views (codes offset by the dtype count)."""
    elements = int(np.prod(leaf.shape, dtype=np.int64))
    dtypes = action_dtypes(leaf)
    views = [raw.view(dtype)[:, :elements].reshape((raw.shape[0], *leaf.shape)) for dtype in dtypes]
    if scalar_rows_allowed(leaf):
        views += [raw.view(dtype)[:, 0] for dtype in dtypes]
    return views
