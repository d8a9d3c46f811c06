"""Each half of a synchronous step, measured alone and against PufferLib's: the parent's path with
its worker stopped, and the worker's command run in this process.

A step's wall time mixes both halves with the hand-offs between two processes, and on this 2-core
VM it moves 15-30% from run to run. Measured apart, each half is plain CPU work, steady to a few
percent:

- **parent**: ``step_async``, then the worker's publish written by hand (the worker process is
  stopped with SIGSTOP), then ``step_wait``: the actions checked and written, the command words,
  the doorbell (not woken since 2026-11-28: a worker in a tight loop spins), the wait that finds
  its results at once, the batch and the facade's results. For
  PufferLib, ``send``, its semaphores set by hand, ``recv`` (its worker stopped too).
- **worker**: ``EnvRunner.run(STEP)`` on 8 envs in this process (actions read, envs stepped,
  rewards, flags and infos written, observations written, publish), against PufferLib's
  ``Serial.step`` on the same envs, and the floor: 8 ``env.step`` calls and 8 observation copies.

Frames (210x160x3), 8 envs, one worker process; the best of 5 repeats of ``steps`` calls each::

    python benchmarks/lab/step_halves.py [steps]

Run it alternately against two checkouts (select the tree with ``PYTHONPATH``, see
``ab_paired.py``) for a before/after of either half.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import signal
import sys
import timeit
from collections.abc import Callable
from typing import Any

import numpy as np

from vecshm import ShmVecEnv, ShmVectorEnv
from vecshm.bench.workloads import WORKLOADS
from vecshm.shared.buffers import Buffers, BufferSpec
from vecshm.shared.memory import Segment
from vecshm.shared.protocol import AutoReset, Command
from vecshm.shared.sync import Doorbell
from vecshm.worker.lane import Lane
from vecshm.worker.runner import EnvRunner

N_ENVS = 8
WORKLOAD = WORKLOADS["frames"]
PUFFER = importlib.util.find_spec("pufferlib") is not None
PUFFER_MAIN = 5  # pufferlib.vector.MAIN: a worker's semaphore once its step is done


def best_us(call: Callable[[], Any], steps: int) -> float:
    call()
    return min(timeit.timeit(call, number=steps) for _ in range(5)) / steps * 1e6


def stopped(pids: list[int], measure: Callable[[], float]) -> float:
    """``measure()`` with the processes ``pids`` stopped (resumed after, to close cleanly)."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        return measure()
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def vecshm_parent(cls: type, steps: int) -> float:
    actions = np.zeros(N_ENVS, dtype=np.int64)
    with cls(WORKLOAD.factories(N_ENVS), envs_per_worker=N_ENVS) as env:
        env.reset()
        words = env.segment

        def step() -> Any:
            env.step_async(actions)
            words.done_seq[...] = words.cmd_seq  # the worker's publish (its status stays OK)
            return env.step_wait()

        def measure() -> float:
            if hasattr(words, "asleep"):  # the worker as in a tight loop: spinning, not asleep (no ring)
                words.asleep[:] = 0
            return best_us(step, steps)

        return stopped([p.pid for p in env.processes], measure)


def puffer_env(buf: Any = None, seed: int = 0) -> Any:
    from vecshm.bench.peers import _puffer_env

    return _puffer_env(WORKLOAD.env_id, dict(WORKLOAD.kwargs), buf, seed)


def puffer_parent(steps: int) -> float:
    import pufferlib.vector

    actions = np.zeros(N_ENVS, dtype=np.int64)
    env = pufferlib.vector.make(
        puffer_env, num_envs=N_ENVS, num_workers=1, batch_size=N_ENVS, backend=pufferlib.vector.Multiprocessing
    )
    try:
        env.reset(seed=0)
        semaphores = env.buf["semaphores"]

        def step() -> Any:
            env.send(actions)
            semaphores[:] = PUFFER_MAIN
            return env.recv()

        return stopped([p.pid for p in env.processes], lambda: best_us(step, steps))
    finally:
        env.close()


class Discard:
    """The worker's socket, for what a command sends beside the segment (values too large for it)."""

    def send(self, message: Any) -> None:
        pass


def vecshm_worker(steps: int) -> tuple[float, float]:
    """``EnvRunner.run(STEP)`` as ShmVecEnv's worker runs it (SAME_STEP, reward codes), and the floor."""
    envs = [make() for make in WORKLOAD.factories(N_ENVS)]
    spaces = (envs[0].observation_space, envs[0].action_space, N_ENVS, 1, 2048)
    try:
        spec = BufferSpec(*spaces, obs_slots=2, final_rows=True)
    except TypeError:  # a checkout from before the final rows (2026-11-28)
        spec = BufferSpec(*spaces, obs_slots=2)
    segment = Segment(spec.plan().size)
    buffers = Buffers(spec, segment)
    lane = Lane(0, 0, Discard(), Doorbell(), None, AutoReset.SAME_STEP, True)  # type: ignore[arg-type]
    runner = EnvRunner(lane, envs, buffers)
    for i, env in enumerate(envs):
        env.reset(seed=i)
    buffers.obs_slot[0] = 1
    sequence = iter(range(1, 1 << 62))
    runner_us = best_us(lambda: runner.run(Command.STEP, next(sequence)), steps)
    target = buffers.obs_slots[1][0]

    def floor() -> None:
        for i, env in enumerate(envs):
            target[i] = env.step(0)[0]

    floor_us = best_us(floor, steps)
    for env in envs:
        env.close()
    buffers.release()
    segment.close()  # (unmapped once the runner's views are gone)
    return runner_us, floor_us


def puffer_worker(steps: int) -> float:
    import pufferlib.vector

    serial = pufferlib.vector.Serial([puffer_env] * N_ENVS, [()] * N_ENVS, [{}] * N_ENVS, N_ENVS)
    serial.reset(seed=0)
    actions = np.zeros(N_ENVS, dtype=np.int64)
    try:
        return best_us(functools.partial(serial.step, actions), steps)
    finally:
        serial.close()


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    print(f"frames, {N_ENVS} envs, one worker process: us per step (best of 5 x {steps})")
    print(f"parent  vecshm ShmVecEnv     {vecshm_parent(ShmVecEnv, steps):6.2f}")
    print(f"parent  vecshm ShmVectorEnv  {vecshm_parent(ShmVectorEnv, steps):6.2f}")
    if PUFFER:
        print(f"parent  PufferLib            {puffer_parent(steps):6.2f}")
    runner_us, floor_us = vecshm_worker(steps)
    print(f"worker  vecshm EnvRunner     {runner_us:6.2f}")
    if PUFFER:
        print(f"worker  PufferLib Serial     {puffer_worker(steps):6.2f}")
    print(f"worker  floor (step + copy)  {floor_us:6.2f}")
    if not PUFFER:
        print("(PufferLib is not installed: its rows are left out)")


if __name__ == "__main__":
    main()
