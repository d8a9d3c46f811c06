"""What the batch structure alone costs on many workers, measured on any machine.

The envs here only sleep (``LatencyEnv``: a fixed latency per step, a longer one per reset, like
Pong's 370 us and 8.4 ms on the 16-core machine), so they cost no CPU: 16 workers on a 2-core
machine behave as 16 workers on cores of their own. What is left is structure:

- a synchronous step waits for the slowest worker, whose envs step one after another, and for
  every reset;
- an async batch (``recv`` of the first ``batch_size`` envs to finish) holds each finished
  worker until enough others have finished to fill the batch, so a worker idles for about
  ``(units - 1) / (2 * workers)`` of a command when a batch spans ``units`` workers.

The ideal is every worker busy all the time: ``workers / (latency of one env step, resets
included)``. With one worker per core, no CPU-bound env can beat the percentages printed here::

    python benchmarks/lab/batch_structure.py                 # 64 envs on 16 workers
    python benchmarks/lab/batch_structure.py -n 8 -w 2 -b 4  # the 2-core bench's arrangement

``--cores K`` gives the envs K cores to share: an env holds one of K tokens (a named POSIX
semaphore) while it steps or resets, as a CPU-bound env holds a core. Then more workers than
cores can be tried (``-w 16 32 64``): the ideal becomes K cores always busy, as in EnvPool's
thread pool. The tokens are not preempted as the kernel preempts processes, and switching costs
nothing here, so this says what the arrangement allows, not what a machine delivers::

    python benchmarks/lab/batch_structure.py --cores 16 -w 16 32 64 -b 32
"""

from __future__ import annotations

import argparse
import ctypes
import os
import time
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np

from vecshm import ShmVectorEnv


class CoreTokens:
    """A named POSIX semaphore of K tokens: K cores that envs in any process take turns on."""

    NAME = b"/vecshm-batch-structure"

    def __init__(self, create: int | None = None) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.sem_open.restype = ctypes.c_void_p
        libc.sem_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_uint]
        libc.sem_wait.argtypes = libc.sem_post.argtypes = [ctypes.c_void_p]
        if create is not None:
            libc.sem_unlink(self.NAME)  # a run killed before its cleanup leaves the name behind
        flags, value = (os.O_CREAT | os.O_EXCL, create) if create is not None else (0, 0)
        self._sem = libc.sem_open(self.NAME, flags, 0o600, value)
        if not self._sem:
            raise OSError(ctypes.get_errno(), "sem_open failed")
        self._libc = libc

    def hold(self, seconds: float) -> None:
        """Take a token (wait for a free core), sleep ``seconds`` on it, give it back."""
        self._libc.sem_wait(self._sem)
        try:
            time.sleep(seconds)
        finally:
            self._libc.sem_post(self._sem)

    def unlink(self) -> None:
        self._libc.sem_unlink(self.NAME)


class LatencyEnv(gym.Env):
    """Sleeps ``step_s`` per step and ``reset_s`` per reset (on a core token when ``cores``);
    episodes of ``length`` +- 100 steps."""

    observation_space = gym.spaces.Box(0, 255, (84, 84), np.uint8)
    action_space = gym.spaces.Discrete(6)

    def __init__(self, step_s: float = 370e-6, reset_s: float = 8.4e-3, length: int = 850, cores: bool = False) -> None:
        self.step_s, self.reset_s, self.length = step_s, reset_s, length
        self._obs = np.zeros((84, 84), np.uint8)
        self._t = self._end = 0
        self._wait = CoreTokens().hold if cores else time.sleep

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t, self._end = 0, int(self.np_random.integers(self.length - 100, self.length + 100))
        self._wait(self.reset_s)
        return self._obs, {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._t += 1
        self._wait(self.step_s)
        return self._obs, 0.0, self._t >= self._end, False, {}


def latency_per_step(make: partial, seconds: float) -> float:
    """Seconds per step of one env alone, its resets included (sleeps overshoot, so measure)."""
    env = make()
    env.reset(seed=0)
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        _, _, terminated, truncated, _ = env.step(0)
        steps += 1
        if terminated or truncated:
            env.reset()
    return (time.perf_counter() - started) / steps


def step_rate(make: partial, n_envs: int, workers: int, batch: int | None, seconds: float) -> float:
    """Env-steps/s of a ShmVectorEnv: synchronous steps (``batch`` None) or send/recv batches."""
    envs = ShmVectorEnv([make] * n_envs, batch_size=batch, envs_per_worker=n_envs // workers)
    actions = np.zeros(n_envs, dtype=np.int64)

    def run(duration: float) -> float:
        steps, started = 0, time.perf_counter()
        if batch is None:
            envs.reset(seed=0)
            while time.perf_counter() - started < duration:
                envs.step(actions)
                steps += n_envs
        else:
            envs.async_reset(seed=0)
            while time.perf_counter() - started < duration:
                *_, env_ids = envs.recv()
                envs.send(actions[: len(env_ids)], env_ids)
                steps += len(env_ids)
        return steps / (time.perf_counter() - started)

    try:
        run(1.0)
        return run(seconds)
    finally:
        envs.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", "--envs", type=int, default=64)
    parser.add_argument("-w", "--workers", type=int, nargs="+", default=[16], help="arrangements to compare")
    parser.add_argument("-b", "--batches", type=int, nargs="+", default=[32, 16, 8], help="async batch sizes")
    parser.add_argument("--cores", type=int, default=None, help="envs share this many cores (default: one per worker)")
    parser.add_argument("--step-us", type=float, default=370.0)
    parser.add_argument("--reset-ms", type=float, default=8.4)
    parser.add_argument("-r", "--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    if any(args.envs % w for w in args.workers):
        parser.error("--envs must be a multiple of every --workers")
    if args.cores is None and len(args.workers) > 1:
        parser.error("comparing arrangements needs --cores (without it, more workers are more cores)")
    tokens = CoreTokens(create=args.cores) if args.cores else None
    make = partial(LatencyEnv, step_s=args.step_us * 1e-6, reset_s=args.reset_ms * 1e-3, cores=tokens is not None)
    try:
        cores = args.cores or args.workers[0]
        ideal = cores / latency_per_step(make, 3.0)
        print(f"{args.envs} envs on {cores} cores; ideal (every core busy): {ideal:,.0f} env-steps/s")
        modes = [("sync", None)] + [(f"async batch {b}", b) for b in args.batches]
        for round_ in range(args.rounds):
            for workers in args.workers:  # interleaved: each round measures every arrangement and mode once
                for name, batch in modes:
                    rate = step_rate(make, args.envs, workers, batch, args.seconds)
                    print(
                        f"round {round_ + 1}  {workers:3d} workers x {args.envs // workers}  {name:16s} "
                        f"{rate:9,.0f} env-steps/s  {rate / ideal:4.0%} of ideal",
                        flush=True,
                    )
    finally:
        if tokens is not None:
            tokens.unlink()


if __name__ == "__main__":
    main()
