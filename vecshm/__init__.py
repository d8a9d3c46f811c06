"""vecshm: vectorized RL environments on shared memory, a drop-in for SB3's SubprocVecEnv.

Importing vecshm does three things beyond defining its names, each because its users need it, and
each written here (at the end of this module) rather than left to an import's side effect:

1. it registers its built-in envs with Gymnasium (``vecshm/Frames-v0``, ...;
   :func:`vecshm.envs.register_envs`), so that ``gym.make`` finds them, in the caller as in the
   workers, which get the caller's registry;
2. it makes SB3 take vecshm's classes for its own and the other way round (:func:`vecshm.sb3.install`):
   at once if SB3 is imported, else, since SB3 may well be imported after vecshm, through a finder
   on ``sys.meta_path`` that waits for SB3's ``vec_env`` package and does nothing else;
3. it imports :mod:`vecshm.vector` whole, whose custom-worker subclass
   (``ShmVectorEnv(..., worker=fn)``) names itself to ``ShmVectorEnv`` where it is defined.
"""

from vecshm import sb3
from vecshm._version import __version__
from vecshm.check import check  # the function: its package stays importable (python -m vecshm.check)
from vecshm.envs import register_envs
from vecshm.monitor import Monitor
from vecshm.shared.affinity import Topology, topology
from vecshm.shared.errors import (
    ActorDiedError,
    AlreadyPendingCallError,
    ClosedError,
    FailedError,
    NoAsyncCallError,
    SpaceMismatchError,
    StatsOffError,
    StepTimeoutError,
    VecShmError,
    WorkerDiedError,
    WorkerError,
)
from vecshm.shared.sharing import SharedArray, SharedDataError, share
from vecshm.tune import tune  # the function: its package stays importable (python -m vecshm.tune)
from vecshm.vec_env import (
    CloudpickleWrapper,
    DummyVecEnv,
    ShmVecEnv,
    VecEnv,
    VecEnvWrapper,
    make_vec_env,
)
from vecshm.vector import ShmVectorEnv
from vecshm.vector.make_vec import make_vec
from vecshm.wrappers import (
    RunningMeanStd,
    StackedObservations,
    VecCheckNan,
    VecEnvObservationWrapper,
    VecExtractDictObs,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
    VecTransposeImage,
    VecVideoRecorder,
)

register_envs()
sb3.install()

__all__ = [
    "ActorDiedError",
    "AlreadyPendingCallError",
    "ClosedError",
    "CloudpickleWrapper",
    "DummyVecEnv",
    "FailedError",
    "NoAsyncCallError",
    "ShmVecEnv",
    "ShmVectorEnv",
    "SharedArray",
    "SharedDataError",
    "SpaceMismatchError",
    "StatsOffError",
    "StepTimeoutError",
    "Topology",
    "VecEnv",
    "VecEnvWrapper",
    "VecShmError",
    "WorkerDiedError",
    "WorkerError",
    "Monitor",
    "check",
    "make_vec",
    "make_vec_env",
    "share",
    "tune",
    "topology",
    "RunningMeanStd",
    "StackedObservations",
    "VecCheckNan",
    "VecEnvObservationWrapper",
    "VecExtractDictObs",
    "VecFrameStack",
    "VecMonitor",
    "VecNormalize",
    "VecTransposeImage",
    "VecVideoRecorder",
    "__version__",
]
