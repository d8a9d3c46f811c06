"""The arrays one vec env shares with its workers, described once from the spaces.

Parent and workers build the same :class:`BufferSpec` (it is small and picklable) and get the same
views; each env's row of every array belongs to the worker that hosts it, so writes never collide.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from gymnasium import spaces

from vecshm.layout import Leaf, leaves
from vecshm.memory import Field, Segment, SegmentPlan

__all__ = ["BufferSpec", "Buffers"]

INFO_EMPTY = 0
INFO_PIPED = -1  # the info did not fit the arena slot and follows on the control socket


@dataclass(frozen=True)
class BufferSpec:
    """Everything needed to lay out the segment: spaces, counts, and the info arena size."""

    observation_space: spaces.Space
    action_space: spaces.Space
    num_envs: int
    num_workers: int
    info_bytes: int
    obs_slots: int = 1
    obs_leaves: tuple[Leaf, ...] = field(init=False)
    action_leaves: tuple[Leaf, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "obs_leaves", tuple(leaves(self.observation_space)))
        object.__setattr__(self, "action_leaves", tuple(leaves(self.action_space)))

    def plan(self) -> SegmentPlan:
        n, w = self.num_envs, self.num_workers
        arrays: list[tuple[str, tuple[int, ...], np.dtype]] = [
            ("cmd_seq", (w,), np.dtype(np.int64)),
            ("cmd", (w,), np.dtype(np.int64)),
            ("done_seq", (w,), np.dtype(np.int64)),
            ("status", (w,), np.dtype(np.int64)),
            ("progress", (w,), np.dtype(np.int64)),
            ("obs_slot", (w,), np.dtype(np.int64)),
            ("rewards", (n,), np.dtype(np.float64)),
            ("terminated", (n,), np.dtype(np.bool_)),
            ("truncated", (n,), np.dtype(np.bool_)),
            ("info_len", (n,), np.dtype(np.int64)),
            ("final_info_len", (n,), np.dtype(np.int64)),
            ("info_arena", (n, self.info_bytes), np.dtype(np.uint8)),
            ("final_info_arena", (n, self.info_bytes), np.dtype(np.uint8)),
        ]
        prefixes = ["act", "final"] + [f"obs{slot}" for slot in range(self.obs_slots)]
        for prefix in prefixes:
            leaf_list = self.action_leaves if prefix == "act" else self.obs_leaves
            arrays += [(f"{prefix}:{i}", (n, *leaf.shape), leaf.dtype) for i, leaf in enumerate(leaf_list)]
        return SegmentPlan(arrays)

    def slot_fields(self, plan: SegmentPlan, slot: int) -> list[Field]:
        """Where the observation leaves of ``slot`` lie in the segment, in leaf order (contiguous)."""
        return [plan.fields[f"obs{slot}:{i}"] for i in range(len(self.obs_leaves))]


class Buffers:
    """Named views of the segment; ``final_obs``, ``actions`` and each of ``obs_slots`` are lists in leaf order.

    Observations have several slots: a whole-batch command may write a slot that is lent out to
    the caller (see :mod:`vecshm.slots`); slot 0 is the one partial batches and copies use.
    """

    def __init__(self, spec: BufferSpec, segment: Segment) -> None:
        self.spec = spec
        self.segment = segment
        views = spec.plan().views(segment.buffer)
        self.cmd_seq = views["cmd_seq"]
        self.cmd = views["cmd"]
        self.done_seq = views["done_seq"]
        self.status = views["status"]
        self.progress = views["progress"]
        self.obs_slot = views["obs_slot"]
        self.rewards = views["rewards"]
        self.terminated = views["terminated"]
        self.truncated = views["truncated"]
        self.info_len = views["info_len"]
        self.final_info_len = views["final_info_len"]
        self.info_arena = views["info_arena"]
        self.final_info_arena = views["final_info_arena"]
        self.actions = [views[f"act:{i}"] for i in range(len(spec.action_leaves))]
        leaf_count = len(spec.obs_leaves)
        self.obs_slots = [[views[f"obs{s}:{i}"] for i in range(leaf_count)] for s in range(spec.obs_slots)]
        self.final_obs = [views[f"final:{i}"] for i in range(leaf_count)]

    def release(self) -> None:
        """Drop every view so the mapping can be closed."""
        for name in list(vars(self)):
            if name not in ("spec", "segment"):
                delattr(self, name)
