"""CUDA for the hand-off of observations to a GPU: the segment registered in place, and a copy stream.

PyTorch is imported here only, and only when a vec env asks for ``pin_memory`` or a ``device``:
vecshm itself needs no torch. CUDA is touched only in the parent, after its workers started, so no
worker inherits a CUDA context (see :func:`check_start_method`).

**Registration.** ``cudaHostRegister`` locks the pages of the segment's mapping and tells CUDA
about them, in place: a host-to-device copy from them is one DMA at full bus speed (about 50 GB/s
on an H200 against 11 GB/s from ordinary memory, ../shared/device-results/2026-11-26), with no
staging copy, and any caller's ``torch.from_numpy(obs).to("cuda")`` gets it. A registration must
cover the mapping exactly and be undone before the mapping goes: :class:`SegmentRegistration`
holds the mapping until it unregisters.
"""

from __future__ import annotations

import ctypes
import math
import weakref
from typing import Any

import numpy as np

__all__ = [
    "CudaCopies",
    "RegistrationError",
    "SegmentRegistration",
    "check_start_method",
    "host_register",
    "import_torch",
    "torch_device",
]

PAGE = 4096
# cudaHostRegisterPortable: the pages count as locked for every CUDA context, as torch's own pinning does
REGISTER_PORTABLE = 1


class RegistrationError(RuntimeError):
    """CUDA refused to register the segment's memory (its reason is in the message)."""


def import_torch(option: str) -> Any:
    """``torch``, or a ``ValueError`` naming ``option`` (what asked for it) when it is missing."""
    try:
        import torch
    except ImportError:
        raise ValueError(
            f"{option} needs PyTorch, which is not installed: pip install torch (with CUDA for a GPU)"
        ) from None
    return torch


def torch_device(device: Any, pin_memory: bool) -> Any:
    """The ``torch.device`` outputs go to (None: numpy outputs), after checking that CUDA is there
    for ``device`` and ``pin_memory``; a ``ValueError`` naming the option when it is not."""
    option = f"device={device!r}" if device is not None else "pin_memory=True"
    torch = import_torch(option)
    target = None if device is None else torch.device(device)
    needs_cuda = pin_memory or (target is not None and target.type == "cuda")
    if target is not None and target.type not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r}: vecshm delivers to 'cpu' or 'cuda' devices, got {target.type!r}")
    if needs_cuda and not torch.cuda.is_available():
        what = option if target is None or target.type == "cuda" else "pin_memory=True"
        raise ValueError(
            f"{what} needs CUDA, but torch.cuda.is_available() is False (torch {torch.__version__}); "
            "use device='cpu' or numpy outputs (device=None, pin_memory=False)"
        )
    if target is not None and target.type == "cuda" and target.index is None:
        target = torch.device("cuda", torch.cuda.current_device())
    return target


def check_start_method(start_method: str, restarts: bool) -> None:
    """Workers are never forked from a parent with a CUDA context: a forked child inherits a context
    it cannot use. With ``fork`` that rules out a restart (it forks from this process after CUDA
    started here) and a vec env started after CUDA already runs in this process."""
    if start_method != "fork":
        return
    import torch

    if restarts or torch.cuda.is_initialized():
        why = "a restart would fork" if restarts else "CUDA already runs in this process, and fork would copy"
        raise ValueError(
            f"pin_memory and a CUDA device need workers that are not forked from a process using CUDA: "
            f"{why} it into the worker. Pass start_method='forkserver' (ShmVecEnv) or "
            "context='forkserver' (ShmVectorEnv)"
        )


