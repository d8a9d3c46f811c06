"""Test envs and helpers: deterministic envs over every supported space, and deep comparisons."""

from __future__ import annotations

import contextlib
import copy
import gc
import multiprocessing
import os
import pathlib
import signal
import subprocess
import threading
import time
from collections import defaultdict
from typing import Any

import gymnasium as gym
import numpy as np
import psutil
import pytest
from gymnasium import spaces
from gymnasium.vector import SyncVectorEnv
from gymnasium.vector.utils import iterate

from vecshm.parent.processes.start_methods import preload_in_forkserver

# SB3's SubprocVecEnv, the reference in several parity tests, imports SB3 and torch in each of its
# workers (3.7 s for 4 envs here). The forkserver imports them once instead, as vecshm has it do for
# its own worker module (vecshm.parent.processes.start_methods.preload_in_forkserver, added when the server starts),
# and the tests' helper modules, whose envs and factories every test's workers load. Only start-up
# time changes.
multiprocessing.set_forkserver_preload(
    ["__main__", "stable_baselines3.common.vec_env.subproc_vec_env", "conftest", "faulty_envs", "dropin_envs"]
)

# The Ctrl-C tests interrupt this process, or scripts it starts, and expect what a terminal gives
# a foreground job: Python's KeyboardInterrupt handler. Python installs it only where SIGINT is not
# ignored at start-up, and a shell ignores SIGINT in what it starts in the background (`make test
# &`, `nohup`), as do the scripts started from there: those tests then waited for an interrupt
# that never came (their 120 s limit). A handler, unlike an ignored signal, is reset by exec, so
# the scripts start as from a terminal too.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Worker processes on a loaded 2-core CI machine can be slow to start; no test relies on timing,
# these only bound how long a broken build may hang.
HANG_GUARD_SECONDS = 60


def rounds_until_every_env_stepped(histories: dict[int, list], n_envs: int, rounds: int, steps: int = 5):
    """Round numbers for an async ``recv``/``send`` loop: at least ``rounds`` of them, then on until
    every env has ``steps`` results in ``histories``. Which env finishes first is the scheduler's
    call, and on a loaded 2-core machine a worker can sit descheduled through a fixed number of
    rounds; an env that is never returned fails after HANG_GUARD_SECONDS, naming the counts."""
    deadline = time.monotonic() + HANG_GUARD_SECONDS
    done = 0
    while done < rounds or any(len(histories[i]) < steps for i in range(n_envs)):
        assert time.monotonic() < deadline, (
            f"an env was not returned in {HANG_GUARD_SECONDS} s: {[len(histories[i]) for i in range(n_envs)]} results"
        )
        yield done
        done += 1


SPACES: dict[str, spaces.Space] = {
    "box_f32": spaces.Box(-1.0, 1.0, (3,), np.float32),
    "box_scalar": spaces.Box(-1.0, 1.0, (), np.float32),  # 0-d arrays: a row of one number
    "box_f64_2d": spaces.Box(-5.0, 5.0, (2, 3), np.float64),
    "box_i16": spaces.Box(-100, 100, (4,), np.int16),
    "frame_u8": spaces.Box(0, 255, (210, 160, 3), np.uint8),
    "discrete": spaces.Discrete(5, start=-2),
    "multidiscrete": spaces.MultiDiscrete([3, 4, 2]),
    "multibinary": spaces.MultiBinary([2, 3]),
    "dict": spaces.Dict({"pos": spaces.Box(-1, 1, (2,), np.float32), "k": spaces.Discrete(3)}),
    "tuple": spaces.Tuple((spaces.Discrete(4), spaces.Box(0, 1, (2,), np.float32))),
    "dict_img": spaces.Dict(
        {"img": spaces.Box(0, 255, (8, 8, 3), np.uint8), "vec": spaces.Box(-1, 1, (3,), np.float32)}
    ),
    "nested": spaces.Dict(
        {
            "a": spaces.Tuple((spaces.MultiBinary(3), spaces.Dict({"x": spaces.Box(-2, 2, (1,), np.float32)}))),
            "b": spaces.Box(0, 255, (8, 8, 1), np.uint8),
        }
    ),
}


