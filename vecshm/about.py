"""What a bug report needs: vecshm's version, and the facts of the machine that change what it does.

``python -m vecshm`` prints these (:mod:`vecshm.__main__`); the bench records the package versions
with its results. Nothing here starts a process or allocates a segment: each fact is read from
what decides it (the transport's choice, the start-method rules, the process's affinity), so the
report says what a vec env created here would use.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from importlib import metadata
from typing import Any

__all__ = ["OPTIONAL_PACKAGES", "REQUIRED_PACKAGES", "facts", "format_facts", "installed_versions"]

# Distributions whose presence changes what vecshm can do or be compared with (PyPI names).
OPTIONAL_PACKAGES = (
    "stable-baselines3",
    "sb3-contrib",
    "torch",
    "ray",
    "envpool",
    "ale-py",
    "pettingzoo",
    "supersuit",
    "mpe2",
    "pufferlib-core",
    "pufferlib",
    "tianshou",
    "torchrl",
)
REQUIRED_PACKAGES = ("numpy", "gymnasium", "cloudpickle", "psutil")


def installed_versions(packages: tuple[str, ...]) -> dict[str, str | None]:
    """Each distribution's installed version, ``None`` where it is not installed."""
    versions: dict[str, str | None] = {}
    for package in packages:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def facts(cuda: bool = True) -> dict[str, Any]:
    """The report as a dict of plain values (JSON-ready); ``cuda=False`` skips importing torch."""
    from vecshm import __version__
    from vecshm.parent.processes.start_methods import default_start_method, platform_start_method
    from vecshm.shared.affinity import topology
    from vecshm.shared.transport import ENV_VAR, choose_transport, native_available

    cores = topology()
    transport = choose_transport()
    return {
        "vecshm": {"version": __version__, "location": os.path.dirname(os.path.abspath(__file__))},
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "os": {"platform": platform.platform(), "machine": platform.machine()},
        "transport": {
            "name": transport.name,
            "native_available": native_available(),
            ENV_VAR: os.environ.get(ENV_VAR),
        },
        "segment": _segment(transport.native),
        "start_method": {
            "ShmVecEnv": default_start_method(),
            "ShmVectorEnv(context=None)": _gymnasium_rule(platform_start_method(), default_start_method()),
            "multiprocessing_default": platform_start_method(),
        },
        "cores": {
            "logical": cores.logical_cores,
            "physical": cores.physical_cores,
            "usable": len(cores.allowed),
            "affinity": _ranges(cores.allowed),
        },
        "packages": installed_versions(REQUIRED_PACKAGES),
        "optional_packages": installed_versions(OPTIONAL_PACKAGES),
        "torch": _torch() if cuda else {"checked": False},
    }


def _segment(native: bool) -> dict[str, Any]:
    """Where a vec env's shared memory lives, with ``/dev/shm``'s room where that is the place."""
    if native:
        return {"kind": "memfd (nameless, not in /dev/shm)"}
    room = None
    if os.path.isdir("/dev/shm"):
        usage = shutil.disk_usage("/dev/shm")
        room = {"total_mib": round(usage.total / 2**20), "free_mib": round(usage.free / 2**20)}
    kind = "/dev/shm (multiprocessing.shared_memory)" if room else "multiprocessing.shared_memory"
    return {"kind": kind, "dev_shm": room}


def _gymnasium_rule(platform_default: str, safe_default: str) -> str:
    """``ShmVectorEnv(context=None)``'s choice, which depends on the script (parent/processes/start_methods.py)."""
    if platform_default == "fork":
        return f"{safe_default} where workers can import the main script, else fork (as AsyncVectorEnv forks)"
    return safe_default


def _ranges(cores: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``"0-2,5"``, as ``taskset`` writes it."""
    spans: list[list[int]] = []
    for core in cores:
        if spans and core == spans[-1][1] + 1:
            spans[-1][1] = core
        else:
            spans.append([core, core])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in spans)


def _torch() -> dict[str, Any]:
    """torch's CUDA build and devices: what ``pin_memory=`` and ``device=`` need."""
    try:
        import torch
    except Exception as error:  # not installed, or broken: say which
        return {"importable": False, "error": f"{type(error).__name__}: {error}"[:200]}
    available = bool(torch.cuda.is_available())
    return {
        "importable": True,
        "cuda_build": torch.version.cuda or "none (a CPU build)",
        "cuda_available": available,
        "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if available else [],
    }


def format_facts(report: dict[str, Any]) -> str:
    """The report as text to paste into an issue: one ``section.key: value`` line a fact."""
    lines = []
    for section, values in report.items():
        for key, value in values.items():
            if isinstance(value, dict):
                value = ", ".join(f"{k}={v}" for k, v in value.items())
            elif isinstance(value, list):
                value = ", ".join(map(str, value)) or "none"
            elif value is None:
                value = "not installed" if section.endswith("packages") else "unset"
            lines.append(f"{section}.{key}: {value}")
    return "\n".join(lines)
