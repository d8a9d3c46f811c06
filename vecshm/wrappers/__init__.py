"""SB3's vec env wrappers, on vecshm (no SB3 or torch import)."""

from vecshm.wrappers.base import VecEnvObservationWrapper
from vecshm.wrappers.check_nan import VecCheckNan
from vecshm.wrappers.extract_dict_obs import VecExtractDictObs
from vecshm.wrappers.frame_stack import VecFrameStack
from vecshm.wrappers.image import is_image_space, is_image_space_channels_first
from vecshm.wrappers.normalize import VecNormalize
from vecshm.wrappers.running_mean_std import RunningMeanStd
from vecshm.wrappers.stacked_observations import StackedObservations
from vecshm.wrappers.transpose import VecTransposeImage
from vecshm.wrappers.vec_monitor import VecMonitor
from vecshm.wrappers.video_recorder import VecVideoRecorder

__all__ = [
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
    "is_image_space",
    "is_image_space_channels_first",
]