class CoinSpace(spaces.Space):
    """A user's own space, as Gymnasium allows: "heads" or "tails", with no shape or dtype."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(None, None, seed)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return "heads" if self.np_random.random() < 0.5 else "tails"

    def contains(self, x: Any) -> bool:
        return x in ("heads", "tails")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CoinSpace)


# Spaces without a fixed size: AsyncVectorEnv(shared_memory=False) takes them, and so must vecshm.
DYNAMIC_SPACES: dict[str, spaces.Space] = {
    "text": spaces.Text(min_length=1, max_length=6),
    "sequence": spaces.Sequence(spaces.Box(-1, 1, (2,), np.float32)),
    "sequence_stacked": spaces.Sequence(spaces.Discrete(4), stack=True),
    "graph": spaces.Graph(node_space=spaces.Box(-1, 1, (3,), np.float32), edge_space=spaces.Discrete(2)),
    "oneof": spaces.OneOf((spaces.Discrete(3), spaces.Box(-1, 1, (2,), np.float32))),
    "custom": CoinSpace(),
    "mixed": spaces.Dict(
        {
            "text": spaces.Text(4),
            "img": spaces.Box(0, 255, (8, 8, 3), np.uint8),
            "pair": spaces.Tuple((spaces.Sequence(spaces.Discrete(3)), spaces.Discrete(2))),
        }
    ),
}
SPACES.update({f"dyn_{key}": space for key, space in DYNAMIC_SPACES.items()})


def shared_memory_for(key: str) -> bool:
    """The ``shared_memory`` flag ``AsyncVectorEnv`` needs for ``SPACES[key]``, and so ``ShmVectorEnv``:
    False for the spaces it refuses to share (no fixed shape, custom)."""
    return not key.startswith("dyn_")


ACTION_SPACES: dict[str, spaces.Space] = {
    "discrete": spaces.Discrete(3),
    "box": spaces.Box(-1.0, 1.0, (2,), np.float32),
    "multidiscrete": spaces.MultiDiscrete([2, 5]),
    "dict": spaces.Dict({"move": spaces.Discrete(4), "force": spaces.Box(-1, 1, (1,), np.float32)}),
}


def action_signature(space: spaces.Space, action: Any) -> float:
    """A number that changes with every action component, so a wrong transfer changes rewards."""
    leaves = gym.spaces.flatten(space, action)
    return float(np.sum(np.asarray(leaves, dtype=np.float64) * np.arange(1, len(leaves) + 1)))


class SpaceEnv(gym.Env):
    """Deterministic env over any space: seeded observations, rewards that depend on the action,
    random terminations, time-limit truncations, empty and non-empty infos, and occasionally an
    info too large for the shared arena row."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space | None = None,
        big_info_every: int = 7,
        render_mode: str | None = "rgb_array",
        tag: int = 0,
        jitter_us: float = 0.0,
        space_seed: int | None = None,
        filled: bool = False,
    ) -> None:
        # each env owns its spaces: a space shared in-process would share its sampling RNG
        self.observation_space = copy.deepcopy(observation_space)
        if space_seed is not None:  # observations reproducible without a seeded reset too
            self.observation_space.seed(space_seed)
        self.action_space = copy.deepcopy(action_space or spaces.Discrete(3))
        self.big_info_every = big_info_every
        self.render_mode = render_mode
        self.tag = tag
        self.jitter_us = jitter_us
        self.jitter_rng = np.random.default_rng(tag)  # varies the step time, never the results
        self.t = 0
        self.rng = np.random.default_rng(0)
        self.last_options: Any = None
        self.filled = filled  # a Box observation filled with the step count: cheap for large frames

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self.rng = np.random.default_rng(seed)
            self.observation_space.seed(seed)
        self.t = 0
        self.last_options = options
        info = {"reset_seed": seed, "options": options} if seed is not None or options else {}
        return self._observation(), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        assert self.action_space.contains(action), f"invalid action {action!r}"
        if self.jitter_us:
            end = time.perf_counter() + self.jitter_rng.uniform(0, self.jitter_us) * 1e-6
            while time.perf_counter() < end:
                pass
        self.t += 1
        reward = float(self.rng.standard_normal()) + 1e-3 * action_signature(self.action_space, action)
        terminated = bool(self.rng.random() < 0.08)
        info: dict[str, Any] = {}
        if self.t % 3 == 0:
            info = {"t": self.t, "vec": np.full(2, self.t, dtype=np.float32)}
        elif self.t % 3 == 1:  # flat numbers: these travel as typed columns (vecshm.shared.info_columns)
            info = {"t": self.t, "score": reward, "lives": np.int8(3 - self.t % 4)}
        if self.big_info_every and self.t % self.big_info_every == 0:
            info["big"] = np.arange(1500, dtype=np.int64) + self.t  # 12 kB: above the arena row
        return self._observation(), reward, terminated, False, info

    def _observation(self) -> Any:
        if self.filled:
            return np.full(self.observation_space.shape, self.t % 256, self.observation_space.dtype)
        return self.observation_space.sample()

    def render(self) -> np.ndarray:
        return np.full((4, 6, 3), (self.t + self.tag) % 256, dtype=np.uint8)


