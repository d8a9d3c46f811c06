"""Envs that misbehave on purpose, for the error-path tests."""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import subprocess
import sys
import threading
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class FaultyEnv(gym.Env):
    """Behaves until step ``fail_at``, then does ``fault`` (raise, hang, die, bad obs, ...)."""

    metadata = {"render_modes": []}

    def __init__(self, fault: str = "none", fail_at: int = 3, fail_in_reset: bool = False) -> None:
        self.observation_space = spaces.Box(-1, 1, (3,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.fault = fault
        self.fail_at = fail_at
        self.fail_in_reset = fail_in_reset
        self.t = 0
        self.render_mode = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        if self.fail_in_reset:
            self._fail()
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t >= self.fail_at:
            return self._fail()
        return np.zeros(3, np.float32), 0.0, False, False, {}

    def getenv(self, name: str):
        return os.environ.get(name)

    def _fail(self):
        if self.fault == "raise":
            raise ValueError(f"boom at t={self.t}")
        if self.fault == "hang":
            time.sleep(3600)
        if self.fault == "gil_hang":  # native code that keeps the GIL: no other thread of the worker runs
            os.write(1, f"holding the GIL in {os.getpid()}\n".encode())  # one write: workers share the pipe
            ctypes.PyDLL(None).sleep(3600)
        if self.fault == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.fault == "abort":
            # (pytest turns faulthandler on, and a forked worker inherits it: its dump of every thread
            # and extension module would read as a failure in a passing run)
            faulthandler.disable()
            os.abort()
        if self.fault == "exit":
            raise SystemExit(3)
        if self.fault == "bad_shape":
            return np.zeros(4, np.float32), 0.0, False, False, {}
        if self.fault == "bad_dtype":
            return np.zeros(3, np.complex64), 0.0, False, False, {}
        if self.fault == "bad_type":
            return "not an array", 0.0, False, False, {}
        if self.fault == "bad_reward":
            return np.zeros(3, np.float32), np.array([1.0, 2.0]), False, False, {}
        if self.fault == "text_reward":
            return np.zeros(3, np.float32), "high", False, False, {}
        return np.zeros(3, np.float32), 0.0, False, False, {}


def faulty(fault: str = "none", **kwargs):
    return lambda: FaultyEnv(fault, **kwargs)


def healthy():
    return FaultyEnv("none")


def raises_in_constructor():
    raise RuntimeError("cannot build this env")


def hangs_in_constructor():
    """A constructor that never ends (a simulator that waits for a licence server, say); it says
    on stdout when it has started, so that a test knows its worker is in there."""
    os.write(1, f"constructing in {os.getpid()}\n".encode())  # one write: workers share the pipe
    time.sleep(3600)


def hangs_then_interrupts(caller: int, folder: str, builders: int):
    """A constructor that never ends, as :func:`hangs_in_constructor`, and presses Ctrl-C in the
    ``caller`` process once ``builders`` such constructors have started: each leaves a file in
    ``folder`` naming its process and that process's parent (a Ray actor, say), and the first to
    see them all sends SIGINT, once."""
    name = os.path.join(folder, f"{os.getpid()}.pids")
    with open(name + ".tmp", "w") as f:
        f.write(f"{os.getppid()} {os.getpid()}")
    os.replace(name + ".tmp", name)  # whole, or not there
    if len([n for n in os.listdir(folder) if n.endswith(".pids")]) == builders:
        try:
            fd = os.open(os.path.join(folder, "interrupted"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:  # another one was first
            pass
        else:
            os.write(fd, repr(time.time()).encode())  # (read only once the caller was interrupted)
            os.close(fd)
            os.kill(caller, signal.SIGINT)
    time.sleep(3600)


def pids_left_in(folder: str) -> list[int]:
    """The processes :func:`hangs_then_interrupts` named in ``folder``, and their parents."""
    names = [os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".pids")]
    return [int(pid) for name in names for pid in open(name).read().split()]


def interrupted_at(folder: str) -> float:
    """When :func:`hangs_then_interrupts` sent its SIGINT (``time.time()``)."""
    return float(open(os.path.join(folder, "interrupted")).read())


class LockedFactory:
    """An env factory that holds a lock: cloudpickle cannot send it to a fresh process, a fork
    inherits it as it is (SubprocVecEnv and AsyncVectorEnv take it under fork)."""

    def __init__(self, env_id: str = "CartPole-v1") -> None:
        self.env_id = env_id
        self.lock = threading.Lock()

    def __call__(self) -> gym.Env:
        return gym.make(self.env_id)


SLEEPER = [sys.executable, "-c", "import time; time.sleep(3600)"]
# starts SLEEPER in a session of its own (holding none of the launcher's output open, which
# would keep subprocess.run waiting), prints its pid and exits: SLEEPER goes to init
DAEMON_LAUNCHER = [
    sys.executable,
    "-c",
    "import subprocess; print(subprocess.Popen("
    f"{SLEEPER!r}, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)",
]


class SpawningEnv(FaultyEnv):
    """An env that starts a process of its own (a simulator, say) and never stops it: its
    ``close()`` is gymnasium's, which does nothing. ``child_pid`` names that process.

    ``detached``: ``"session"`` starts it in a session of its own (``start_new_session=True``, as
    launchers of simulators do so that the terminal's Ctrl-C does not reach them), out of the
    worker's process group; ``"daemon"`` has a launcher start it so and exit, so that it is not
    even the worker's child."""

    def __init__(self, fault: str = "none", fail_at: int = 3, detached: str | None = None) -> None:
        super().__init__(fault, fail_at)
        if detached == "daemon":
            self.child_pid = int(subprocess.run(DAEMON_LAUNCHER, capture_output=True, text=True, check=True).stdout)
        else:
            self.child = subprocess.Popen(SLEEPER, start_new_session=detached == "session")
            self.child_pid = self.child.pid


def spawning(fault: str = "none", **kwargs):
    return lambda: SpawningEnv(fault, **kwargs)


class _KillsWhenWritten:
    """An observation whose conversion to an array kills the process converting it: its worker
    dies after it has claimed a ring unit for the step, before it has written it."""

    def __array__(self, dtype=None, copy=None):
        os.kill(os.getpid(), signal.SIGKILL)


class DiesWritingFrames(gym.Env):
    """210x160x3 frames (ring-sized) filled with the step count; at step ``die_at`` the worker dies
    while writing the observation, once per ``marker`` file (so the rebuilt env behaves)."""

    metadata = {"render_modes": []}

    def __init__(self, marker: str | None = None, die_at: int = 5) -> None:
        self.observation_space = spaces.Box(0, 255, (210, 160, 3), np.uint8)
        self.action_space = spaces.Discrete(2)
        self.marker, self.die_at, self.t = marker, die_at, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros((210, 160, 3), np.uint8), {}

    def step(self, action):
        self.t += 1
        if self.marker is not None and self.t == self.die_at and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            return _KillsWhenWritten(), 0.0, False, False, {}
        return np.full((210, 160, 3), self.t % 256, np.uint8), 1.0, False, False, {}


def dies_writing_frames(marker: str | None = None, die_at: int = 5):
    return lambda: DiesWritingFrames(marker, die_at)
