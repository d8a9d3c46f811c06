"""A worker's actions: read from the segment's action rows, in the dtype the parent wrote them in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from vecshm.shared.buffers import Buffers, action_dtypes
from vecshm.shared.layout import assemble, merge_leaves

__all__ = ["action_reader"]


def action_reader(
    b: Buffers, start: int, num_envs: int, action_space: gym.Space
) -> Callable[[dict[int, list[Any]]], Callable[[int], Any]]:
    """Built once per worker, for its ``num_envs`` envs from ``start``: per step command, a function
    from env index to that env's action.

    Rows are read in the dtype the parent wrote them in: the slice's dtype codes are read once
    per command, and when they agree (the usual case) one view serves every env. Leaves that
    are not in shared memory come from the command's ``dynamic`` values, by env index.
    """
    fixed, all_leaves = b.spec.action_fixed, b.spec.action_leaves
    codes = b.action_codes[start : start + num_envs]
    # per leaf and code: whether a row is a scalar (nothing to copy) or an array view (copied)
    scalar = [
        [leaf.shape == () or code >= len(action_dtypes(leaf)) for code in range(len(views))]
        for leaf, views in zip(fixed, b.actions)
    ]
    structured = isinstance(action_space, (gym.spaces.Dict, gym.spaces.Tuple))

    if len(all_leaves) == 1 and fixed and not structured:
        views, column, is_scalar = b.actions[0], codes[:, 0], scalar[0]
        last: list[Any] = [None, None]  # the codes the last command read, and the reader they gave

        def one_leaf(dynamic: dict[int, list[Any]]) -> Callable[[int], Any]:
            per_env = column.tolist()
            if per_env == last[0]:  # the usual command: the codes of the one before
                return last[1]
            if len(set(per_env)) == 1:
                code = per_env[0]
                view = views[code]
                read = view.__getitem__ if is_scalar[code] else lambda index: view[index].copy()
            else:

                def read(index: int) -> Any:
                    code = per_env[index - start]
                    return views[code][index] if is_scalar[code] else views[code][index].copy()

            last[:] = per_env, read
            return read

        return one_leaf

    def any_space(dynamic: dict[int, list[Any]]) -> Callable[[int], Any]:
        rows = codes.tolist()

        def read(index: int) -> Any:
            row = rows[index - start]
            values = [
                views[row[i]][index] if scalar[i][row[i]] else views[row[i]][index].copy()
                for i, views in enumerate(b.actions)
            ]
            if dynamic:
                values = merge_leaves(all_leaves, values, dynamic[index])
            return assemble(action_space, values)

        return read

    return any_space