def make_space_env(obs_key: str, act_key: str = "discrete", max_steps: int = 12, **kwargs: Any):
    """A picklable factory (closures over plain values), wrapped in a TimeLimit."""

    def factory() -> gym.Env:
        env = SpaceEnv(SPACES[obs_key], ACTION_SPACES[act_key], **kwargs)
        return gym.wrappers.TimeLimit(env, max_episode_steps=max_steps)

    return factory


def as_dummy_rewards(rewards: Any) -> Any:
    """ShmVecEnv's rewards as SB3's ``DummyVecEnv`` gives them: cast to float32. ShmVecEnv keeps
    ``SubprocVecEnv``'s dtype, ``np.stack``'s of the envs' values (float64 for Python floats:
    ``test_parity.py`` checks it against ``SubprocVecEnv``), which holds the same value exactly."""
    return np.float32(rewards) if np.isscalar(rewards) else np.asarray(rewards).astype(np.float32)


def assert_tree_equal(a: Any, b: Any, where: str = "") -> None:
    """Exact equality of nested dict/tuple/list/array values (dtype and bits included)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for key in a:
            assert_tree_equal(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, (tuple, list)):
        assert isinstance(b, (tuple, list)) and len(a) == len(b), f"{where}: {a!r} != {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_tree_equal(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a_arr, b_arr = np.asarray(a), np.asarray(b)
        assert a_arr.shape == b_arr.shape, f"{where}: shape {a_arr.shape} != {b_arr.shape}"
        assert a_arr.dtype == b_arr.dtype, f"{where}: dtype {a_arr.dtype} != {b_arr.dtype}"
        if a_arr.dtype == object:
            for i, (x, y) in enumerate(zip(a_arr.ravel(), b_arr.ravel())):
                assert_tree_equal(x, y, f"{where}[{i}]")
            return
        assert a_arr.tobytes() == b_arr.tobytes(), f"{where}: values differ"
    else:
        # the same value of the same type: an env's Python int must not come back as np.int64
        assert type(a) is type(b), f"{where}: {type(a).__name__} {a!r} != {type(b).__name__} {b!r}"
        assert a == b or (a != a and b != b), f"{where}: {a!r} != {b!r}"


def assert_histories_match_a_sync_run(fns: list[Any], histories: dict[int, list], action: Any, where: str = "") -> None:
    """Each env's ``(obs, reward, terminated, truncated)`` history, as an async run recorded it,
    equal to the same envs stepped synchronously by Gymnasium's ``SyncVectorEnv`` (reset with
    seed 0, env ``i`` given ``action(i, k)`` on its ``k``-th step)."""
    reference = SyncVectorEnv(fns)
    obs, _ = reference.reset(seed=0)
    expected = defaultdict(list)
    for i, row in enumerate(iterate(reference.observation_space, obs)):
        expected[i].append((row, np.float64(0.0), np.False_, np.False_))
    for k in range(max(len(h) for h in histories.values())):
        obs, rewards, terminations, truncations, _ = reference.step(np.array([action(i, k) for i in range(len(fns))]))
        for i, row in enumerate(iterate(reference.observation_space, obs)):
            expected[i].append((row, rewards[i], terminations[i], truncations[i]))
    reference.close()
    for i, history in histories.items():
        for t, (got, want) in enumerate(zip(history, expected[i])):
            assert_tree_equal(got[0], want[0], f"env {i} step {t} obs{where}")
            assert got[1:] == pytest.approx(want[1:], abs=0), f"env {i} step {t}{where}"


class AddInfoBatch:
    """A stand-in vector env of ``num_envs`` envs, to call Gymnasium's own ``VectorEnv._add_info``."""

    _add_info = gym.vector.VectorEnv._add_info

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


