"""Both facades under every start method a platform may default to, with the factories users write.

Python 3.14 made ``forkserver`` multiprocessing's default on Linux (macOS and Windows already
spawn). A program that names no start method then runs its workers differently, so what users
write must work, with the same results, under fork, forkserver and spawn: lambdas, closures, and
classes defined in ``__main__`` (a notebook's cells, or the script itself). Each case runs in a
fresh interpreter, given the program with ``python -c`` (as a notebook: ``__main__`` has no file a
worker could import) or as a guarded script file, and compares each facade with its reference,
bit for bit: ``ShmVectorEnv`` with Gymnasium's ``SyncVectorEnv``, ``ShmVecEnv`` with SB3's
``SubprocVecEnv`` under the same start method (where SB3 is not installed, as in the wheel's smoke
tier: vecshm's copy of ``DummyVecEnv``, rewards compared as its float32).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.smoke

# The user's program. ``CountEnv`` is defined in ``__main__``; episodes end at seeded random
# lengths, so autoresets happen at different steps in different envs.
PROGRAM = """
import hashlib
import multiprocessing as mp
import sys

import gymnasium as gym
import numpy as np
from gymnasium.vector import SyncVectorEnv

if sys.argv[1] == "3.14":  # multiprocessing's default as Python 3.14 sets it on Linux
    default = mp.context.DefaultContext(mp.context._concrete_contexts["forkserver"])
    mp.context._default_context = default
    vars(mp).update((name, getattr(default, name)) for name in mp.__all__)

from vecshm import ShmVecEnv, ShmVectorEnv

try:  # ShmVecEnv's peer, under the same start method
    from stable_baselines3.common.vec_env import SubprocVecEnv

    REWARDS_AS = None
except ImportError:  # the wheel's smoke tier has no SB3: vecshm's copy of DummyVecEnv, float32 rewards
    from vecshm import DummyVecEnv

    def SubprocVecEnv(fns, start_method=None):
        return DummyVecEnv(fns)

    REWARDS_AS = np.float32


