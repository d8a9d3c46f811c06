"""``ShmVectorEnv(env_fns, worker=fn)``: a custom worker runs on Gymnasium's pipe protocol, as on
``AsyncVectorEnv``, and keeps vecshm's guarantees (a clear error when a worker dies, nothing left
running after close(), a failed constructor, Ctrl-C or SIGKILL of the parent)."""

from __future__ import annotations

import functools
import gc
import os
import signal
import textwrap
from contextlib import closing
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest import (
    HANG_GUARD_SECONDS,
    assert_tree_equal,
    closes_within,
    output_after_ctrl_c,
    process_alive,
    step_with_a_ctrl_c_before_its_wait,
    wait_gone,
)
from dropin_envs import EchoEnv, reward_doubling_worker
from faulty_envs import faulty
from gymnasium.vector import AsyncVectorEnv
from test_lifecycle import start_parent

from vecshm import ShmVectorEnv
from vecshm.shared.errors import FailedError, WorkerDiedError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cartpoles(n: int) -> list[Any]:
    return [functools.partial(gym.make, "CartPole-v1")] * n


@pytest.mark.parametrize("max_concurrency", [None, 2])
@pytest.mark.parametrize("positional", [False, True])
def test_a_custom_worker_runs_as_on_async_vector_env(max_concurrency, positional):
    """A custom worker speaks AsyncVectorEnv's pipe protocol: ShmVectorEnv hands it exactly what
    AsyncVectorEnv would (pipes, shared memory, semaphore), so the trajectories are the same, episode
    ends included, and so are the attributes such code reaches for."""
    args = (cartpoles(3), True, True, None, True, reward_doubling_worker) if positional else (cartpoles(3),)
    kwargs = {} if positional else {"worker": reward_doubling_worker}
    actions = np.random.default_rng(0).integers(0, 2, size=(60, 3))
    trajectories = []
    for cls in (ShmVectorEnv, AsyncVectorEnv):
        with closing(cls(*args, max_concurrency=max_concurrency, **kwargs)) as envs:
            steps = [envs.reset(seed=[3, 4, 5])] + [envs.step(a) for a in actions]
            assert len(envs.parent_pipes) == len(envs.processes) == 3
            assert all(process.is_alive() for process in envs.processes)
            trajectories.append((steps, envs.get_attr("spec"), repr(envs).replace(cls.__name__, "")))
    assert_tree_equal(*trajectories)
    rewards, terminations = (np.array([step[k] for step in trajectories[0][0][1:]]) for k in (1, 2))
    assert terminations.any(), "60 random CartPole steps end an episode"
    autoresets = np.vstack([np.zeros((1, 3), bool), terminations[:-1]])  # NEXT_STEP: reward 0 there
    assert (rewards[~autoresets] == 2.0).all(), "the custom worker's env doubles CartPole's rewards"


def test_with_a_custom_worker_vecshm_s_own_options_are_refused_and_it_is_still_a_shm_vector_env():
    with closing(ShmVectorEnv(cartpoles(2), worker=reward_doubling_worker)) as envs:
        assert isinstance(envs, ShmVectorEnv) and repr(envs) == "ShmVectorEnv(num_envs=2)"
        envs.reset(seed=0)
        for call in (lambda: envs.send(np.zeros(2, np.int64)), envs.recv, envs.async_reset):
            with pytest.raises(NotImplementedError, match="custom `worker`"):
                call()
    pids = [p.pid for p in envs.processes]
    assert not any(process_alive(pid) for pid in pids), "close() ends the custom worker's processes"
    for option in ({"envs_per_worker": 2}, {"batch_size": 1}, {"step_timeout": 5.0}):
        with pytest.raises(ValueError, match=f"`{next(iter(option))}` needs vecshm's own worker loop"):
            ShmVectorEnv(cartpoles(2), worker=reward_doubling_worker, **option)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        ShmVectorEnv(cartpoles(2), worker=reward_doubling_worker, bogus=1)

    class Subclass(ShmVectorEnv):
        pass

    with pytest.raises(ValueError, match="a subclass of ShmVectorEnv .* cannot take a custom `worker`"):
        Subclass(cartpoles(2), worker=reward_doubling_worker)


def test_a_worker_with_the_wrong_signature_gets_async_vector_env_s_error():
    def seven(index, env_fn, pipe, parent_pipe, shared_memory, error_queue, autoreset_mode):
        pass

    for cls in (ShmVectorEnv, AsyncVectorEnv):
        with pytest.raises(ValueError) as raised:
            cls([EchoEnv] * 2, worker=seven)
        if cls is ShmVectorEnv:
            ours = str(raised.value)
    assert ours == str(raised.value)