class LoadWitness:
    """Marks, by a file named after its pid, each process that unpickles it into ``folder``: to
    tell which processes loaded a value that others only passed on."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return _witness_loaded, (self.folder,)

    @staticmethod
    def loaded_by(folder: Any) -> set[int]:
        """The pids that loaded a witness into ``folder`` since it was last asked (and forgets them)."""
        pids = set()
        for mark in pathlib.Path(folder).iterdir():
            pids.add(int(mark.name))
            mark.unlink()
        return pids


def _witness_loaded(folder: str) -> LoadWitness:
    pathlib.Path(folder, str(os.getpid())).touch()
    return LoadWitness(folder)


def step_with_a_ctrl_c_before_its_wait(envs: Any, actions: Any) -> None:
    """``envs.step(actions)``, with a Ctrl-C that lands as ``step`` calls ``step_wait``: the actions
    are sent, and the step is left in flight."""

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    envs.step_wait = interrupted
    try:
        with pytest.raises(KeyboardInterrupt):
            envs.step(actions)
    finally:
        del envs.step_wait


def closes_within(envs: Any, seconds: float) -> bool:
    """Whether ``envs.close()`` returns within ``seconds`` (if not, it goes on in a daemon thread)."""
    closer = threading.Thread(target=envs.close, daemon=True)
    closer.start()
    closer.join(seconds)
    return not closer.is_alive()


def env_by_env(infos: list[dict]) -> dict:
    """Gymnasium's own batching: ``_add_info`` for each env in turn, as AsyncVectorEnv does."""
    batch, vector_infos = AddInfoBatch(len(infos)), {}
    for k, info in enumerate(infos):
        vector_infos = batch._add_info(vector_infos, info, k)
    return vector_infos


def sample_actions(space: spaces.Space, n: int, rng: np.random.Generator) -> Any:
    """A batch of ``n`` valid actions with a leading env axis, in the space's dtypes."""
    space.seed(int(rng.integers(1 << 31)))
    samples = [space.sample() for _ in range(n)]
    return gym.vector.utils.concatenate(space, samples, gym.vector.utils.create_empty_array(space, n, fn=np.zeros))


@pytest.fixture
def no_leaks():
    """Fails the test if it leaves child processes, /dev/shm entries or file descriptors behind."""
    with nothing_left_behind():
        yield


@contextlib.contextmanager
def nothing_left_behind():
    """Fails if what runs inside leaves child processes, /dev/shm entries or file descriptors behind:
    ``no_leaks`` for one test, and for a vec env that a class's tests share, around its life.

    Any descriptor of a vecshm segment counts; others may grow by two (the forkserver's, once)."""
    me = psutil.Process()
    freeze_what_lives()
    shm_before = shm_entries()
    fds_before = me.num_fds()
    segments_before = segment_descriptors()
    yield
    children = [c for c in me.children(recursive=True) if process_alive(c.pid) and not _is_mp_helper(c)]
    assert not children, f"child processes left behind: {children}"
    shm_left = shm_entries_left(shm_before)
    assert not shm_left, f"/dev/shm entries left behind: {shm_left}"
    gc.collect()  # arrays of the test's own that still view a segment hold its descriptor
    left = segment_descriptors() - segments_before
    assert not left, f"descriptors of vecshm segments left open: {sorted(left)}"
    assert me.num_fds() <= fds_before + 2, f"file descriptors grew from {fds_before} to {me.num_fds()}"


def shm_entries() -> set[str]:
    """The names in ``/dev/shm``."""
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def shm_entries_left(before: set[str]) -> set[str]:
    """The ``/dev/shm`` entries made since ``before`` that are still there, less those that a live
    process outside this one's tree has mapped.

    ``make test`` runs two pytest processes at once, and the other one's segments and semaphores
    (``sem.mp-*``, multiprocessing's) are not this test's to leave. A new entry that only this
    process's tree maps, or no process at all, counts. Mappings are matched by inode: glibc maps a
    semaphore under a temporary name before it links it under its own. The listing is taken again
    after the mappings are read: an entry the other one removed meanwhile was not left either."""
    new = {name: _inode(name) for name in shm_entries() - before}
    if not new:
        return set()
    ours = {os.getpid(), *(c.pid for c in psutil.Process().children(recursive=True))}
    elsewhere: set[int] = set()
    for pid in set(psutil.pids()) - ours:
        try:
            with open(f"/proc/{pid}/maps") as maps:
                elsewhere.update(int(line.split()[4]) for line in maps if " /dev/shm/" in line)
        except (OSError, ValueError, IndexError):  # gone meanwhile, or not ours to read
            pass
    return {name for name, inode in new.items() if inode not in elsewhere} & shm_entries()


