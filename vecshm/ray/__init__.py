"""vecshm on Ray: envs across the nodes of a cluster, with vecshm as the engine on each node.

- :class:`RayVecEnv`: an SB3 ``VecEnv`` whose envs live in Ray actors, each a ``ShmVecEnv``.
- :func:`register_env`: an env name for RLlib whose env runners vectorize with ``ShmVectorEnv``.

Needs Ray (``pip install 'vecshm[ray]'``; RLlib: ``'vecshm[rllib]'``); ``import vecshm`` alone never
imports it.
"""

try:
    import ray as _ray  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("vecshm.ray needs Ray: pip install 'vecshm[ray]' (or 'vecshm[rllib]' for RLlib)") from exc

from vecshm.ray.rllib import register_env
from vecshm.ray.vec_env import RayVecEnv

__all__ = ["RayVecEnv", "register_env"]
