"""The Gymnasium facade: ``ShmVectorEnv``, its peer's rules, the custom-worker variant, and ``make_vec``.

``ShmVectorEnv(..., worker=fn)`` runs on ``AsyncVectorEnv``'s own pipes, as the subclass
:class:`~vecshm.vector.on_pipes.ShmVectorEnvOnPipes`, which names itself to ``ShmVectorEnv`` where
it is defined (``runs_custom_workers=True``). Both are imported here, with the package, so that a
``ShmVectorEnv`` always knows it.
"""

from vecshm.vector.on_pipes import ShmVectorEnvOnPipes
from vecshm.vector.shm_vector_env import ShmVectorEnv

__all__ = ["ShmVectorEnv", "ShmVectorEnvOnPipes"]
