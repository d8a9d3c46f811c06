"""What a facade hands back: numpy arrays (the default), torch tensors over the same memory, or
tensors on a GPU.

``device=None`` keeps today's numpy outputs. ``device="cpu"`` wraps exactly the arrays numpy
outputs would be (``torch.from_numpy``): no copy, and the same lifetimes as ``copy=`` and the
lending rules give them. ``device="cuda"`` copies each batch to the GPU without blocking:

- **From where.** A batch lent from the segment (a whole batch's slot, an async batch's ring units)
  is copied from there, by DMA when the segment is registered (``pin_memory``). Anything else (small
  observations, which are never lent, batches that are copied out, rewards and flags) is gathered
  once into a page-locked staging buffer that vecshm owns, and copied in one piece.
- **The guard.** A copy reads host memory after the call returned, so nothing may write that
  memory before the copy finished. The lending rules already keep a lent slot or unit from every
  worker while an array views it: :class:`CopyGuard` holds those arrays, and the staging buffer,
  until the copy's event has passed. torch's host allocator tracks only the memory it allocated, so
  vecshm must track its own. Holding is bounded: before a new batch, all but the latest copy are
  waited for (a copy of 6 MB takes ~130 us; a step takes longer), which keeps slots and units free.
- **For the caller.** The tensors are fresh device memory, valid indefinitely, and the caller's
  current stream is ordered after the copy.

The stream and its events are behind :class:`CopyStream` (CUDA's is :class:`vecshm.parent.handback.cuda.CudaCopies`),
so the guard is tested without a GPU, with a slow fake stream.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

import numpy as np

from vecshm.parent.handback.results import Batch

__all__ = [
    "NUMPY",
    "build_outputs",
    "output_device",
    "NumpyOutputs",
    "CpuTensors",
    "DeviceOutputs",
    "CopyGuard",
    "CopyStream",
    "CopyEvent",
    "host_arrays",
]

ALIGN = 64  # bytes between the pieces of a staging buffer: every dtype's view of its piece is aligned


class CopyEvent(Protocol):
    """Marks the copies started before it (``torch.cuda.Event``)."""

    def query(self) -> bool: ...

    def synchronize(self) -> None: ...


class CopyStream(Protocol):
    """Where copies to the device run (see :class:`vecshm.parent.handback.cuda.CudaCopies`)."""

    def host_buffer(self, nbytes: int) -> np.ndarray: ...

    def copy(self, sources: list[np.ndarray]) -> list[Any]: ...

    def split(self, whole: Any, layout: list[tuple[int, np.dtype, tuple[int, ...]]]) -> list[Any]: ...

    def record(self) -> CopyEvent: ...

    def hand_over(self, event: CopyEvent, tensors: list[Any]) -> None: ...


def host_arrays(value: Any) -> Any:
    """Actions as numpy: torch tensors (on any device) become arrays, in dicts, tuples and lists too."""
    if isinstance(value, np.ndarray):
        return value
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    if isinstance(value, dict):
        return {key: host_arrays(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)) and any(type(v).__module__.startswith("torch") for v in value):
        return type(value)(host_arrays(item) for item in value)
    return value


class NumpyOutputs:
    """The default: numpy arrays, as the facade's peer returns them."""

    lends = False  # whether whole batches should come lent from a slot (else as ``copy`` says)

    def observations(self, batch: Batch, copy: bool) -> Any:
        return batch.observations(copy)

    def step(self, batch: Batch, rewards: np.ndarray, copy: bool) -> tuple[Any, Any, Any, Any]:
        """``(observations, rewards, terminations, truncations)`` of ``batch``."""
        return batch.observations(copy), rewards, batch.terminated, batch.truncated

    def before_batch(self) -> None:
        """Called before an async batch is taken (so that the device copies can give back units)."""

    def close(self) -> None:
        """Finish what is in flight and let go of the segment."""


class CpuTensors(NumpyOutputs):
    """``torch.from_numpy`` of the arrays numpy outputs would be: the same memory, no copy."""

    def __init__(self, torch: Any) -> None:
        self.from_numpy = torch.from_numpy

    def observations(self, batch: Batch, copy: bool) -> Any:
        return batch.assembled([self.from_numpy(a) for a in batch.fixed_leaves(copy)])

    def step(self, batch: Batch, rewards: np.ndarray, copy: bool) -> tuple[Any, Any, Any, Any]:
        t = self.from_numpy
        return self.observations(batch, copy), t(rewards), t(batch.terminated), t(batch.truncated)


