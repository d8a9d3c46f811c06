"""``python -m vecshm``: every fact a bug report needs is printed, and each is the one vecshm acts on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import vecshm
from vecshm.about import OPTIONAL_PACKAGES, REQUIRED_PACKAGES
from vecshm.shared.transport import native_available

pytestmark = pytest.mark.smoke

ROOT = Path(__file__).resolve().parent.parent


def run_module(*args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "vecshm", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=True,
    )
    return result.stdout


@pytest.fixture(scope="module")
def report() -> dict:
    return json.loads(run_module("--json"))


def test_version_alone_is_the_installed_distribution_s() -> None:
    assert run_module("--version").strip() == vecshm.__version__ == metadata.version("vecshm")


def test_the_report_names_vecshm_python_and_the_os(report: dict) -> None:
    assert report["vecshm"]["version"] == vecshm.__version__
    assert Path(report["vecshm"]["location"]) == Path(vecshm.__file__).parent
    assert report["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert report["python"]["executable"] == sys.executable
    assert report["os"]["platform"] and report["os"]["machine"]


@pytest.mark.parametrize("wanted", ["native", "portable"])
def test_the_transport_and_segment_are_those_a_vec_env_would_use(wanted: str) -> None:
    if wanted == "native" and not native_available():
        pytest.skip("no native transport on this platform")
    report = json.loads(run_module("--json", "--no-cuda", env={"VECSHM_TRANSPORT": wanted}))
    assert report["transport"]["name"] == wanted
    assert report["transport"]["VECSHM_TRANSPORT"] == wanted
    if wanted == "native":
        assert report["segment"]["kind"].startswith("memfd")
    elif os.path.isdir("/dev/shm"):
        assert report["segment"]["kind"].startswith("/dev/shm")
        assert report["segment"]["dev_shm"]["free_mib"] >= 0


def test_start_methods_are_those_the_facades_pick(report: dict) -> None:
    import multiprocessing as mp

    from vecshm.parent.processes.start_methods import default_start_method

    methods = report["start_method"]
    assert methods["ShmVecEnv"] == default_start_method()
    assert methods["multiprocessing_default"] in mp.get_all_start_methods()
    assert default_start_method() in methods["ShmVectorEnv(context=None)"]


def test_cores_and_affinity_are_this_process_s(report: dict) -> None:
    cores = report["cores"]
    assert cores["logical"] == os.cpu_count()
    if hasattr(os, "sched_getaffinity"):
        allowed = sorted(os.sched_getaffinity(0))
        assert cores["usable"] == len(allowed)
        listed = [c for span in cores["affinity"].split(",") for c in _span(span)]
        assert listed == allowed


def _span(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def test_every_package_a_maintainer_asks_about_is_listed_with_its_version(report: dict) -> None:
    for name in ("stable-baselines3", "torch", "ray", "envpool", "pettingzoo", "supersuit", "tianshou", "torchrl"):
        assert name in OPTIONAL_PACKAGES
    assert {"pufferlib-core", "pufferlib"} <= set(OPTIONAL_PACKAGES)
    assert "gymnasium" in REQUIRED_PACKAGES
    for group, names in (("packages", REQUIRED_PACKAGES), ("optional_packages", OPTIONAL_PACKAGES)):
        for name in names:
            try:
                expected = metadata.version(name)
            except metadata.PackageNotFoundError:
                expected = None
            assert report[group][name] == expected, name


def test_torch_and_cuda_are_reported_as_torch_sees_them(report: dict) -> None:
    torch = pytest.importorskip("torch")
    assert report["torch"]["importable"] is True
    assert report["torch"]["cuda_available"] == torch.cuda.is_available()
    assert report["torch"]["cuda_build"] == (torch.version.cuda or "none (a CPU build)")


def test_the_text_report_has_a_line_for_every_fact(report: dict) -> None:
    text = run_module()
    for section, values in report.items():
        for key in values:
            assert f"{section}.{key}: " in text, f"{section}.{key}"
    assert "optional_packages.pettingzoo: " in text


def test_the_changelog_has_a_section_for_this_version() -> None:
    changelog = ROOT / "CHANGELOG.md"
    if not changelog.exists():
        pytest.skip("run from a source checkout")
    assert f"## [{vecshm.__version__}]" in changelog.read_text()