def _inode(name: str) -> int | None:
    try:
        return os.stat(os.path.join("/dev/shm", name)).st_ino
    except OSError:  # removed meanwhile
        return None


def segment_descriptors() -> set[tuple[int, int]]:
    """This process's open descriptors of vecshm segments (memfd or portable), as (fd, inode)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            if "memfd:vecshm" in target or "/psm_" in target:
                found.add((int(fd), os.stat(f"/proc/self/fd/{fd}").st_ino))
        except OSError:  # closed meanwhile (the listing's own descriptor among them)
            pass
    return found


def _is_mp_helper(process: Any) -> bool:
    """multiprocessing's long-lived helpers (forkserver, resource tracker) belong to the session."""
    try:
        command = " ".join(process.cmdline())
    except Exception:
        return False
    return "forkserver" in command or "resource_tracker" in command


def freeze_what_lives() -> None:
    """Collect, then exempt every object alive now from later collections (``gc.freeze``).

    The leak checks' ``gc.collect()`` then walks only what the test itself made: with torch, SB3
    and Ray imported it walked everything, 0.45 s per test, 117 s of the suite on a 2-core VM.
    Only live objects are frozen (cyclic garbage went first), and reference counting still frees
    them; a frozen object that later ends up in a cycle stays until the session ends."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def multiprocessing_helpers():
    """Start multiprocessing's helper processes once, so per-test resource checks do not count them."""
    import multiprocessing as mp
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()
    if "forkserver" in mp.get_all_start_methods():
        preload_in_forkserver()  # the session starts the server before any vec env could ask
        forkserver.ensure_running()
    freeze_what_lives()  # what collection imported (torch and SB3 among it)
    yield


def wait_gone(pids: list[int], seconds: float) -> list[int]:
    """Wait until none of ``pids`` runs (zombies count as gone); the ones still running after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [p for p in pids if process_alive(p)]
        if not alive:
            return []
        time.sleep(0.05)  # polling an external process table: no event to wait on
    return [p for p in pids if process_alive(p)]


def output_after_ctrl_c(script: subprocess.Popen, seconds: float = 120) -> tuple[str, str]:
    """Send a script started with ``subprocess.PIPE`` output a Ctrl-C; its stdout and stderr once
    it exits. One still running after ``seconds`` fails the test, killed first with every process
    under it: left running, its workers failed the leak check of every test after it."""
    script.send_signal(signal.SIGINT)
    try:
        return script.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        try:
            tree = [psutil.Process(script.pid), *psutil.Process(script.pid).children(recursive=True)]
        except psutil.Error:
            tree = []
        for process in tree:
            try:
                process.kill()
            except psutil.Error:
                pass
        out, err = script.communicate()
        pytest.fail(f"the script was still running {seconds} s after its Ctrl-C; its output: {out!r} {err!r}")


def process_alive(pid: int) -> bool:
    """Running and not a zombie; False too if it vanishes while we look."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture(scope="module")
def ray_cluster():
    """Two Ray nodes on this machine (``ray.cluster_utils.Cluster``), the driver connected, for one test module.

    Each node declares a custom resource (``node_a``, ``node_b``) so tests can place actors on either.
    At the end the cluster's processes are waited for, so later tests' leak checks do not see them.
    """
    ray = pytest.importorskip("ray", reason="the Ray tests need vecshm[ray]")
    from ray.cluster_utils import Cluster

    tests_dir = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [tests_dir, os.environ.get("PYTHONPATH")]))
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 4, "resources": {"node_a": 100}, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=4, resources={"node_b": 100})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    freeze_what_lives()  # Ray's modules, imported above
    yield cluster
    ray.shutdown()
    cluster.shutdown()
    ray_processes = [c for c in psutil.Process().children(recursive=True) if not _is_mp_helper(c)]
    _, alive = psutil.wait_procs(ray_processes, timeout=HANG_GUARD_SECONDS)
    assert not alive, f"Ray processes outlived the cluster: {alive}"
