"""The parent's Gymnasium registry, carried to the workers before they build their envs.

Under ``forkserver`` and ``spawn`` a worker starts from a fresh interpreter: ids registered in the
parent at run time (``gym.register`` inside ``main()``, or ``import ale_py`` there, which adds the
``ALE/`` namespace) are unknown to it, and ``gym.make("ALE/Pong-v5")`` fails with "Namespace ALE
not found". SubprocVecEnv and AsyncVectorEnv fail the same way. vecshm sends each registry entry
(the ``EnvSpec``, entry point included, cloudpickled) with the worker's spec, and a worker whose
env factory asks for an id it does not know adds the entries it lacks and tries again.
"""

from __future__ import annotations

import importlib

import cloudpickle
from gymnasium.envs.registration import EnvSpec, registry

__all__ = ["snapshot_registry", "adopt_registry"]


def snapshot_registry() -> bytes:
    """The parent's registry entries, each pickled on its own; one that cannot be pickled is left out."""
    entries: dict[str, bytes] = {}
    for env_id, spec in list(registry.items()):
        try:
            entries[env_id] = cloudpickle.dumps(spec)
        except Exception:
            continue
    return cloudpickle.dumps(entries)


def adopt_registry(snapshot: bytes) -> int:
    """Add the parent's entries that this process's registry lacks (its own entries win); how many were missing.

    The modules the missing entries point to are imported first: a package that registers its
    envs on import (``ale_py``) then does so itself, and no entry is registered twice (which
    Gymnasium would warn about, once per id). An entry that cannot be unpickled here (its entry
    point's module is missing) is skipped: ``gym.make`` says what is missing if it is asked for.
    """
    if not snapshot:
        return 0
    entries: dict[str, bytes] = cloudpickle.loads(snapshot)
    missing: dict[str, EnvSpec] = {}
    for env_id, blob in entries.items():
        if env_id in registry:
            continue
        try:
            missing[env_id] = cloudpickle.loads(blob)
        except Exception:
            continue
    modules = {spec.entry_point.split(":")[0] for spec in missing.values() if isinstance(spec.entry_point, str)}
    for module in sorted(modules):
        try:
            importlib.import_module(module)
        except Exception:
            continue
    for env_id, spec in missing.items():
        registry.setdefault(env_id, spec)
    return len(missing)  # every id that was missing is known now, registered by its module or by us