class CountEnv(gym.Env):
    observation_space = gym.spaces.Box(0, 1000, (3,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, tag=0):
        self.tag = tag

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.length = 0, int(self.np_random.integers(2, 7))
        return self._obs(), {"tag": self.tag}

    def step(self, action):
        self.t += 1
        reward = float(self.np_random.random()) + int(action)
        return self._obs(), reward, self.t >= self.length, False, {"t": self.t}

    def _obs(self):
        return np.array([self.tag, self.t, self.length], dtype=np.float32)


def closure_factory(tag):
    def make():
        return gym.wrappers.TimeLimit(CountEnv(tag), max_episode_steps=4)

    return make


# One vec env holds each kind of factory: a lambda, a closure, and the class itself.
FACTORIES = [lambda: CountEnv(5), closure_factory(1), CountEnv]
ACTIONS = np.random.default_rng(0).integers(0, 2, size=(25, 3))


def encode(value):
    # bytes that differ wherever two values differ: types, dtypes, shapes and every bit of arrays
    if isinstance(value, dict):
        return b"{" + b",".join(encode(k) + b":" + encode(v) for k, v in value.items()) + b"}"
    if isinstance(value, (list, tuple)):
        return type(value).__name__.encode() + b"[" + b",".join(map(encode, value)) + b"]"
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return b"object" + encode(value.tolist())
        return f"{value.dtype}{value.shape}".encode() + value.tobytes()
    return f"{type(value).__name__}:{value!r}".encode()


def digest(rows):
    return hashlib.sha256(encode(rows)).hexdigest()[:16]


def gymnasium_rows(envs):
    obs, infos = envs.reset(seed=7)
    rows = [obs, dict(sorted(infos.items()))]
    for actions in ACTIONS:
        obs, rewards, terminations, truncations, infos = envs.step(actions)
        # (SyncVectorEnv puts final_obs before final_info: keys compared in any order)
        rows += [obs, rewards, terminations, truncations, dict(sorted(infos.items()))]
    envs.close()
    return rows


def sb3_rows(venv):
    venv.seed(7)
    rows = [venv.reset(), list(venv.reset_infos)]  # SubprocVecEnv keeps a tuple, DummyVecEnv a list
    for actions in ACTIONS:
        obs, rewards, dones, infos = venv.step(actions)
        rows += [obs, rewards if REWARDS_AS is None else rewards.astype(REWARDS_AS), dones, list(infos)]
    venv.close()
    return rows


def run(method):
    fns, named = FACTORIES, {} if method == "default" else {"context": method}
    ours = ShmVectorEnv(fns, **named)
    print("ShmVectorEnv", ours.runtime.start_method, digest(gymnasium_rows(ours)))
    print("SyncVectorEnv", "-", digest(gymnasium_rows(SyncVectorEnv(fns))))
    named = {} if method == "default" else {"start_method": method}
    ours = ShmVecEnv(fns, **named)
    print("ShmVecEnv", ours.runtime.start_method, digest(sb3_rows(ours)))
    print("SubprocVecEnv", "-", digest(sb3_rows(SubprocVecEnv(fns, **named))))


if __name__ == "__main__":
    run(sys.argv[2])
"""


def run_program(tmp_path, fed: str, default: str, method: str) -> list[list[str]]:
    """Run PROGRAM and return its printed rows: ``fed="notebook"`` runs it with ``python -c`` (as in a
    notebook or a REPL, ``__main__`` has no file for a worker to import), ``"script"`` as a file."""
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)
    program = ["-c", PROGRAM] if fed == "notebook" else [str(path)]
    result = subprocess.run(
        [sys.executable, *program, default, method],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return [line.split() for line in result.stdout.splitlines()]


def assert_each_facade_matches_its_reference(rows: list[list[str]]) -> dict[str, str]:
    """Each facade's trajectory digest equals its reference's; returns each facade's start method."""
    digests = {name: digest for name, _, digest in rows}
    assert digests["ShmVectorEnv"] == digests["SyncVectorEnv"]
    assert digests["ShmVecEnv"] == digests["SubprocVecEnv"]
    return {name: method for name, method, _ in rows if name.startswith("Shm")}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fed", ["notebook", "script"])
@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_both_facades_match_their_references_under_each_start_method(tmp_path, fed, method):
    rows = run_program(tmp_path, fed, "this-python", method)
    methods = assert_each_facade_matches_its_reference(rows)
    assert methods == {"ShmVectorEnv": method, "ShmVecEnv": method}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fed", ["notebook", "script"])
def test_python_3_14_s_default_start_method_changes_nothing_a_user_sees(tmp_path, fed):
    """With no start method named, the start methods and the results are the same under this
    Python's default (fork, up to 3.13 on Linux) and under 3.14's (forkserver): both facades take
    forkserver wherever a worker can import the main script, or where there is none (a notebook).
    ``ShmVectorEnv(context=None)`` forks only for a script that a worker could not import
    (``test_dropin.py::test_scripts_that_run_under_async_vector_env_run_under_shm_vector_env``),
    and only where fork is multiprocessing's default, as ``AsyncVectorEnv`` does."""
    today = run_program(tmp_path, fed, "this-python", "default")
    under_3_14 = run_program(tmp_path, fed, "3.14", "default")
    assert [(name, digest) for name, _, digest in today] == [(name, digest) for name, _, digest in under_3_14]
    assert assert_each_facade_matches_its_reference(under_3_14) == {
        "ShmVectorEnv": "forkserver",
        "ShmVecEnv": "forkserver",
    }
    assert assert_each_facade_matches_its_reference(today) == {"ShmVectorEnv": "forkserver", "ShmVecEnv": "forkserver"}


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_script_fed_on_standard_input_is_told_why_forkserver_and_spawn_cannot_run_it(tmp_path, method):
    """Under forkserver and spawn every worker imports the main script again, and ``python - < train.py``
    leaves none to import (``<stdin>``): the workers die on multiprocessing's FileNotFoundError, and
    vecshm's error names the cause and the two ways out."""
    program = (
        "import gymnasium as gym\nfrom vecshm import ShmVecEnv\n"
        f"ShmVecEnv([lambda: gym.make('CartPole-v1')], start_method={method!r})\n"
    )
    result = subprocess.run(
        [sys.executable, "-"], input=program, cwd=tmp_path, capture_output=True, text=True, timeout=100, check=False
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "fed on standard input" in last and "Run it from a file" in last and 'start_method="fork"' in last
