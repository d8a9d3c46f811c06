"""vecshm.share: one read-only copy of large data for every worker, under every start method, on
both facades, the multi-agent classes and the portable transport; checked against the same envs
built on private copies by SB3's DummyVecEnv and Gymnasium's SyncVectorEnv."""

from __future__ import annotations

import functools
import gc
import multiprocessing as mp
import os
import pickle
import signal
import subprocess
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest import assert_tree_equal, shm_entries, shm_entries_left, wait_gone
from stable_baselines3.common.vec_env import DummyVecEnv

import vecshm
from vecshm import ShmVecEnv, ShmVectorEnv, WorkerError

START_METHODS = ["fork", "forkserver", "spawn"]


class PriceEnv(gym.Env):
    """A trading-style env over a table of prices (rows of 4 floats) and a dict of extra columns:
    each episode starts at a random row; the observation is the row, with the day's volume."""

    def __init__(self, prices: np.ndarray, columns: dict[str, Any] | None = None) -> None:
        self.prices = prices
        self.volume = (columns or {}).get("volume")
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (5,), np.float64)
        self.action_space = gym.spaces.Discrete(3)

    def _obs(self) -> np.ndarray:
        volume = self.volume[self.t] if self.volume is not None else 0.0
        return np.append(self.prices[self.t], volume)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = int(self.np_random.integers(0, len(self.prices) - 40))
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        reward = float(self.prices[self.t, 0] - self.prices[self.t - 1, 0]) * (int(action) - 1)
        return self._obs(), reward, False, self.t % 17 == 0, {}

    def touch_every_row(self) -> float:
        return float(self.prices.sum())

    def write_a_price(self) -> None:
        self.prices[0, 0] = 1.0


class PriceEnvMaker:
    """An env factory that is an object holding the data (an env's constructor argument)."""

    def __init__(self, prices: np.ndarray) -> None:
        self.prices = prices

    def __call__(self) -> PriceEnv:
        return PriceEnv(self.prices)


def table(rows: int = 2000) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(rows, 4))


def factories(prices: Any, columns: Any, form: str, n: int) -> list[Any]:
    if form == "closure":
        return [lambda: PriceEnv(prices, columns) for _ in range(n)]
    if form == "partial":
        return [functools.partial(PriceEnv, prices, columns) for _ in range(n)]
    return [PriceEnvMaker(prices) for _ in range(n)]


