"""Which OS mechanisms carry a vec env: Linux's native ones, or a portable set for every platform.

Native (Linux): the segment is a ``memfd`` handed to workers over their socket, wake-ups are
``eventfd`` counters, and the parent waits with ``poll``. None has a name, so nothing can leak.

Portable (macOS, Windows, or ``VECSHM_TRANSPORT=portable`` anywhere): the segment is a
``multiprocessing.shared_memory.SharedMemory``, unlinked as soon as every worker has mapped it (and
by multiprocessing's resource tracker should the parent be killed before that); wake-ups are a
socket pair; the parent waits with ``multiprocessing.connection.wait``. Both sets behave the same to
the engine, and the parity tests run on both.
"""

from __future__ import annotations

import os
import select
from dataclasses import dataclass

__all__ = ["Transport", "choose_transport", "native_available"]

ENV_VAR = "VECSHM_TRANSPORT"


def native_available() -> bool:
    """Whether this platform has memfd, eventfd, fd passing and poll (Linux does)."""
    return all(hasattr(os, name) for name in ("memfd_create", "eventfd")) and hasattr(select, "poll")


@dataclass(frozen=True)
class Transport:
    """The mechanisms one vec env uses; picklable, so workers learn it from their spec."""

    native: bool

    @property
    def name(self) -> str:
        return "native" if self.native else "portable"


def choose_transport() -> Transport:
    """Native where available, unless ``VECSHM_TRANSPORT`` says ``portable`` (``native`` insists on it)."""
    wanted = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if wanted not in ("auto", "native", "portable"):
        raise ValueError(f"{ENV_VAR} must be 'auto', 'native' or 'portable', got {wanted!r}")
    if wanted == "native" and not native_available():
        raise RuntimeError(f"{ENV_VAR}=native, but this platform lacks memfd/eventfd/poll; use 'auto' or 'portable'")
    return Transport(native=native_available() and wanted != "portable")
