"""The parent's Gymnasium registry, carried to the workers before they build their envs.

Under ``forkserver`` and ``spawn`` a worker starts from a fresh interpreter: ids registered in the
parent at run time (``gym.register`` inside ``main()``, or ``import ale_py`` there, which adds the
``ALE/`` namespace) are unknown to it, and ``gym.make("ALE/Pong-v5")`` fails with "Namespace ALE
not found". SubprocVecEnv and AsyncVectorEnv fail the same way. vecshm sends each registry entry
(the ``EnvSpec``, entry point included, cloudpickled) and a worker adds the ones it lacks.
"""

from __future__ import annotations

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


def adopt_registry(snapshot: bytes) -> None:
    """Add the parent's entries that this process's registry lacks (its own entries win).

    An entry that cannot be unpickled here (its entry point's module is missing) is skipped: it
    only matters if an env factory asks for it, and then ``gym.make`` says what is missing.
    """
    if not snapshot:
        return
    entries: dict[str, bytes] = cloudpickle.loads(snapshot)
    for env_id, blob in entries.items():
        if env_id in registry:
            continue
        try:
            spec: EnvSpec = cloudpickle.loads(blob)
        except Exception:
            continue
        registry[env_id] = spec
