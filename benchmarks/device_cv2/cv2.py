"""A stand-in for the three OpenCV calls SB3's Atari recipe makes, for the 16-core device only.

The device machine has no OpenCV and no network, and OpenCV is too large to carry with the checkout
(the carry limit is 64 MiB). SB3's ``WarpFrame`` needs ``cv2.cvtColor(frame, COLOR_RGB2GRAY)`` and
``cv2.resize(frame, (84, 84), interpolation=INTER_AREA)``, and ``atari_wrappers`` calls
``cv2.ocl.setUseOpenCL(False)`` on import. Pillow (a matplotlib dependency, present there) does the
same work in C: the ITU-R 601-2 luma OpenCV uses, and a box (area-average) filter for the downscale.
Values may differ from OpenCV's by rounding; the cost per frame is of the same kind, and every
vectorizer in a run steps the same envs. ``benchmarks/device_run.sh train`` puts this folder on
``PYTHONPATH`` only where ``import cv2`` fails. Never on the path anywhere else.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from PIL import Image

COLOR_RGB2GRAY = 7
INTER_AREA = 3
ocl = SimpleNamespace(setUseOpenCL=lambda flag: None)


def cvtColor(frame: np.ndarray, code: int) -> np.ndarray:  # noqa: N802  (OpenCV's name)
    if code != COLOR_RGB2GRAY:
        raise NotImplementedError(f"this stand-in converts RGB to gray only, not code {code}")
    return np.asarray(Image.fromarray(frame).convert("L"))


def resize(frame: np.ndarray, size: tuple[int, int], interpolation: int = INTER_AREA) -> np.ndarray:
    if interpolation != INTER_AREA:
        raise NotImplementedError(f"this stand-in resizes with INTER_AREA only, not {interpolation}")
    return np.asarray(Image.fromarray(frame).resize(size, Image.Resampling.BOX))