class CopyGuard:
    """Host memory that copies in flight still read, held until their events have passed."""

    def __init__(self) -> None:
        self._pending: deque[tuple[CopyEvent, list[np.ndarray], np.ndarray | None]] = deque()
        self._staging: dict[int, list[np.ndarray]] = {}  # free staging buffers, by size

    def hold(self, event: CopyEvent, lent: list[np.ndarray], staging: np.ndarray | None) -> None:
        """Keep ``lent`` (arrays that own their slot or units) and ``staging`` until ``event``."""
        self._pending.append((event, lent, staging))

    def reap(self, keep: int) -> None:
        """Let go of what finished copies held, then wait until at most ``keep`` copies are in flight."""
        pending = self._pending
        while pending and (len(pending) > keep or pending[0][0].query()):
            event, _lent, staging = pending.popleft()
            event.synchronize()  # (at once, for a copy that query() found done)
            if staging is not None:
                self._staging.setdefault(staging.nbytes, []).append(staging)
        # dropping ``_lent`` gives its slot or units back to the workers

    def staging(self, nbytes: int, stream: CopyStream) -> np.ndarray:
        """A free staging buffer of ``nbytes`` (page-locked, from ``stream``)."""
        free = self._staging.get(nbytes)
        return free.pop() if free else stream.host_buffer(nbytes)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        """Wait for every copy, then let go of everything."""
        self.reap(0)
        self._staging.clear()


class DeviceOutputs(NumpyOutputs):
    """Tensors on a GPU: each batch copied without blocking from the segment or a staging buffer
    (see the module's docstring), with its host memory held by a :class:`CopyGuard`."""

    lends = True

    def __init__(self, stream: CopyStream, keep_in_flight: int = 1) -> None:
        self.stream = stream
        self.guard = CopyGuard()
        self.keep_in_flight = keep_in_flight
        self._layouts: dict[tuple, tuple[list[tuple[int, np.dtype, tuple[int, ...]]], int]] = {}

    def observations(self, batch: Batch, copy: bool) -> Any:
        return self._deliver(batch, [])[0]

    def step(self, batch: Batch, rewards: np.ndarray, copy: bool) -> tuple[Any, Any, Any, Any]:
        obs, (r, terminated, truncated) = self._deliver(batch, [rewards, batch.terminated, batch.truncated])
        return obs, r, terminated, truncated

    def before_batch(self) -> None:
        self.guard.reap(self.keep_in_flight)

    def _deliver(self, batch: Batch, small: list[np.ndarray]) -> tuple[Any, list[Any]]:
        """The batch's observations (fixed leaves on the device) and ``small`` on the device."""
        guard, stream = self.guard, self.stream
        guard.reap(self.keep_in_flight)
        lent = batch.lent
        arrays = batch.fixed_leaves(copy=False)  # lent, or views of slot 0 that the next command rewrites
        direct = arrays if lent else []
        staged = small if lent else [*arrays, *small]
        staging = None
        if staged:
            layout, offset = self._layout(staged)
            staging = guard.staging(offset, stream)
            for (start, _dtype, _shape), a in zip(layout, staged):
                staging[start : start + a.nbytes] = a.reshape(-1).view(np.uint8)
            *outputs, whole = stream.copy([*direct, staging])
            handed = [*outputs, whole]
            outputs.extend(stream.split(whole, layout))
        else:
            outputs = stream.copy(direct)
            handed = outputs
        event = stream.record()
        stream.hand_over(event, handed)
        guard.hold(event, direct, staging)
        n = len(arrays)
        return batch.assembled(outputs[:n]), outputs[n:]

    def _layout(self, staged: list[np.ndarray]) -> tuple[list[tuple[int, np.dtype, tuple[int, ...]]], int]:
        """Where each of ``staged`` goes in a staging buffer, and the buffer's size (the same arrays
        come every batch: worked out once per shape)."""
        key = tuple((a.dtype, a.shape) for a in staged)
        found = self._layouts.get(key)
        if found is None:
            layout, offset = [], 0
            for a in staged:
                layout.append((offset, a.dtype, a.shape))
                offset += -(-a.nbytes // ALIGN) * ALIGN
            found = self._layouts[key] = (layout, offset)
        return found

    def close(self) -> None:
        self.guard.close()


def output_device(device: Any, pin_memory: bool | None, start_method: str, restarts: bool) -> tuple[Any, bool]:
    """Check a facade's ``device`` and ``pin_memory`` before any worker starts: the ``torch.device``
    of its outputs (None: numpy) and whether to register the segment (by default, for a CUDA
    device). ``ValueError`` naming the option without torch or CUDA, or with a start method that
    would fork a worker from a process using CUDA."""
    if device is None and not pin_memory:
        return None, False
    from vecshm.parent.handback import cuda

    target = cuda.torch_device(device, bool(pin_memory))
    pin = bool(pin_memory) if pin_memory is not None else target is not None and target.type == "cuda"
    if pin or target.type == "cuda":
        cuda.check_start_method(start_method, restarts)
    return target, pin


def build_outputs(target: Any, pin: bool, mapping: np.ndarray) -> tuple[NumpyOutputs, Any]:
    """The outputs for ``target`` (see :func:`output_device`), and the segment's registration (None
    unless ``pin``), made once the workers have started."""
    if target is None and not pin:
        return NUMPY, None
    from vecshm.parent.handback import cuda

    registration = cuda.SegmentRegistration(mapping) if pin else None
    try:
        if target is None:
            return NUMPY, registration
        if target.type == "cpu":
            return CpuTensors(cuda.import_torch("device='cpu'")), registration
        return DeviceOutputs(cuda.CudaCopies(target)), registration
    except BaseException:
        if registration is not None:
            registration.close()
        raise


NUMPY = NumpyOutputs()