def share_segments() -> int:
    """The shared segments (vecshm.share's memfds) this process holds open."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += "vecshm-share" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return count


def maps_a_share(pid: int) -> bool:
    """Whether process ``pid`` maps a segment of vecshm.share (it reads the data there, not a copy)."""
    with open(f"/proc/{pid}/maps") as maps:
        return "vecshm-share" in maps.read()


def run_lockstep(ours: Any, reference: Any, steps: int = 40, sb3: bool = True) -> None:
    rng = np.random.default_rng(1)
    if sb3:
        ours.seed(3)
        reference.seed(3)
        assert_tree_equal(ours.reset(), reference.reset())
    else:
        assert_tree_equal(ours.reset(seed=3)[0], reference.reset(seed=3)[0])
    for t in range(steps):
        actions = rng.integers(0, 3, ours.num_envs)
        (obs, rewards, flags), (r_obs, r_rewards, r_flags) = ours.step(actions)[:3], reference.step(actions)[:3]
        assert_tree_equal(obs, r_obs, f"step {t}")
        # (ShmVecEnv's rewards are SubprocVecEnv's float64; DummyVecEnv stores float32)
        assert_tree_equal(rewards.astype(r_rewards.dtype), r_rewards, f"step {t}")
        assert_tree_equal(flags, r_flags, f"step {t}")


# -- the data reaches every worker, mapped, and its envs step as on private copies ---------------


@pytest.mark.parametrize("start_method", START_METHODS)
@pytest.mark.parametrize("form", ["closure", "partial", "object"])
def test_sb3_envs_on_shared_data_step_as_dummy_vec_env_s_on_private_copies(start_method, form, no_leaks):
    private = table()
    columns = {"volume": np.arange(2000, dtype=np.float32)}
    shared = vecshm.share({"prices": private, "columns": columns})
    ours = ShmVecEnv(factories(shared["prices"], shared["columns"], form, 4), start_method=start_method)
    reference = DummyVecEnv(factories(private.copy(), {"volume": columns["volume"].copy()}, form, 4))
    try:
        run_lockstep(ours, reference)
        for pid in (p.pid for p in ours.processes):  # mapped, not copied: the segment is in each worker
            assert maps_a_share(pid)
    finally:
        ours.close()


@pytest.mark.parametrize("start_method", START_METHODS)
def test_gymnasium_envs_on_shared_data_step_as_sync_vector_env_s(start_method, no_leaks):
    private = table()
    shared = vecshm.share(private)
    ours = ShmVectorEnv([functools.partial(PriceEnv, shared) for _ in range(3)], context=start_method)
    reference = gym.vector.SyncVectorEnv([functools.partial(PriceEnv, private.copy()) for _ in range(3)])
    try:
        run_lockstep(ours, reference, sb3=False)
    finally:
        ours.close()


def test_on_the_portable_transport(monkeypatch, no_leaks):
    monkeypatch.setenv("VECSHM_TRANSPORT", "portable")
    private = table()
    before = shm_entries()
    shared = vecshm.share(private)
    assert shm_entries() - before  # a named block, as the portable transport's segments
    ours = ShmVecEnv([functools.partial(PriceEnv, shared) for _ in range(4)], start_method="forkserver")
    try:
        assert ours.runtime.transport == "portable"
        run_lockstep(ours, DummyVecEnv([functools.partial(PriceEnv, private.copy()) for _ in range(4)]))
    finally:
        ours.close()
    del shared
    gc.collect()
    assert shm_entries_left(before) == set()


def test_multi_agent_copies_read_one_copy_of_the_data(no_leaks):
    """A ParallelEnv holding shared data: each copy cloudpickled (as SuperSuit copies it) holds
    handles, and every copy maps the same segment; rows as SuperSuit's on a private copy."""
    ss = pytest.importorskip("supersuit")
    from ma_envs import PricedAgents

    from vecshm.pettingzoo import AgentVecEnv

    private = table()
    ours = AgentVecEnv(PricedAgents(vecshm.share(private)), 3, 2, start_method="forkserver")
    theirs = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(PricedAgents(private.copy())), 3)
    try:
        ours.seed(5)
        assert_tree_equal(ours.reset(), theirs.reset(seed=5)[0])
        for t in range(20):
            actions = np.full(ours.num_envs, t % 3)
            assert_tree_equal(ours.step(actions)[0], theirs.step(actions)[0], f"step {t}")
        for pid in (p.pid for p in ours.processes):
            assert maps_a_share(pid)
    finally:
        ours.close()
        theirs.close()


# -- what it refuses, and where it cannot be read -------------------------------------------------


def test_writing_into_shared_data_is_numpy_s_read_only_error(no_leaks):
    shared = vecshm.share(table())
    with pytest.raises(ValueError, match="read-only"):
        shared[0, 0] = 1.0
    with ShmVecEnv([functools.partial(PriceEnv, shared) for _ in range(2)], start_method="forkserver") as venv:
        with pytest.raises(WorkerError, match=r"env 0 .*read-only"):
            venv.env_method("write_a_price", indices=[0])


@pytest.mark.parametrize(
    "data, what",
    [
        (np.array([1, "a"], dtype=object), r"data: an array of dtype object"),
        ({"prices": table(), "names": ["a", "b"]}, r"data\['names'\]\[0\] \(str\)"),
        (3.0, r"data \(float\)"),
    ],
)
def test_what_cannot_be_shared_is_a_type_error_saying_what_can(data, what):
    with pytest.raises(TypeError, match=what + r".*it shares a NumPy array"):
        vecshm.share(data)


def test_sharing_the_same_arrays_again_gives_the_same_segment():
    data = {"prices": table(), "volume": np.arange(5.0)}
    first, second = vecshm.share(data), vecshm.share(data)
    assert np.shares_memory(first["prices"], second["prices"]) and share_segments() >= 1
    assert vecshm.share(first) is first  # shared already
    assert not np.shares_memory(vecshm.share(table()), first["prices"])  # other arrays: another segment


def test_what_is_computed_from_shared_data_is_a_plain_array_pickled_by_value():
    shared = vecshm.share(table())
    doubled = shared * 2
    assert type(doubled) is np.ndarray and doubled.flags.writeable
    assert type(pickle.loads(pickle.dumps(doubled))) is np.ndarray
    assert len(pickle.dumps(shared[:10])) < 1000 < len(pickle.dumps(doubled))  # a handle, not its bytes


