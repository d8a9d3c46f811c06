"""``VecVideoRecorder``: tiled ``rgb_array`` frames of all envs to mp4, streamed to disk with imageio."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from vecshm.sb3 import stands_for
from vecshm.vec_env.base import VecEnv, VecEnvObs, VecEnvStepReturn, VecEnvWrapper

__all__ = ["VecVideoRecorder"]


def _video_writer(path: str, fps: float) -> Any:
    try:
        import imageio.v2 as imageio
    except ImportError as exc:
        raise ImportError(
            "VecVideoRecorder encodes mp4 with imageio and imageio-ffmpeg: pip install 'vecshm[video]'"
        ) from exc
    # macro_block_size=2: even frame sizes (what yuv420p needs) without rescaling to multiples of 16
    return imageio.get_writer(path, fps=fps, codec="libx264", macro_block_size=2)


@stands_for("VecVideoRecorder")
class VecVideoRecorder(VecEnvWrapper):
    """Records videos of the tiled frames, starting whenever ``record_video_trigger(step)`` is true.

    SB3 semantics: one video at a time of ``video_length`` steps (``video_length + 1`` frames),
    named ``{name_prefix}-step-{start}-to-step-{end}.mp4``; frames are written as they come, so
    memory stays flat, and ``close()`` finishes the file.
    """

    video_name: str
    video_path: str

    def __init__(
        self,
        venv: VecEnv,
        video_folder: str,
        record_video_trigger: Callable[[int], bool],
        video_length: int = 200,
        name_prefix: str = "rl-video",
    ) -> None:
        VecEnvWrapper.__init__(self, venv)
        self.env = venv
        base = venv.unwrapped
        metadata = base.get_attr("metadata")[0] if hasattr(base, "get_attr") else base.metadata
        self.env.metadata = metadata
        if self.env.render_mode != "rgb_array":
            raise ValueError(f"The render_mode must be 'rgb_array', not {self.env.render_mode}")
        if video_length < 1:
            raise ValueError(f"video_length must be at least 1 step, got {video_length}")
        try:  # fail at construction, not at the first video, if the encoder is missing
            import imageio  # noqa: F401
            import imageio_ffmpeg  # noqa: F401
        except ImportError as exc:
            raise ImportError(
                "VecVideoRecorder encodes mp4 with imageio and imageio-ffmpeg: pip install 'vecshm[video]'"
            ) from exc
        self.frames_per_sec = metadata.get("render_fps", 30)
        self.record_video_trigger = record_video_trigger
        self.video_folder = os.path.abspath(video_folder)
        os.makedirs(self.video_folder, exist_ok=True)
        self.name_prefix = name_prefix
        self.step_id = 0
        self.video_length = video_length
        self.recording = False
        self.recorded_frames = 0
        self._writer: Any = None

    def reset(self) -> VecEnvObs:
        obs = self.venv.reset()
        if self._video_enabled():
            self._start_video_recorder()
        return obs

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = self.venv.step_wait()
        self.step_id += 1
        if self.recording:
            self._capture_frame()
            if self.recorded_frames > self.video_length:
                self._stop_recording()
        elif self._video_enabled():
            self._start_video_recorder()
        return obs, rewards, dones, infos

    def close(self) -> None:
        VecEnvWrapper.close(self)
        if self.recording:
            self._stop_recording()

    def _video_enabled(self) -> bool:
        return bool(self.record_video_trigger(self.step_id))

    def _start_video_recorder(self) -> None:
        if self.recording:
            self._stop_recording()
        self.video_name = f"{self.name_prefix}-step-{self.step_id}-to-step-{self.step_id + self.video_length}.mp4"
        self.video_path = os.path.join(self.video_folder, self.video_name)
        self._writer = _video_writer(self.video_path, float(self.frames_per_sec))
        self.recording = True
        self._capture_frame()

    def _capture_frame(self) -> None:
        frame = self.env.render()
        if not isinstance(frame, np.ndarray):
            self._stop_recording()
            raise TypeError(f"Recording stopped: render() must return a numpy array, got {type(frame).__name__}")
        self._writer.append_data(frame)
        self.recorded_frames += 1

    def _stop_recording(self) -> None:
        self._writer.close()
        self._writer = None
        self.recorded_frames = 0
        self.recording = False
