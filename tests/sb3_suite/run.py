"""Run Stable-Baselines3's own vec-env tests with SB3's classes replaced by vecshm's.

The tests (``tests/test_vec_*.py``) come from the sdist of the SB3 version installed here, so
they always match the SB3 that vecshm claims to replace. A ``conftest.py`` placed beside them
points ``stable_baselines3.common.vec_env``'s names at vecshm's classes before the test modules
import them: ``SubprocVecEnv`` is ``ShmVecEnv``, and ``DummyVecEnv`` and every wrapper are
vecshm's. SB3's own internals (PPO wrapping a single env, ...) keep SB3's classes.

``--suite sb3-contrib`` runs, the same way, the tests of the installed sb3-contrib that build
SB3 vec envs themselves (``SUITES`` names them): MaskablePPO on ``SubprocVecEnv`` and
``DummyVecEnv``, and the algorithms on dict observations under ``VecFrameStack`` and
``VecNormalize``.

    python tests/sb3_suite/run.py [pytest arguments]
    python tests/sb3_suite/run.py --suite sb3-contrib [pytest arguments]
    VECSHM_SB3_SUBPROC=ray python tests/sb3_suite/run.py -k test_vec_envs   # SubprocVecEnv is RayVecEnv

Exits with pytest's status. The sdists are cached in ``.sb3-sdist/`` (pip needs the package index
once; nothing else is downloaded).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".sb3-sdist"

CONFTEST = '''
"""Written by vecshm's tests/sb3_suite/run.py: SB3's vec-env names, bound to vecshm's classes."""
import os

import stable_baselines3  # noqa: F401  (SB3's internals bind SB3's own classes first)
import stable_baselines3.common.vec_env as sb3_vec_env
import stable_baselines3.common.vec_env.stacked_observations as sb3_stacked

import vecshm

REPLACED = {
    "SubprocVecEnv": vecshm.ShmVecEnv,
    "DummyVecEnv": vecshm.DummyVecEnv,
    "VecFrameStack": vecshm.VecFrameStack,
    "VecNormalize": vecshm.VecNormalize,
    "VecMonitor": vecshm.VecMonitor,
    "VecVideoRecorder": vecshm.VecVideoRecorder,
    "VecCheckNan": vecshm.VecCheckNan,
    "VecTransposeImage": vecshm.VecTransposeImage,
    "VecExtractDictObs": vecshm.VecExtractDictObs,
    "VecEnvWrapper": vecshm.VecEnvWrapper,
}
if os.environ.get("VECSHM_SB3_SUBPROC") == "ray":  # SubprocVecEnv is RayVecEnv, on a local Ray instance
    import ray
    from vecshm.ray import RayVecEnv

    class RaySubprocVecEnv(RayVecEnv):
        """SubprocVecEnv's signature on RayVecEnv: two actors (one for a single env)."""

        def __init__(self, env_fns, start_method=None):
            super().__init__(env_fns, min(2, len(env_fns)), start_method=start_method)

    # logical CPUs: SB3's tests leave vec envs unclosed, whose actors would hold 2 real ones until collected
    ray.init(address="local", num_cpus=64, include_dashboard=False, log_to_driver=False)
    REPLACED["SubprocVecEnv"] = RaySubprocVecEnv

for name, cls in REPLACED.items():
    setattr(sb3_vec_env, name, cls)
sb3_stacked.StackedObservations = vecshm.StackedObservations
'''


# package -> the test files of its sdist that run here: SB3's vec-env tests; sb3-contrib's tests
# that build vec envs from SB3's names (its others never touch a vec env class). sb3-contrib's
# test_cnn.py asks is_vecenv_wrapped(model.get_env(), VecTransposeImage) with vecshm's class of
# the wrapper the algorithm added with SB3's.
SUITES: dict[str, Callable[[str], bool]] = {
    "stable-baselines3": lambda name: name.startswith("test_vec_"),
    "sb3-contrib": lambda name: name in {"test_invalid_actions.py", "test_dict_env.py", "test_cnn.py"},
}


def sdist_tests(package: str, package_version: str) -> list[tuple[str, bytes]]:
    """The test files ``SUITES`` picks from the sdist of ``package``, downloading it once."""
    archive = CACHE / f"{package.replace('-', '_')}-{package_version}.tar.gz"
    if not archive.exists():
        CACHE.mkdir(exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", f"{package}=={package_version}", "--no-binary", ":all:",
             "--no-deps", "--quiet", "--dest", str(CACHE)],
            check=True,
        )  # fmt: skip
    with tarfile.open(archive) as tar:
        members = [
            m for m in tar.getmembers() if Path(m.name).parent.name == "tests" and SUITES[package](Path(m.name).name)
        ]
        return [(Path(m.name).name, tar.extractfile(m).read()) for m in members]  # type: ignore[union-attr]


def main(argv: list[str]) -> int:
    package = "stable-baselines3"
    if argv[:1] == ["--suite"]:
        package, argv = argv[1], argv[2:]
    if package not in SUITES:
        print(f"unknown suite {package!r}; one of {', '.join(SUITES)}", file=sys.stderr)
        return 2
    package_version = version(package)
    files = sdist_tests(package, package_version)
    if not files:
        print(f"none of the expected test files in the sdist of {package} {package_version}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="sb3-suite-") as directory:
        suite = Path(directory)
        (suite / "conftest.py").write_text(CONFTEST)
        for name, source in files:
            (suite / name).write_bytes(source)
        print(f"{package} {package_version}'s own tests on vecshm's classes: {', '.join(sorted(n for n, _ in files))}")
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(suite), str(suite)]
        env = {**os.environ, "SDL_VIDEODRIVER": os.environ.get("SDL_VIDEODRIVER", "dummy")}  # pygame, headless
        return subprocess.run([*command, *argv], cwd=suite, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
