"""A wrapper that watches what one env returns, and can say what state the env's process gave it.

In the in-process reference run it looks at every value the env returns, before any vectorizer
casts it, and notes what the peers would cast or refuse, what lies outside the env's spaces, and
info values that cannot cross processes. In every run, in a worker process as in this one, it
answers :meth:`Watched.vecshm_check_state`: the plain values the env holds and the module-level
values of the modules its class comes from, so that state a worker process lacks can be named.
It passes every call through unchanged, so a watched env steps exactly as the env itself.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vecshm.check.crossing import crossing_failure
from vecshm.check.findings import Finding, Kind
from vecshm.shared.layout import flatten, leaves

__all__ = ["Watched", "watched"]

# Modules whose values say nothing about the user's env (the parent and a worker import them alike).
_LIBRARY_PREFIXES = ("gymnasium", "numpy", "builtins", "abc", "typing", "collections", "vecshm.check")


def watched(factory: Callable[[], gym.Env], index: int, inspect: bool) -> gym.Env:
    """``factory()`` wrapped in :class:`Watched` (module level, so it pickles by name)."""
    return Watched(factory(), index, inspect, getattr(factory, "__module__", None))


class Watched(gym.Wrapper):
    """``env`` unchanged, watched: with ``inspect``, each value it returns is checked and the first
    finding of each kind and place kept in :attr:`notes`."""

    def __init__(self, env: gym.Env, index: int, inspect: bool, factory_module: str | None) -> None:
        super().__init__(env)
        self.index = index
        self.inspect = inspect
        self.factory_module = factory_module
        self.notes: dict[tuple[str, str], Finding] = {}  # by kind and place: the first of each
        self.step_count = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        obs, info = self.env.reset(seed=seed, options=options)
        if self.inspect:
            self._check_observation(obs, "reset")
            self._check_info(info, "reset")
        return obs, info

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.step_count += 1
        if self.inspect:
            when = f"step {self.step_count}"
            self._check_observation(obs, when)
            self._check_scalars(reward, terminated, truncated, when)
            self._check_info(info, when)
        return obs, reward, terminated, truncated, info

    def vecshm_check_state(self) -> dict[str, Any]:
        """The plain values (numbers, strings, small arrays, containers of them) of the env's own
        attributes, and of the module-level names of the modules its classes and its factory come
        from. ``__main__`` is left out: cloudpickle sends what a factory reads from it by value."""
        state = {f"env attribute {name!r}": value for name, value in _plain_items(vars(self.env.unwrapped))}
        modules = {cls.__module__ for cls in type(self.env.unwrapped).__mro__}
        if self.factory_module:
            modules.add(self.factory_module)
        for module_name in sorted(modules):
            module = sys.modules.get(module_name)
            if module is None or module_name == "__main__" or module_name.startswith(_LIBRARY_PREFIXES):
                continue
            for name, value in _plain_items(vars(module)):
                state[f"module value {module_name}.{name}"] = value
        return state

    def _note(self, kind: Kind, place: str, message: str) -> None:
        self.notes.setdefault((kind, place), Finding(kind, message, env=self.index))

    def _check_observation(self, obs: Any, when: str) -> None:
        space = self.env.observation_space
        try:
            values = flatten(space, obs)
        except ValueError as exc:
            self._note("cast", "structure", f"env {self.index}'s observation at {when} does not match {space}: {exc}")
            return
        problem = False
        for leaf, value in zip(leaves(space), values):
            if leaf.dynamic:
                continue
            where = "observation" + "".join(f"[{part!r}]" for part in leaf.path)
            array = np.asarray(value)
            if array.shape != leaf.shape:
                problem = True
                self._note(
                    "cast",
                    f"{where} shape",
                    f"env {self.index}'s {where} at {when} has shape {array.shape}, but its space declares "
                    f"{leaf.shape}: vecshm, DummyVecEnv and Gymnasium's vector envs write it into rows of "
                    f"{leaf.shape} (broadcast or refused), SubprocVecEnv stacks it as it is",
                )
            elif array.dtype != leaf.dtype:
                problem = True
                given = type(value).__name__ if not isinstance(value, np.ndarray) else "an array"
                self._note(
                    "cast",
                    f"{where} dtype",
                    f"env {self.index}'s {where} at {when} is {given} of {array.dtype}, but its space declares "
                    f"{leaf.dtype}: vecshm, DummyVecEnv and Gymnasium's vector envs return it cast to "
                    f"{leaf.dtype}, SubprocVecEnv as {array.dtype} (np.stack of what the env returned)",
                )
        if not problem and not space.contains(obs):
            self._note(
                "outside-space",
                "observation",
                f"env {self.index}'s observation at {when} lies outside its observation space {space} "
                f"(the vectorizers pass it on as it is; a policy or a wrapper may not expect it)",
            )

    def _check_scalars(self, reward: Any, terminated: Any, truncated: Any, when: str) -> None:
        if np.ndim(reward) != 0 or not isinstance(np.asarray(reward).dtype.type(), (np.number, np.bool_)):
            self._note(
                "cast",
                "reward",
                f"env {self.index}'s reward at {when} is {reward!r:.60} ({type(reward).__name__}), not a "
                "single number: vecshm, DummyVecEnv and SyncVectorEnv refuse it, SubprocVecEnv and "
                "AsyncVectorEnv stack it into an extra axis",
            )
        for name, flag in (("terminated", terminated), ("truncated", truncated)):
            if not isinstance(flag, (bool, np.bool_)):
                self._note(
                    "cast",
                    name,
                    f"env {self.index}'s {name} at {when} is {flag!r:.40} ({type(flag).__name__}), not a bool: "
                    "the vectorizers cast it to bool, and SubprocVecEnv's dones may come back as integers",
                )

    def _check_info(self, info: dict[str, Any], when: str) -> None:
        for key, value in info.items():
            failure = crossing_failure(value, f"info[{key!r}]")
            if failure is not None:
                self._note(
                    "cannot-cross",
                    f"info {key}",
                    f"env {self.index}'s info at {when}: {failure}. Infos travel from a worker process to "
                    "this one pickled, so vecshm, SubprocVecEnv and AsyncVectorEnv all fail on it",
                )


def _plain_items(namespace: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(name, value) for name, value in namespace.items() if not name.startswith("__") and _is_plain(value, 3)]


def _is_plain(value: Any, depth: int) -> bool:
    """Data that means the same in any process and compares by value: no objects, functions,
    modules, generators or handles, and nothing large."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes, np.generic)):
        return not isinstance(value, (str, bytes)) or len(value) <= 1000
    if isinstance(value, np.ndarray):
        return value.dtype != object and value.size <= 1000
    if depth == 0 or isinstance(value, spaces.Space):
        return False
    if isinstance(value, (list, tuple)):
        return len(value) <= 100 and all(_is_plain(item, depth - 1) for item in value)
    if type(value) is dict:
        return len(value) <= 100 and all(
            isinstance(key, str) and _is_plain(item, depth - 1) for key, item in value.items()
        )
    return False