def _load_in_a_plain_process(blob: bytes, queue: Any) -> None:
    try:
        pickle.loads(blob)
        queue.put("loaded")
    except Exception as error:
        queue.put(f"{type(error).__name__}: {error}")


def test_a_handle_outside_the_parent_and_its_workers_is_a_clear_error():
    shared = vecshm.share(table())
    blob = pickle.dumps(shared[:5])
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_load_in_a_plain_process, args=(blob, queue))
    process.start()
    said = queue.get(timeout=60)
    process.join()
    assert said.startswith("SharedDataError") and "shared by process" in said and "per machine" in said
    other_program = subprocess.run(
        [sys.executable, "-c", "import pickle, sys; pickle.loads(sys.stdin.buffer.read())"],
        input=blob, capture_output=True, timeout=60,
    )  # fmt: skip
    assert other_program.returncode != 0 and b"SharedDataError" in other_program.stderr


def test_a_handle_after_its_segment_was_freed_says_so():
    before = share_segments()
    blob = pickle.dumps(vecshm.share(table())[:5])
    gc.collect()
    assert share_segments() == before
    with pytest.raises(vecshm.SharedDataError, match="was freed"):
        pickle.loads(blob)


# -- lifetime --------------------------------------------------------------------------------------


def test_the_segment_lives_while_the_parent_or_an_open_vec_env_holds_it(no_leaks):
    before = share_segments()
    shared = vecshm.share(table())
    venv = ShmVecEnv([functools.partial(PriceEnv, shared) for _ in range(2)], start_method="forkserver")
    del shared
    gc.collect()
    assert share_segments() == before + 1  # the vec env's factories hold it
    venv.reset()
    venv.close()
    del venv
    gc.collect()
    assert share_segments() == before


def test_a_restarted_worker_maps_the_data_again(no_leaks):
    private = table()
    shared = vecshm.share(private)
    with pytest.warns(RuntimeWarning, match="restarting"):
        with ShmVecEnv(
            [functools.partial(PriceEnv, shared) for _ in range(4)],
            start_method="forkserver",
            on_worker_failure="restart",
        ) as venv:
            venv.reset()
            os.kill(venv.processes[1].pid, signal.SIGKILL)
            venv.processes[1].join()
            venv.step(np.zeros(4, np.int64))  # the restart
            assert maps_a_share(venv.processes[1].pid)
            assert venv.env_method("touch_every_row", indices=[2]) == [float(private.sum())]


KILLED_PARENT_SCRIPT = """
import functools, os, sys, time
import numpy as np
sys.path.insert(0, {tests!r})
import vecshm
from test_share import PriceEnv

if __name__ == "__main__":
    shared = vecshm.share(np.random.default_rng(0).normal(size=(1000, 4)))
    venv = vecshm.ShmVecEnv([functools.partial(PriceEnv, shared) for _ in range(2)], start_method="forkserver")
    venv.reset()
    print(" ".join(str(p.pid) for p in venv.processes), flush=True)
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "vecshm-share" in os.readlink(f"/proc/self/fd/{{fd}}"):
                inodes.add(os.stat(f"/proc/self/fd/{{fd}}").st_ino)
        except OSError:  # (the listing's own descriptor)
            pass
    print(" ".join(map(str, inodes)), flush=True)
    time.sleep(600)  # killed here
"""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("transport", ["native", "portable"])
def test_nothing_outlives_a_killed_parent(transport):
    before = shm_entries()
    script = KILLED_PARENT_SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "VECSHM_TRANSPORT": transport}
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)  # fmt: skip
    line, inodes = parent.stdout.readline(), {int(i) for i in parent.stdout.readline().split()}
    assert line.strip(), parent.stderr.read()
    assert bool(inodes) == (transport == "native")  # (the portable one's block is a name in /dev/shm)
    parent.kill()
    parent.wait()
    assert wait_gone([int(p) for p in line.split()], 20) == []
    assert shm_entries_left(before) == set()
    holders = []  # any process still holding the segment, by its inode
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.stat(f"/proc/{pid}/fd/{fd}").st_ino in inodes:
                    holders.append(pid)
            except OSError:
                pass
    assert holders == []
