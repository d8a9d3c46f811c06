"""Nothing outlives the vec env: not after close(), an exception, Ctrl-C, or SIGKILL of the parent."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import termios
import textwrap
import time

import numpy as np
import psutil
import pytest
from conftest import (
    HANG_GUARD_SECONDS,
    closes_within,
    output_after_ctrl_c,
    shm_entries,
    shm_entries_left,
    step_with_a_ctrl_c_before_its_wait,
    wait_gone,
)
from faulty_envs import faulty, healthy

from vecshm import ShmVecEnv, ShmVectorEnv
from vecshm.parent.processes.lifetime import ctrl_c_after_the_starts
from vecshm.parent.processes.pool import CLOSE_GRACE_SECONDS, ProcessPool
from vecshm.shared.protocol import Phase

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Workers outliving a killed parent depend on how they were started. The portable transport runs
# them under spawn, the start method of the platforms that take it (macOS, Windows).
START_METHODS = ["fork", "forkserver", pytest.param("spawn", marks=pytest.mark.transport)]

PARENT_SCRIPT = textwrap.dedent(
    """
    import sys, numpy as np
    sys.path.insert(0, {tests!r})
    from faulty_envs import faulty
    from vecshm import ShmVecEnv

    if __name__ == "__main__":
        venv = ShmVecEnv([faulty("hang", fail_at=2) for _ in range(4)], start_method={method!r}, envs_per_worker=2)
        venv.reset()
        venv.step(np.zeros(4, dtype=np.int64))
        try:
            print(" ".join(str(p.pid) for p in venv.processes), flush=True)
            venv.step(np.zeros(4, dtype=np.int64))  # every env hangs: the parent waits here
        except KeyboardInterrupt:
            venv.close()
            print("interrupted-and-closed", flush=True)
    """
)


ASYNC_PARENT_SCRIPT = textwrap.dedent(
    """
    import sys, numpy as np
    sys.path.insert(0, {tests!r})
    from faulty_envs import faulty
    from vecshm import ShmVectorEnv

    if __name__ == "__main__":
        envs = ShmVectorEnv(
            [faulty("hang", fail_at=2) for _ in range(6)], context={method!r}, envs_per_worker=2, batch_size=3
        )
        envs.async_reset(seed=0)
        held = []
        while envs.in_flight:
            held.append(envs.recv())  # batches held while the parent waits
        envs.send(np.zeros(6, dtype=np.int64), np.arange(6))  # first step: fine
        for _ in range(2):
            *_, env_ids = envs.recv()
            envs.send(np.zeros(len(env_ids), dtype=np.int64), env_ids)  # second step: every env hangs
        try:
            print(" ".join(str(p.pid) for p in envs.processes), flush=True)
            envs.recv()  # the parent waits here
        except KeyboardInterrupt:
            envs.close()
            print("interrupted-and-closed", flush=True)
    """
)


def start_parent(method: str, script: str = PARENT_SCRIPT) -> tuple[subprocess.Popen, list[int]]:
    script = script.format(tests=os.path.join(ROOT, "tests"), method=method)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = parent.stdout.readline()
    assert line.strip(), f"parent failed to start: {parent.stderr.read()}"
    return parent, [int(p) for p in line.split()]


@pytest.mark.smoke
@pytest.mark.timeout(180)
@pytest.mark.parametrize("method", START_METHODS)
def test_workers_exit_when_the_parent_is_killed(method):
    before = shm_entries()
    parent, workers = start_parent(method)
    parent.kill()
    parent.wait()
    # the envs are stuck inside step(): the workers must still end, within a few seconds
    assert wait_gone(workers, 20) == []
    assert shm_entries_left(before) == set()


GIL_PARENT_SCRIPT = textwrap.dedent(
    """
    import sys, numpy as np
    sys.path.insert(0, {tests!r})
    from faulty_envs import spawning
    from vecshm import ShmVecEnv

    if __name__ == "__main__":
        venv = ShmVecEnv([spawning("gil_hang", fail_at=2)] * 4, start_method={method!r}, envs_per_worker=2)
        spawned = venv.get_attr("child_pid")
        venv.reset()
        venv.step(np.zeros(4, dtype=np.int64))
        print(" ".join(str(p.pid) for p in venv.processes), flush=True)
        print(" ".join(map(str, spawned)), flush=True)
        venv.step(np.zeros(4, dtype=np.int64))  # each worker's first env holds the GIL for good
    """
)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("method", START_METHODS)
def test_workers_holding_the_gil_and_what_their_envs_started_end_when_the_parent_is_killed(method):
    """A worker stuck in native code that keeps the GIL cannot run its watch thread, and the
    kernel's parent-death signal (fork only) ends the worker alone: its guard (vecshm.worker.guard) ends
    the worker and the processes its envs started."""
    parent, workers = start_parent(method, GIL_PARENT_SCRIPT)
    spawned = [int(p) for p in parent.stdout.readline().split()]
    holding = [parent.stdout.readline() for _ in workers]  # every worker is inside the native call
    assert all(text.startswith("holding the GIL") for text in holding), holding
    parent.kill()
    parent.wait()
    assert wait_gone(workers, 20) == []
    assert wait_gone(spawned, 20) == []


@pytest.mark.timeout(120)
def test_the_forkserver_folder_of_a_parent_killed_with_sigkill_is_removed():
    """multiprocessing removes its folder (/tmp/pymp-*, the forkserver's socket) at exit, which
    SIGKILL skips; the workers' guards remove it once the parent is gone."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from multiprocessing import util
        sys.path.insert(0, {os.path.join(ROOT, "tests")!r})
        from faulty_envs import healthy
        from vecshm import ShmVecEnv
        if __name__ == "__main__":
            venv = ShmVecEnv([healthy] * 2, start_method="forkserver")
            venv.reset()
            print(util.get_temp_dir(), flush=True)
            time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    folder = parent.stdout.readline().strip()
    assert os.path.basename(folder).startswith("pymp-") and os.path.isdir(folder)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 20
    while os.path.exists(folder) and time.monotonic() < deadline:
        time.sleep(0.05)  # another process removes it: nothing to wait on but the file system
    assert not os.path.exists(folder)


@pytest.mark.timeout(120)
def test_the_forkserver_folder_of_a_parent_killed_after_closing_goes_with_its_forkserver():
    """With no worker left to do it (a Ray actor that RLlib stops closes its env, then is killed),
    the forkserver removes the folder as it exits, once it sees the parent gone."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from multiprocessing import forkserver, util
        sys.path.insert(0, {os.path.join(ROOT, "tests")!r})
        from faulty_envs import healthy
        from vecshm import ShmVecEnv
        if __name__ == "__main__":
            with ShmVecEnv([healthy] * 2, start_method="forkserver") as venv:
                venv.reset()
            print(util.get_temp_dir(), forkserver._forkserver._forkserver_pid, flush=True)
            time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    folder, server = parent.stdout.readline().split()
    assert os.path.basename(folder).startswith("pymp-") and os.path.isdir(folder)
    parent.kill()
    parent.wait()
    assert wait_gone([int(server)], 20) == []
    assert not os.path.exists(folder)


LOUD_SCRIPT = textwrap.dedent(
    """
    import numpy as np, gymnasium as gym
    from vecshm import ShmVecEnv

    class Loud(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            print("reset", flush=True)
            return np.zeros(2, np.float32), {{}}

        def step(self, action):
            print("step", flush=True)
            return np.zeros(2, np.float32), 0.0, False, False, {{}}

    if __name__ == "__main__":
        venv = ShmVecEnv([Loud] * 2, start_method={method!r}, step_timeout=20)
        venv.reset()
        venv.step(np.zeros(2, dtype=np.int64))
        venv.close()
        print("done", flush=True)
    """
)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_envs_print_to_a_terminal_that_stops_background_writers(method, tmp_path):
    """Workers lead process groups of their own (vecshm.worker.guard), out of the terminal's foreground
    group: under `stty tostop` a write to the terminal would stop them (SIGTTOU), which they ignore."""
    script = tmp_path / "loud.py"
    script.write_text(LOUD_SCRIPT.format(method=method))
    pid, fd = pty.fork()
    if pid == 0:  # in a new session whose controlling terminal is the pty
        attrs = termios.tcgetattr(0)
        attrs[3] |= termios.TOSTOP
        termios.tcsetattr(0, termios.TCSANOW, attrs)
        os.execv(sys.executable, [sys.executable, str(script)])
    output = b""
    try:
        while b"done" not in output:
            try:
                data = os.read(fd, 4096)  # blocks until the script writes or exits (EOF or EIO)
            except OSError:
                break
            if not data:
                break
            output += data
    finally:
        os.close(fd)
        os.waitpid(pid, 0)
    text = output.decode(errors="replace")
    assert "done" in text, text
    assert text.count("step") == 2


@pytest.mark.timeout(180)
@pytest.mark.parametrize("method", START_METHODS)
def test_idle_workers_exit_within_seconds_when_the_parent_is_killed(method):
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {os.path.join(ROOT, "tests")!r})
        from faulty_envs import healthy
        from vecshm import ShmVecEnv
        if __name__ == "__main__":
            venv = ShmVecEnv([healthy] * 4, start_method={method!r}, envs_per_worker=2)
            venv.reset()
            print(" ".join(str(p.pid) for p in venv.processes), flush=True)
            time.sleep(600)
        """
    )
    before = shm_entries()
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    workers = [int(p) for p in parent.stdout.readline().split()]
    assert workers
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert wait_gone(workers, 20) == []
    assert shm_entries_left(before) == set()


@pytest.mark.transport
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ctrl_c_during_step_wait_is_a_clean_keyboard_interrupt():
    parent, workers = start_parent("forkserver")
    out, err = output_after_ctrl_c(parent)
    assert "interrupted-and-closed" in out, err
    assert wait_gone(workers, 30) == []
    assert "Traceback" not in err, f"worker traceback spam on Ctrl-C:\n{err}"


@pytest.mark.slow
def test_a_ctrl_c_between_a_steps_send_and_its_wait_does_not_make_close_wait_for_it(no_leaks):
    """A Ctrl-C can land inside ``step()`` after ``step_async`` returned and before ``step_wait``
    began: the step is still in flight, every env hangs in it, and close() must not wait for it
    (``AsyncVectorEnv``'s close waits for a pending step; ``ShmVecEnv``'s never did)."""
    envs = ShmVectorEnv([faulty("hang", fail_at=2)] * 3)
    envs.reset()
    envs.step(np.zeros(3, dtype=np.int64))
    pids = [p.pid for p in envs.processes]
    step_with_a_ctrl_c_before_its_wait(envs, np.zeros(3, dtype=np.int64))  # every env hangs in this step
    assert closes_within(envs, HANG_GUARD_SECONDS), "close() waits for the interrupted step, which never ends"
    assert wait_gone(pids, 30) == []


CONSTRUCTING_PARENT_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from faulty_envs import hangs_in_constructor
    import vecshm

    if __name__ == "__main__":
        try:
            vecshm.{cls}([hangs_in_constructor] * 2, envs_per_worker=1)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """
)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("cls", ["ShmVecEnv", "ShmVectorEnv"])
def test_ctrl_c_while_envs_are_being_built_ends_their_workers_at_once(cls):
    """Workers still in an env's constructor cannot read a request to close: they are ended at once
    instead of after the grace period given to built envs (5 s)."""
    script = CONSTRUCTING_PARENT_SCRIPT.format(tests=os.path.join(ROOT, "tests"), cls=cls)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workers = [int(parent.stdout.readline().split()[-1]) for _ in range(2)]  # both constructors have started
    interrupted = time.monotonic()
    out, err = output_after_ctrl_c(parent)
    assert "interrupted" in out, err
    assert time.monotonic() - interrupted < CLOSE_GRACE_SECONDS
    assert wait_gone(workers, 30) == []
    assert "Traceback" not in err, err


@pytest.mark.transport
@pytest.mark.parametrize("cls", [ShmVecEnv, ShmVectorEnv])
def test_ctrl_c_while_the_workers_map_the_segment_ends_them_at_once(cls, monkeypatch, no_leaks):
    """Interrupted while worker 1 maps the segment, worker 0 already waits for commands, where a
    request to close sent over its socket is never read: it is ended at once, not after 5 s."""
    receive = ProcessPool.read_from_process

    def interrupted_at_worker_1(self, p, deadline, during):
        if during is Phase.START_UP and p == 1:
            raise KeyboardInterrupt
        return receive(self, p, deadline, during)

    monkeypatch.setattr(ProcessPool, "read_from_process", interrupted_at_worker_1)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        cls([healthy] * 2, envs_per_worker=1)
    assert time.monotonic() - started < CLOSE_GRACE_SECONDS


def test_ctrl_c_while_workers_start_is_raised_once_they_have_started():
    """Raised inside ``Process.start()`` (waiting for the forkserver's pid), a KeyboardInterrupt
    would leave a worker the pool never learnt of, alive until its envs were built (then a broken
    pipe's traceback). The pool holds Ctrl-C back until its starts are done, then raises it."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_after_the_starts():
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("the starts went on")
    assert steps == ["the starts went on"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    def own_handler(signum, frame):
        steps.append("the program's handler ran")

    previous = signal.signal(signal.SIGINT, own_handler)
    try:
        with ctrl_c_after_the_starts():  # a program's own handler is left alone
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("after")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert steps[1:] == ["the program's handler ran", "after"]


@pytest.mark.transport
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ctrl_c_during_an_async_recv_is_a_clean_keyboard_interrupt():
    before = shm_entries()
    parent, workers = start_parent("forkserver", ASYNC_PARENT_SCRIPT)
    out, err = output_after_ctrl_c(parent)
    assert "interrupted-and-closed" in out, err
    assert wait_gone(workers, 30) == []
    assert "Traceback" not in err, f"worker traceback spam on Ctrl-C:\n{err}"
    assert shm_entries_left(before) == set()


@pytest.mark.transport
@pytest.mark.timeout(180)
def test_workers_exit_when_the_parent_is_killed_during_an_async_recv():
    before = shm_entries()
    parent, workers = start_parent("forkserver", ASYNC_PARENT_SCRIPT)
    parent.kill()
    parent.wait()
    assert wait_gone(workers, 20) == []
    assert shm_entries_left(before) == set()


FORKED_CHILD_SCRIPT = textwrap.dedent(
    """
    import gc, os, sys
    import gymnasium as gym
    import numpy as np
    from vecshm import ShmVectorEnv

    if __name__ == "__main__":
        fns = [lambda: gym.make("CartPole-v1")] * 4
        envs, reference = ShmVectorEnv(fns, envs_per_worker=2), gym.vector.SyncVectorEnv(fns)
        for e in (envs, reference):
            e.reset(seed=3)
        pid = os.fork()
        if pid == 0:  # the child ends its copy of the vec env, then exits
            if {ending!r} == "close":
                envs.close()
            elif {ending!r} == "collected":
                del envs
                gc.collect()
            sys.exit(0)  # atexit: vecshm's finalizer, and multiprocessing's end of daemonic children
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        actions = np.array([0, 1, 1, 0])
        for _ in range(20):
            ours, theirs = envs.step(actions), reference.step(actions)
            for a, b in zip(ours[:4], theirs[:4]):
                np.testing.assert_array_equal(a, b)
        envs.close()
        print("the parent's vec env went on")
    """
)


@pytest.mark.parametrize("ending", ["exit", "close", "collected"])
def test_a_process_forked_from_the_owner_cannot_stop_its_workers(ending):
    """A child made by ``os.fork()`` holds a copy of the vec env. Ending that copy (closing it,
    dropping it, or just exiting) must leave the owner's workers running: vecshm's finalizer and
    multiprocessing's exit handler would otherwise stop them under the owner. (AsyncVectorEnv and
    SubprocVecEnv break where the copy is closed or exits: the owner's next step is a BrokenPipeError.)"""
    script = FORKED_CHILD_SCRIPT.format(ending=ending)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "the parent's vec env went on"


def test_importing_vecshm_does_not_import_torch_or_sb3():
    code = "import sys, vecshm; print('torch' in sys.modules, 'stable_baselines3' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


@pytest.mark.transport
@pytest.mark.slow
def test_many_create_close_cycles_leak_nothing(no_leaks):
    me = psutil.Process()
    ShmVecEnv([healthy] * 2).close()  # warm-up: first-use allocations are not leaks
    fds, threads = me.num_fds(), me.num_threads()
    for _ in range(20):
        venv = ShmVecEnv([healthy] * 2)
        venv.reset()
        venv.close()
    assert me.num_fds() <= fds and me.num_threads() <= threads


@pytest.mark.transport
def test_garbage_collected_vec_env_shuts_its_workers_down(no_leaks):
    venv = ShmVecEnv([healthy] * 2)
    pids = [p.pid for p in venv.processes]
    del venv
    import gc

    gc.collect()
    assert wait_gone(pids, 30) == []


def test_exception_inside_with_block_closes_the_vec_env(no_leaks):
    with pytest.raises(RuntimeError, match="user code"), ShmVecEnv([healthy] * 2) as venv:
        pids = [p.pid for p in venv.processes]
        raise RuntimeError("user code failed")
    assert wait_gone(pids, 30) == []


@pytest.mark.transport
@pytest.mark.skipif(not (hasattr(os, "posix_fallocate") and os.path.isdir("/dev/shm")), reason="Linux /dev/shm")
def test_a_portable_segment_takes_its_dev_shm_space_at_creation_or_is_a_clear_error(monkeypatch, no_leaks):
    """A /dev/shm smaller than the segment (Docker's default 64 MiB) would otherwise kill with SIGBUS
    whichever process first writes past its free space, long after the constructor returned."""
    import errno

    from vecshm.shared.memory import NamedSegment

    size = 16 * 2**20
    segment = NamedSegment(size)
    try:
        assert segment.allocated_bytes() >= size  # allocated, not just reserved by name
    finally:
        segment.release_fd()
        segment.close()

    def no_space(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    monkeypatch.setenv("VECSHM_TRANSPORT", "portable")
    with pytest.raises(OSError, match=r"shared memory \(.* MiB\) does not fit in /dev/shm.*--shm-size") as info:
        ShmVecEnv([healthy] * 2)
    assert info.value.errno == errno.ENOSPC
