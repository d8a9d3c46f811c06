"""SB3-style vec envs: the base classes, the in-process reference, and the shared-memory one."""

from vecshm.vec_env.base import (
    CloudpickleWrapper,
    VecEnv,
    VecEnvIndices,
    VecEnvObs,
    VecEnvStepReturn,
    VecEnvWrapper,
    tile_images,
)
from vecshm.vec_env.dummy import DummyVecEnv
from vecshm.vec_env.make_vec_env import make_vec_env
from vecshm.vec_env.shm_vec_env import ShmVecEnv

__all__ = [
    "CloudpickleWrapper",
    "DummyVecEnv",
    "ShmVecEnv",
    "VecEnv",
    "VecEnvIndices",
    "VecEnvObs",
    "VecEnvStepReturn",
    "VecEnvWrapper",
    "make_vec_env",
    "tile_images",
]
