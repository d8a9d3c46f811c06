"""Doorbells ring only sides that sleep (``vecshm.shared.sync``): a side still spinning finds its
command or results in the control words, and every side that does sleep is still woken.

A lost wake-up would show as a hang (the test's timeout), so the runs below make both sides sleep
on every wait (``spin=0``), or on some waits and not others (a spin far shorter than a step), and
compare every result with the peers'.
"""

from __future__ import annotations

import os
import signal
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from conftest import make_space_env
from gymnasium.vector import SyncVectorEnv
from lockstep import lockstep
from stable_baselines3.common.vec_env import DummyVecEnv as SB3DummyVecEnv

from vecshm import ShmVecEnv, ShmVectorEnv
from vecshm.shared.sync import SLEEPERS_ONLY, wake_sleepers

SPINS = [0.0, 5e-6]  # every wait sleeps; most waits spin a little, then sleep


@pytest.mark.parametrize("spin", SPINS)
@pytest.mark.parametrize("envs_per_worker", [1, 4])  # four processes to ring; one
def test_sleeping_workers_and_parent_are_woken_sb3(spin, envs_per_worker, no_leaks):
    fns = [make_space_env("box_f32", tag=i) for i in range(4)]
    with ShmVecEnv(fns, envs_per_worker=envs_per_worker, spin=spin) as venv, closing(SB3DummyVecEnv(fns)) as peer:
        assert lockstep(venv, peer, 150, seed=1) >= 10


@pytest.mark.parametrize("spin", SPINS)
def test_sleeping_workers_and_parent_are_woken_gymnasium(spin, no_leaks):
    fns = [make_space_env("frame_u8", tag=i) for i in range(3)]
    with ShmVectorEnv(fns, spin=spin) as venv, closing(SyncVectorEnv(fns)) as peer:
        assert lockstep(venv, peer, 150, seed=2) >= 10


@pytest.mark.parametrize("spin", SPINS)
def test_async_batches_wake_their_sleeping_workers(spin, no_leaks):
    fns = [make_space_env("box_f32", tag=i) for i in range(4)]
    with ShmVecEnv(fns, envs_per_worker=1, spin=spin, batch_size=2) as venv:
        venv.async_reset()
        seen = 0
        for _ in range(100):
            *_, env_ids = venv.recv()
            venv.send(np.zeros(len(env_ids), dtype=np.int64), env_ids)
            seen += len(env_ids)
    assert seen == 200


class CountingBell:
    def __init__(self) -> None:
        self.rings = 0

    def wake(self) -> None:
        self.rings += 1


@pytest.mark.parametrize("asleep", [0, 1])
def test_a_bell_rings_only_for_a_sleeper_where_a_fence_orders_the_words(asleep):
    bell = CountingBell()
    wake_sleepers([0], [bell], [0], np.array([asleep], dtype=np.int64))
    assert bell.rings == (asleep if SLEEPERS_ONLY else 1)


def test_each_owner_is_rung_by_its_own_asleep_word():
    bells = [CountingBell() for _ in range(3)]
    wake_sleepers([0, 2], bells, [1, 0, 3], np.array([1, 0, 0, 1], dtype=np.int64))  # owner 1 not asked
    assert [bell.rings for bell in bells] == ([0, 0, 1] if SLEEPERS_ONLY else [1, 0, 1])


def eventfd_counts(pid: int) -> dict[int, int]:
    """The eventfds process ``pid`` holds: their kernel-wide ids, and the rings each holds untaken."""
    counts = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:[eventfd]":
                continue
            fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines())
        except (FileNotFoundError, ValueError):
            continue
        counts[int(fields["eventfd-id"])] = int(fields["eventfd-count"])
    return counts


@pytest.mark.skipif(not SLEEPERS_ONLY, reason="off x86, every command rings")
@pytest.mark.skipif(not os.path.exists("/proc/self/fdinfo"), reason="reads the doorbells' counts in /proc")
def test_the_parent_rings_only_the_processes_whose_workers_sleep(no_leaks):
    fns = [make_space_env("box_f32", tag=i) for i in range(4)]
    with ShmVecEnv(fns, envs_per_worker=2, start_method="forkserver") as venv:
        venv.reset()
        pids = [process.pid for process in venv.processes]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)  # (no worker takes its rings or writes its asleep word meanwhile)
        try:
            venv.segment.asleep[:] = [0, 1]  # one word per worker, one worker per process: 0 spins, 1 sleeps
            before = eventfd_counts(os.getpid())
            venv.step_async(np.zeros(4, dtype=np.int64))
            after = eventfd_counts(os.getpid())
            rung = [i for i in after if after[i] != before.get(i)]
            assert len(rung) == 1 and after[rung[0]] == before[rung[0]] + 1
            assert rung[0] in eventfd_counts(pids[1]) and rung[0] not in eventfd_counts(pids[0])
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        venv.step_wait()  # (worker 0, if it slept when stopped, finds its command at its next check)
        venv.step(np.zeros(4, dtype=np.int64))
