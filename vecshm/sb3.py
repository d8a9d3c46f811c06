"""Make Stable-Baselines3 accept vecshm's classes, without importing SB3 (or torch) ourselves.

SB3 checks ``isinstance(env, VecEnv)`` (and friends such as ``VecNormalize`` in
``sync_envs_normalization``). SB3's classes are ABCs, so vecshm registers its own classes as
virtual subclasses of their SB3 counterparts, the moment SB3's ``vec_env`` package finishes
importing (or at once, if it already has). Each vecshm class says which SB3 class it stands for
where it is defined (``@stands_for("VecFrameStack")``), so the tie is in sight of both. Nothing
here imports SB3.

The other direction matters too: SB3's algorithms wrap image envs in SB3's own
``VecTransposeImage``, and code that moved to vecshm's names then asks
``is_vecenv_wrapped(model.get_env(), VecTransposeImage)`` with vecshm's class. ABCs refuse a
registration cycle, so vecshm's classes instead answer ``issubclass`` for instances of their SB3
counterpart (``VecEnv.__subclasshook__`` asks :func:`sb3_counterpart`). ``ShmVecEnv`` is the
exception: a ``SubprocVecEnv`` has none of its async API, so it is not taken for one.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

__all__ = ["DECLARED", "install", "register_with_sb3", "sb3_counterpart", "stands_for"]

SB3_VEC_ENV = "stable_baselines3.common.vec_env"

C = TypeVar("C", bound=type)

# vecshm class -> (the name of SB3's class in stable_baselines3.common.vec_env, one way): filled by
# the classes themselves, as they are defined (:func:`stands_for`)
DECLARED: dict[type, tuple[str, bool]] = {}

# vecshm class -> SB3's own class, as SB3 defined it (code that rebinds SB3's names later does not move it)
_SB3_CLASSES: dict[type, type] = {}


def stands_for(sb3_name: str, *, one_way: bool = False) -> Callable[[C], C]:
    """A class decorator: vecshm's class stands for SB3's class ``sb3_name``. Its instances pass
    SB3's ``isinstance`` checks, and, unless ``one_way`` (a ``SubprocVecEnv`` has none of
    ``ShmVecEnv``'s async API), SB3's instances pass vecshm's (see the module)."""

    def declare(cls: C) -> C:
        DECLARED[cls] = (sb3_name, one_way)
        loaded = sys.modules.get(SB3_VEC_ENV)
        if loaded is not None:  # (SB3 imported before this class: register it now)
            _register(cls, loaded)
        return cls

    return declare


def sb3_counterpart(cls: type) -> type | None:
    """SB3's class whose instances count as instances of vecshm's ``cls``, once SB3 is imported."""
    return _SB3_CLASSES.get(cls)


def register_with_sb3(sb3_vec_env: ModuleType) -> None:
    """Register every vecshm class declared so far as a virtual subclass of its SB3 counterpart,
    and remember the counterpart for the other direction."""
    for ours in list(DECLARED):
        _register(ours, sb3_vec_env)


def _register(ours: type, sb3_vec_env: ModuleType) -> None:
    sb3_name, one_way = DECLARED[ours]
    theirs = getattr(sb3_vec_env, sb3_name, None)
    if theirs is None or theirs is ours or not hasattr(theirs, "register"):
        return
    if not issubclass(ours, theirs):
        theirs.register(ours)
    if not one_way:
        _SB3_CLASSES.setdefault(ours, theirs)


class _RegisteringLoader(importlib.abc.Loader):
    """Runs SB3's own loader, then registers vecshm's classes with the module it produced."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        register_with_sb3(module)


class _SB3Finder(importlib.abc.MetaPathFinder):
    """Watches for SB3's ``vec_env`` package and wraps its loader."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != SB3_VEC_ENV:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _RegisteringLoader(spec.loader)
                return spec
        return None


_FINDER = _SB3Finder()


def install() -> None:
    """Register now if SB3 is loaded, else as soon as it is (idempotent)."""
    module = sys.modules.get(SB3_VEC_ENV)
    if module is not None:
        register_with_sb3(module)
    elif _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