def _clear_last_error() -> None:
    """Reset the CUDA runtime's last error after a failed call: torch checks it after its next
    kernel launch, and would report our failure there as its own (often as out of memory)."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "libcudart" in line and "/" in line}
    for path in paths:
        try:
            ctypes.CDLL(path).cudaGetLastError()
        except (OSError, AttributeError):
            continue


def _prefault(mapping: np.ndarray) -> None:
    """Touch every page of ``mapping`` (reads), so that registering it does not fault them one by one."""
    flat = mapping.reshape(-1).view(np.uint8)
    int(flat[::PAGE].sum(dtype=np.uint64))


def _unregister(torch: Any, address: int, mapping: np.ndarray) -> None:
    """Undo a registration (``mapping`` is held until now, so it cannot be unmapped before)."""
    try:
        code = int(torch.cuda.cudart().cudaHostUnregister(address))
    except Exception:  # interpreter shutdown: CUDA may be gone already, and the process with it
        return
    if code:
        _clear_last_error()


def host_register(address: int, nbytes: int) -> int:
    """Page-lock ``nbytes`` at ``address`` and register them with CUDA, for every context
    (``cudaHostRegisterPortable``); CUDA's error code, 0 on success. The one call into CUDA's
    registration, which a test may replace to make it fail."""
    import torch

    return int(torch.cuda.cudart().cudaHostRegister(address, nbytes, REGISTER_PORTABLE))


class SegmentRegistration:
    """The segment's mapping, page-locked and registered with CUDA in place until :meth:`close`
    (or until this object is garbage collected, or at exit)."""

    def __init__(self, mapping: np.ndarray) -> None:
        torch = import_torch("pin_memory=True")
        self.address, self.nbytes = int(mapping.ctypes.data), int(mapping.nbytes)
        _prefault(mapping)
        code = host_register(self.address, self.nbytes)
        if code:
            _clear_last_error()
            raise RegistrationError(
                f"pin_memory=True: CUDA could not register the shared segment ({self.nbytes / 2**20:.1f} MiB "
                f"at {self.address:#x}): {torch.cuda.CudaError(code)}"
            )
        self._finalizer = weakref.finalize(self, _unregister, torch, self.address, mapping)

    def close(self) -> None:
        self._finalizer()


class _TorchDtypes(dict):
    """numpy dtype -> torch dtype, found once per dtype."""

    def __init__(self, torch: Any) -> None:
        super().__init__()
        self.torch = torch

    def __missing__(self, dtype: np.dtype) -> Any:
        self[dtype] = found = self.torch.from_numpy(np.empty(0, dtype)).dtype
        return found


class CudaCopies:
    """Host-to-device copies on a stream vecshm owns (the :class:`~vecshm.parent.handback.delivery.CopyStream`
    that :class:`~vecshm.parent.handback.delivery.DeviceOutputs` drives; tests drive a fake one)."""

    def __init__(self, device: Any) -> None:
        self.torch = torch = import_torch(f"device={device!s}")
        self.device = device
        self.stream = torch.cuda.Stream(device)
        self._dtypes = _TorchDtypes(torch)

    def host_buffer(self, nbytes: int) -> np.ndarray:
        """A page-locked host buffer of ``nbytes`` bytes (vecshm's staging, see DeviceOutputs)."""
        return self.torch.empty(nbytes, dtype=self.torch.uint8, pin_memory=True).numpy()

    def copy(self, sources: list[np.ndarray]) -> list[Any]:
        """Start copying each of ``sources`` to the device, without waiting; the device tensors
        (their contents are valid once the caller's stream reaches the copies: :meth:`hand_over`).
        One switch to vecshm's stream for all of them: a switch costs more than issuing a copy."""
        torch = self.torch
        with torch.cuda.stream(self.stream):
            return [torch.from_numpy(source).to(self.device, non_blocking=True) for source in sources]

    def split(self, whole: Any, layout: list[tuple[int, np.dtype, tuple[int, ...]]]) -> list[Any]:
        """Views of the bytes ``whole`` (one copy of a staging buffer): one tensor per ``(offset,
        dtype, shape)``."""
        out = []
        for offset, dtype, shape in layout:
            nbytes = math.prod(shape) * dtype.itemsize  # (np.prod costs microseconds per call)
            out.append(whole[offset : offset + nbytes].view(self._dtypes[dtype]).view(shape))
        return out

    def record(self) -> Any:
        """An event after every copy started so far."""
        event = self.torch.cuda.Event()
        event.record(self.stream)
        return event

    def hand_over(self, event: Any, tensors: list[Any]) -> None:
        """Order the caller's current stream after the copies, and keep the device memory of
        ``tensors`` (allocated on vecshm's stream) from reuse until the caller's work on them is done."""
        current = self.torch.cuda.current_stream(self.device)
        current.wait_event(event)
        for tensor in tensors:
            tensor.record_stream(current)