def test_a_worker_that_exits_at_once_is_a_worker_died_error_naming_its_envs_not_a_broken_pipe(no_leaks):
    """AsyncVectorEnv raises a bare ``ConnectionResetError`` or ``EOFError`` from its pipes here."""
    with pytest.raises(
        WorkerDiedError, match=r"env 0's worker process exited with code 0.*custom `worker` '.*<lambda>'"
    ) as raised:
        ShmVectorEnv([EchoEnv] * 2, worker=lambda a, b, c, d, e, f, g, h: None)
    assert raised.value.env_indices in ([0], [1], [0, 1]), "the envs whose worker was seen ended"
    del raised  # its traceback holds the half-built vec env (its queue's and processes' descriptors)
    gc.collect()


@pytest.mark.parametrize("fault, cause", [("sigkill", "SIGKILL"), ("abort", "SIGABRT"), ("exit", "exited with code 3")])
def test_a_worker_that_dies_mid_step_is_named_then_the_vec_env_can_only_be_closed(fault, cause):
    fns = [faulty("none")] * 3
    fns[1] = faulty(fault, fail_at=2)
    envs = ShmVectorEnv(fns, worker=reward_doubling_worker)
    envs.reset(seed=0)
    envs.step(np.zeros(3, np.int64))
    pids = [process.pid for process in envs.processes]
    with pytest.raises(WorkerDiedError, match=rf"env 1's worker process .*{cause}") as raised:
        envs.step(np.zeros(3, np.int64))
    assert raised.value.env_indices == [1]
    assert not any(process_alive(pid) for pid in pids), "the others are ended with it, as in the engine"
    with pytest.raises(FailedError, match="failed earlier and can only be closed"):
        envs.step(np.zeros(3, np.int64))
    envs.close()
    with pytest.raises(gym.error.ClosedEnvironmentError):
        envs.step(np.zeros(3, np.int64))


def test_a_failed_constructor_leaves_no_worker_running(no_leaks):
    """AsyncVectorEnv's space check raises after its workers started, and leaves them running."""
    with pytest.raises(RuntimeError, match="observation_mode='same'"):
        ShmVectorEnv([EchoEnv, EchoEnv, functools.partial(EchoEnv, shape=(4,))], worker=reward_doubling_worker)


PARENT_SCRIPT = textwrap.dedent(
    """
    import sys, numpy as np
    sys.path.insert(0, {tests!r})
    from dropin_envs import reward_doubling_worker
    from faulty_envs import faulty
    from vecshm import ShmVectorEnv

    if __name__ == "__main__":
        envs = ShmVectorEnv([faulty("hang", fail_at=2)] * 3, context={method!r}, worker=reward_doubling_worker)
        envs.reset(seed=0)
        envs.step(np.zeros(3, dtype=np.int64))
        try:
            print(" ".join(str(p.pid) for p in envs.processes), flush=True)
            envs.step(np.zeros(3, dtype=np.int64))  # every env hangs: the parent waits here
        except KeyboardInterrupt:
            envs.close()
            print("interrupted-and-closed", flush=True)
    """
)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_custom_workers_exit_when_the_parent_is_killed_with_their_envs_stuck_in_step(method):
    """Gymnasium's worker would wait in the env's step forever: its pipe's EOF is never read."""
    parent, workers = start_parent(method, PARENT_SCRIPT)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert wait_gone(workers, 20) == []


@pytest.mark.timeout(180)
def test_ctrl_c_while_custom_workers_hang_then_close_ends_them():
    """AsyncVectorEnv's close() would wait for the interrupted step, which never ends."""
    parent, workers = start_parent("fork", PARENT_SCRIPT)
    out, err = output_after_ctrl_c(parent)
    assert "interrupted-and-closed" in out, err
    assert wait_gone(workers, 30) == []


def test_a_ctrl_c_between_a_steps_send_and_its_wait_does_not_make_close_wait_for_it(no_leaks):
    """A Ctrl-C can land inside ``step()`` after ``step_async`` returned and before ``step_wait``
    began: the step is still pending, every env hangs in it, and close() must not wait for it."""
    envs = ShmVectorEnv([faulty("hang", fail_at=2)] * 3, worker=reward_doubling_worker)
    envs.reset(seed=0)
    envs.step(np.zeros(3, dtype=np.int64))
    pids = [p.pid for p in envs.processes]
    step_with_a_ctrl_c_before_its_wait(envs, np.zeros(3, dtype=np.int64))  # every env hangs in this step
    assert closes_within(envs, HANG_GUARD_SECONDS), "close() waits for the interrupted step, which never ends"
    assert wait_gone(pids, 30) == []
