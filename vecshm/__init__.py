"""vecshm: vectorized RL environments on shared memory, a drop-in for SB3's SubprocVecEnv."""

from vecshm import envs as _builtin_envs  # noqa: F401  (registers the vecshm/... env ids)
from vecshm import sb3 as _sb3
from vecshm._version import __version__
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
from vecshm.vec_env import (
    CloudpickleWrapper,
    DummyVecEnv,
    ShmVecEnv,
    VecEnv,
    VecEnvWrapper,
    make_vec_env,
)
from vecshm.vector import on_pipes as _on_pipes  # noqa: F401  (ShmVectorEnv(worker=...) runs on it)
from vecshm.vector.make_vec import make_vec
from vecshm.vector.shm import ShmVectorEnv
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

_sb3.install()

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
    "make_vec",
    "make_vec_env",
    "share",
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
