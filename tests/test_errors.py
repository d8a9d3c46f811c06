"""Every failure reaches the caller as a clear exception naming the env, and nothing is left behind."""

from __future__ import annotations

import os
import signal
import time

import gymnasium as gym
import numpy as np
import pytest
from conftest import (
    as_dummy_rewards,
    assert_tree_equal,
    make_space_env,
    nothing_left_behind,
    process_alive,
    wait_gone,
)
from faulty_envs import LockedFactory, faulty, hangs_in_constructor, healthy, raises_in_constructor, spawning
from gymnasium import spaces
from stable_baselines3.common.vec_env import DummyVecEnv

from vecshm import (
    AlreadyPendingCallError,
    ClosedError,
    FailedError,
    NoAsyncCallError,
    ShmVecEnv,
    ShmVectorEnv,
    StepTimeoutError,
    WorkerDiedError,
    WorkerError,
)
from vecshm.parent.processes.pool import CLOSE_GRACE_SECONDS
from vecshm.shared.buffers import INFO_PIPED

ZEROS = np.zeros(4, dtype=np.int64)


def four_envs(fault: str, bad_index: int = 2, **kwargs):
    return [faulty(fault, **kwargs) if i == bad_index else healthy for i in range(4)]


def step_until_error(venv, steps: int = 10):
    venv.reset()
    for _ in range(steps):
        venv.step(ZEROS)


# -- bad input ------------------------------------------------------------------------------------


class TestActionsCheckedInTheCaller:
    """Wrong actions never reach the workers, so one vec env serves every case: each case leaves it
    usable, which the next case relies on too."""

    @pytest.fixture(scope="class")
    @classmethod
    def venv(cls):
        with nothing_left_behind(), ShmVecEnv([healthy] * 4) as venv:
            yield venv

    @pytest.mark.parametrize(
        "actions, message",
        [
            (np.zeros(3, dtype=np.int64), "shape"),
            (np.zeros((4, 1), dtype=np.int64), "shape"),
            (np.zeros(4, dtype=np.float32), "integers"),
            (np.array(["a"] * 4), "integers"),
        ],
    )
    def test_wrong_actions_are_rejected_before_reaching_workers(self, venv, actions, message):
        venv.reset()
        with pytest.raises(ValueError, match=message):
            venv.step(actions)
        venv.step(ZEROS)  # still usable: nothing was sent


def test_box_actions_of_the_wrong_kind_are_rejected():
    fns = [make_space_env("box_f32", "box") for _ in range(2)]
    with ShmVecEnv(fns) as venv:
        venv.reset()
        for _ in range(2):  # batches like the last one skip the dispatch of the checks, not the checks
            venv.step(np.zeros((2, 2), np.float32))
        with pytest.raises(ValueError, match=r"shape \(2, 3\), expected \(2, 2\)"):
            venv.step(np.zeros((2, 3), np.float32))
        with pytest.raises(ValueError, match="dtype"):
            venv.step(np.zeros((2, 2), dtype=np.complex64))
        nan = np.zeros((2, 2), np.float32)
        nan[1, 0] = np.nan
        with pytest.raises(ValueError, match=r"envs \[1\] contain NaN"):
            venv.step(nan)
        venv.step(np.zeros((2, 2), np.float32))  # the workers are untouched
        with pytest.raises(ValueError, match=r"envs \[1\] contain NaN"):
            venv.step(nan)  # (right after a batch of its shape and dtype)


@pytest.mark.parametrize("fault", ["bad_shape", "bad_dtype", "bad_type"])
def test_observation_outside_the_space_names_the_env(fault, no_leaks):
    with ShmVecEnv(four_envs(fault, fail_at=2)) as venv:
        with pytest.raises(WorkerError, match="env 2 raised .*does not fit the declared observation space") as info:
            step_until_error(venv)
        assert info.value.env_index == 2
        assert isinstance(info.value, ValueError)


def test_bad_constructor_arguments(no_leaks):
    with pytest.raises(ValueError, match="start_method"):
        ShmVecEnv([healthy], start_method="telepathy")
    with pytest.raises(TypeError, match="env_fns\\[1\\]"):
        ShmVecEnv([healthy, "not callable"])
    with pytest.raises(ValueError, match="empty"):
        ShmVecEnv([])
    with pytest.raises(ValueError, match="envs_per_worker"):
        ShmVecEnv([healthy] * 2, envs_per_worker=0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        ShmVecEnv([healthy], num_threads=3)


def test_factory_returning_the_same_instance_is_refused(no_leaks):
    env = healthy()
    with pytest.raises(ValueError, match="same env|already returned"):
        ShmVecEnv([lambda: env, lambda: env], envs_per_worker=2, start_method="fork")


def test_spaces_that_differ_between_envs_are_refused(no_leaks):
    def other():
        env = healthy()
        env.observation_space = spaces.Box(-1, 1, (5,), np.float32)
        return env

    with pytest.raises(ValueError, match="differ from env 0") as info:
        ShmVecEnv([healthy, other], envs_per_worker=1)
    assert isinstance(info.value, RuntimeError)  # what Gymnasium's AsyncVectorEnv raises


# -- out-of-order calls ---------------------------------------------------------------------------


def test_calls_out_of_order_and_after_close(no_leaks):
    venv = ShmVecEnv([healthy] * 2)
    with pytest.raises(NoAsyncCallError):
        venv.step_wait()
    venv.reset()
    venv.step_async(np.zeros(2, dtype=np.int64))
    with pytest.raises(AlreadyPendingCallError):
        venv.step_async(np.zeros(2, dtype=np.int64))
    venv.step_wait()
    venv.close()
    venv.close()  # idempotent
    for call in (venv.reset, lambda: venv.step(np.zeros(2, dtype=np.int64)), lambda: venv.get_attr("t")):
        with pytest.raises(ClosedError, match="closed"):
            call()


class TestCallsRefusedWhileAStepIsPending:
    """Every case seeds and resets the envs before it starts, so one vec env serves them all (what
    ``set_attr`` sets on an env's wrapper stays; no case reads its value)."""

    @pytest.fixture(scope="class")
    @classmethod
    def envs(cls):
        fns = [make_space_env("box_f32", tag=i) for i in range(4)]
        with nothing_left_behind(), ShmVecEnv(fns, envs_per_worker=2, batch_size=4) as venv:
            yield fns, venv

    @pytest.mark.parametrize(
        "call",
        [
            lambda venv: venv.get_attr("t"),
            lambda venv: venv.set_attr("t", 5, indices=[1]),
            lambda venv: venv.env_method("reset", indices=0),
            lambda venv: venv.env_is_wrapped(gym.Wrapper),
            lambda venv: venv.has_attr("t"),
            lambda venv: venv.get_images(),
        ],
        ids=["get_attr", "set_attr", "env_method", "env_is_wrapped", "has_attr", "get_images"],
    )
    @pytest.mark.parametrize("pending", ["step_async", "send"])
    def test_a_call_while_a_step_is_pending_is_refused_and_the_step_survives(self, envs, call, pending):
        """Between ``step_async`` and ``step_wait`` (or with ``send``'s envs in flight), a call on the
        envs raises ``AlreadyPendingCallError``, as the Gymnasium facade does, and the step's results
        are then those of ``DummyVecEnv``. It used to take the workers from the step: ``step_wait``
        never returned. SubprocVecEnv hands the step's results to the call there."""
        fns, venv = envs
        actions = np.array([0, 1, 2, 1])
        reference = DummyVecEnv(fns)
        venv.seed(3)
        reference.seed(3)
        assert_tree_equal(venv.reset(), reference.reset())
        if pending == "step_async":
            venv.step_async(actions)
        else:
            venv.send(actions, np.arange(4))
        with pytest.raises(AlreadyPendingCallError, match="step_wait|recv"):
            call(venv)
        got = venv.step_wait() if pending == "step_async" else venv.recv()
        if pending == "send":  # (obs, rewards, terminated, truncated, infos, env_ids), all 4 envs
            order = np.argsort(got[-1])
            got = (got[0][order], got[1][order], (got[2] | got[3])[order], [got[4][k] for k in order])
        assert_tree_equal((got[0], as_dummy_rewards(got[1]), *got[2:]), reference.step(actions))
        call(venv)  # and the call works once nothing is pending
        reference.close()


# -- env exceptions -------------------------------------------------------------------------------


@pytest.mark.parametrize("fault, name", [("bad_reward", "reward=array"), ("text_reward", "reward='high'")])
def test_a_reward_that_is_not_a_number_names_its_env(fault, name, no_leaks):
    """A worker writes its envs' rewards and flags together; the error names the env that broke
    the write, not the first env of that worker."""
    with ShmVecEnv(four_envs(fault, bad_index=3, fail_at=2), envs_per_worker=2) as venv:
        message = f"env 3 raised .*step\\(\\) returned {name}.*not a single number"
        with pytest.raises(WorkerError, match=message) as info:
            step_until_error(venv)
        assert info.value.env_index == 3 and info.value.errors == [info.value]
        assert isinstance(info.value, ValueError)


@pytest.mark.transport
def test_exception_in_step_names_env_and_keeps_the_traceback(no_leaks):
    venv = ShmVecEnv(four_envs("raise", bad_index=2), envs_per_worker=2)
    with pytest.raises(WorkerError) as info:
        step_until_error(venv)
    error = info.value
    assert isinstance(error, ValueError), "the original exception type is preserved"
    assert error.env_index == 2 and error.command == "step"
    assert "boom at t=3" in str(error) and "faulty_envs.py" in error.remote_traceback
    with pytest.raises(FailedError, match="env 2 raised"):
        venv.step(ZEROS)
    venv.close()


def test_exception_in_reset_names_env(no_leaks):
    with ShmVecEnv(four_envs("raise", bad_index=3, fail_in_reset=True)) as venv:
        with pytest.raises(WorkerError, match="env 3 raised .*ValueError during reset"):
            venv.reset()


@pytest.mark.transport
def test_exception_in_constructor_names_env(no_leaks):
    fns = [healthy, raises_in_constructor, healthy]
    with pytest.raises(WorkerError, match="env 1 raised .*RuntimeError during env construction: cannot build"):
        ShmVecEnv(fns, envs_per_worker=1)


@pytest.mark.transport
@pytest.mark.timeout(120)
@pytest.mark.parametrize("cls", [ShmVecEnv, ShmVectorEnv])
def test_a_construction_error_does_not_wait_for_envs_still_being_built(cls, no_leaks):
    """Env 1 cannot be built while env 0's constructor runs on (for an hour): the error comes at
    once, and env 0's worker is ended without the grace period that closing built envs gets."""
    started = time.monotonic()
    with pytest.raises(WorkerError, match="env 1 raised .*RuntimeError during env construction: cannot build"):
        cls([hangs_in_constructor, raises_in_constructor], envs_per_worker=1)
    assert time.monotonic() - started < CLOSE_GRACE_SECONDS


@pytest.mark.parametrize("cls", [ShmVecEnv, ShmVectorEnv])
@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_factory_that_cannot_be_sent_to_its_worker_is_named(cls, method, no_leaks):
    fns = [healthy, LockedFactory()]
    with pytest.raises(TypeError, match=r"env_fns\[1\] cannot be sent to a .* process: TypeError: cannot pickle"):
        cls(fns, **{"start_method" if cls is ShmVecEnv else "context": method})


@pytest.mark.parametrize("cls", [ShmVecEnv, ShmVectorEnv])
@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_factory_whose_module_its_worker_cannot_import_is_named(cls, method, tmp_path, monkeypatch, no_leaks):
    name = f"parent_only_envs_{method}_{cls.__name__}"
    module = tmp_path / f"{name}.py"
    module.write_text("import gymnasium as gym\n\ndef make():\n    return gym.make('CartPole-v1')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    make = __import__(name).make
    module.unlink()  # imported here, gone for the workers: a module not installed where they run
    options = {"start_method" if cls is ShmVecEnv else "context": method, "envs_per_worker": 1}
    with pytest.raises(
        ModuleNotFoundError,
        match=f"env 1 raised builtins.ModuleNotFoundError during env construction: No module named '{name}'",
    ):
        cls([healthy, make], **options)


@pytest.mark.transport
def test_exception_in_env_method_is_reraised_and_the_env_stays_usable():
    with ShmVecEnv([healthy] * 2) as venv:
        venv.reset()
        with pytest.raises(AttributeError, match="env 0 raised"):
            venv.get_attr("no_such_attribute")
        assert venv.has_attr("no_such_attribute") is False
        with pytest.raises(TypeError, match="env 1 raised"):
            venv.env_method("step", indices=[1])  # missing argument
        venv.step(np.zeros(2, dtype=np.int64))


# -- dead and hung workers ------------------------------------------------------------------------


@pytest.mark.transport
@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault, cause", [("sigkill", "SIGKILL"), ("abort", "SIGABRT"), ("exit", "exited with code 3")])
def test_dead_worker_is_reported_with_its_cause(fault, cause, no_leaks):
    venv = ShmVecEnv(four_envs(fault, bad_index=1), envs_per_worker=2)
    with pytest.raises(WorkerDiedError, match=f"worker 0 \\(envs 0-1\\) .*{cause}.*env 1 was running") as info:
        step_until_error(venv)
    assert info.value.env_indices == [0, 1]
    with pytest.raises(FailedError):
        venv.step(ZEROS)
    venv.close()


@pytest.mark.transport
@pytest.mark.timeout(120)
def test_worker_killed_from_outside_is_detected_while_waiting(no_leaks):
    venv = ShmVecEnv(four_envs("hang", bad_index=3, fail_at=2), envs_per_worker=2)
    venv.reset()
    venv.step(ZEROS)
    venv.step_async(ZEROS)  # env 3 now hangs
    os.kill(venv.processes[1].pid, signal.SIGKILL)
    with pytest.raises(WorkerDiedError, match="worker 1 .*SIGKILL"):
        venv.step_wait()
    venv.close()


@pytest.mark.transport
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("when", "call"),
    [("before its first command", "reset"), ("between two steps", "reset"), ("between two steps", "get_attr")],
)
def test_a_worker_killed_between_commands_is_named_without_a_running_env(when, call, no_leaks):
    """The next command that sends it something (a reset's seeds, a call's arguments) finds its
    socket closed: a ``WorkerDiedError`` naming it, not a ``BrokenPipeError``. Its envs are named,
    but none as running: none was (an earlier command's env, or env 0 of the zeroed segment, would
    send the reader to the wrong env)."""
    venv = ShmVecEnv([healthy] * 4, envs_per_worker=2)
    if when == "between two steps":
        venv.reset()
        venv.step(ZEROS)  # every worker has published: between commands
    process = venv.processes[1]
    os.kill(process.pid, signal.SIGKILL)
    process.join()
    with pytest.raises(WorkerDiedError, match=r"worker 1 \(envs 2-3\) was killed by SIGKILL") as info:
        venv.reset() if call == "reset" else venv.get_attr("spec")
    assert "was running" not in str(info.value)
    assert info.value.env_indices == [2, 3]
    with pytest.raises(FailedError):
        venv.step(ZEROS)
    venv.close()


@pytest.mark.transport
@pytest.mark.timeout(120)
def test_a_worker_that_cannot_be_started_is_named_and_the_started_ones_end(monkeypatch, no_leaks):
    """A process start that fails (no process can be made, or the forkserver is gone): a
    ``WorkerDiedError`` naming the worker and the cause, and the workers started before it end."""
    from multiprocessing.context import ForkServerProcess

    real_popen, starts = ForkServerProcess._Popen, []

    def popen(process):
        starts.append(process.name)
        if len(starts) == 3:
            raise BrokenPipeError(32, "Broken pipe")
        return real_popen(process)

    monkeypatch.setattr(ForkServerProcess, "_Popen", staticmethod(popen))
    with pytest.raises(WorkerDiedError, match=r"worker 2 \(env 2\) could not be started: BrokenPipeError") as info:
        ShmVecEnv([healthy] * 4, envs_per_worker=1, start_method="forkserver")
    assert info.value.env_indices == [2]
    assert starts == ["vecshm-worker-0", "vecshm-worker-1", "vecshm-worker-2"]


@pytest.mark.transport
@pytest.mark.timeout(120)
@pytest.mark.parametrize("cls", [ShmVecEnv, ShmVectorEnv])
def test_a_hung_env_times_out_though_other_envs_keep_filling_async_batches(cls, no_leaks):
    """Without a check of commands in flight, the healthy envs fill every batch and the hung one
    silently drops out: its step_timeout must still end the loop, naming it."""
    venv = cls(four_envs("hang", bad_index=2, fail_at=2), envs_per_worker=1, batch_size=2, step_timeout=1.0)
    venv.async_reset()
    end = time.monotonic() + 60  # a bound for the test, not a synchronisation
    with pytest.raises(StepTimeoutError, match=r"env\(s\) \[2\]") as info:
        while time.monotonic() < end:
            env_ids = venv.recv()[-1]
            venv.send(np.zeros(len(env_ids), dtype=np.int64), env_ids)
    assert info.value.env_indices == [2]
    with pytest.raises(FailedError):
        venv.recv()
    venv.close()


@pytest.mark.transport
@pytest.mark.timeout(120)
def test_hung_env_times_out_and_close_terminates_it(no_leaks):
    venv = ShmVecEnv(four_envs("hang", bad_index=2, fail_at=2), step_timeout=1.0)
    pids = [p.pid for p in venv.processes]
    with pytest.raises(StepTimeoutError, match=r"env\(s\) \[2\]") as info:
        step_until_error(venv)
    assert info.value.env_indices == [2]
    assert isinstance(info.value, TimeoutError)
    with pytest.raises(FailedError):
        venv.step(ZEROS)
    venv.close()
    assert not any(process_alive(pid) for pid in pids)


# Both facades with the env's own processes in the worker's group; those that leave it are found by
# the pool and the guards below both facades, so one facade checks them.
# The portable transport runs the first: the processes are found the same way on either transport.
FACADE_AND_DETACHMENT = [
    pytest.param(ShmVecEnv, None, marks=pytest.mark.transport),
    (ShmVectorEnv, None),
    (ShmVecEnv, "session"),
    (ShmVecEnv, "daemon"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ending", ["close", "hung step"])
@pytest.mark.parametrize(("cls", "detached"), FACADE_AND_DETACHMENT)
def test_processes_the_envs_started_end_with_the_vec_env(cls, ending, detached, no_leaks):
    """An env's own processes (a simulator it never stops) end at close(), also when its worker is
    terminated in the middle of a step: once a worker is gone they would belong to init. So do
    those in a session of their own, and those a launcher left to init."""
    fault = "hang" if ending == "hung step" else "none"
    factories = [spawning(fault, fail_at=2, detached=detached)] + [spawning(detached=detached)] * 2
    envs = cls(factories, envs_per_worker=2, step_timeout=2.0)
    spawned = envs.get_attr("child_pid")
    assert all(process_alive(pid) for pid in spawned)
    envs.reset()
    envs.step(np.zeros(3, dtype=np.int64))
    if ending == "hung step":
        with pytest.raises(StepTimeoutError):
            envs.step(np.zeros(3, dtype=np.int64))
    envs.close()
    assert [pid for pid in spawned if process_alive(pid)] == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("cls", "detached"), FACADE_AND_DETACHMENT)
def test_processes_an_env_started_end_when_its_worker_dies(cls, detached, no_leaks):
    """A worker killed from outside leaves what its envs started to its guard (vecshm.worker.guard),
    which ends it at once; before, it went to init and outlived the vec env. Those in a session
    of their own, or left to init by a launcher, too."""
    envs = cls([spawning(detached=detached)] * 4, envs_per_worker=2)
    spawned = envs.get_attr("child_pid")
    os.kill(envs.processes[0].pid, signal.SIGKILL)
    assert wait_gone(spawned[:2], 20) == []
    assert all(process_alive(pid) for pid in spawned[2:])  # the live worker's stay
    envs.close()
    assert wait_gone(spawned, 5) == []


# -- restart policy -------------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("obs_key", ["box_f32", "frame_u8"])  # copied, and lent, observations
def test_gymnasium_same_step_restart_ends_the_lost_episodes_on_the_last_observation(obs_key, no_leaks):
    """ShmVectorEnv in SAME_STEP mode: as ShmVecEnv, the killed worker's envs end their episodes as
    truncated, ``final_obs`` is the last observation the caller saw and ``final_info`` flags the
    restart; the other envs' results are those of an ordinary step, and stepping goes on."""
    fns = [make_space_env(obs_key, big_info_every=0, max_steps=1000) for _ in range(4)]
    envs = ShmVectorEnv(
        fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, envs_per_worker=2, on_worker_failure="restart"
    )
    envs.reset(seed=0)
    last = envs.step(ZEROS)[0]
    victim = envs.processes[1].pid
    os.kill(victim, signal.SIGKILL)
    with pytest.warns(RuntimeWarning, match=r"worker 1 \(envs 2-3\) was killed by SIGKILL.*restarting"):
        obs, rewards, terminations, truncations, infos = envs.step(ZEROS)
    for i in (2, 3):
        assert truncations[i] and not terminations[i] and infos["_final_info"][i]
        # Gymnasium batches final_info as it batches infos: a dict of arrays, with masks
        assert infos["final_info"]["worker_restarted"][i] and infos["final_info"]["_worker_restarted"][i]
        np.testing.assert_array_equal(infos["final_obs"][i], last[i])  # the lost episode's last observation
    for i in (0, 1):  # an ordinary step for the others (an episode of theirs may end as it would anyway)
        assert not infos["final_info"]["_worker_restarted"][i]
    assert envs.processes[1].pid != victim
    for _ in range(5):
        obs, rewards, terminations, truncations, infos = envs.step(ZEROS)  # the vec env goes on as before
        assert "worker_restarted" not in infos.get("final_info", {})
    assert obs.shape == envs.observation_space.shape
    envs.close()


def _killed_and_stepped(envs, worker: int = 1):
    """Kill ``worker``'s process, then step: its restart's warning, and the step's results."""
    victim = envs.processes[worker].pid
    os.kill(victim, signal.SIGKILL)
    with pytest.warns(RuntimeWarning, match=rf"worker {worker} \(envs 2-3\) was killed by SIGKILL.*restarting"):
        results = envs.step(ZEROS)
    assert envs.processes[worker].pid != victim
    return results


@pytest.mark.timeout(120)
@pytest.mark.parametrize("reset_ahead", [False, True], ids=["next_step", "reset_ahead"])
@pytest.mark.parametrize("obs_key", ["box_f32", "frame_u8"])  # copied, and lent, observations
def test_gymnasium_next_step_restart_truncates_on_the_last_observation_then_autoresets(obs_key, reset_ahead, no_leaks):
    """NEXT_STEP: the step a worker died in returns its envs' last observation, reward 0,
    truncated, with ``worker_restarted`` (and its mask) in the step's info; their next step
    ignores its action and returns the rebuilt env's reset, as after any truncation."""
    fns = [make_space_env(obs_key, big_info_every=0, max_steps=1000) for _ in range(4)]
    envs = ShmVectorEnv(fns, envs_per_worker=2, on_worker_failure="restart", reset_ahead=reset_ahead)
    envs.reset(seed=0)
    last = envs.step(ZEROS)[0].copy()
    obs, rewards, terminations, truncations, infos = _killed_and_stepped(envs)
    for i in (2, 3):
        assert truncations[i] and not terminations[i] and rewards[i] == 0
        np.testing.assert_array_equal(obs[i], last[i])
        assert infos["worker_restarted"][i] and infos["_worker_restarted"][i]
    assert not infos["_worker_restarted"][:2].any()
    assert "final_info" not in infos and "final_obs" not in infos  # NEXT_STEP has neither
    obs, rewards, terminations, truncations, infos = envs.step(ZEROS)
    assert envs.get_attr("t")[2:] == (0, 0), "the action after the truncation must be ignored (a reset)"
    for i in (2, 3):
        assert not (terminations[i] or truncations[i]) and rewards[i] == 0
    assert "worker_restarted" not in infos
    envs.step(ZEROS)
    assert envs.get_attr("t")[2:] == (1, 1)  # then they step again
    for _ in range(5):
        obs, *_ = envs.step(ZEROS)  # the vec env goes on as before
    assert obs.shape == envs.observation_space.shape
    envs.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("reset_ahead", [False, True], ids=["next_step", "reset_ahead"])
def test_gymnasium_next_step_restart_redoes_a_reset_that_was_due(reset_ahead, no_leaks):
    """NEXT_STEP: an env whose last step ended its episode was due a reset; its worker dying
    loses no episode, so the restart redoes that reset, which ends nothing and says
    ``worker_restarted`` in its info (under ``reset_ahead`` the worker may have died doing it)."""
    fns = [make_space_env("box_f32", big_info_every=0, max_steps=1) for _ in range(4)]  # every step ends
    envs = ShmVectorEnv(fns, envs_per_worker=2, on_worker_failure="restart", reset_ahead=reset_ahead)
    envs.reset(seed=0)
    assert envs.step(ZEROS)[3].all()  # every episode ended
    obs, rewards, terminations, truncations, infos = _killed_and_stepped(envs)
    assert not (terminations | truncations).any() and not rewards.any()  # every env's autoreset step
    assert list(infos["_worker_restarted"]) == [False, False, True, True]
    assert envs.get_attr("t") == (0, 0, 0, 0)
    assert envs.step(ZEROS)[3].all()  # then every episode ends again, after one step
    envs.close()


@pytest.mark.timeout(120)
def test_gymnasium_disabled_restart_truncates_and_the_caller_resets_by_mask(no_leaks):
    """DISABLED: the step a worker died in returns its envs' last observation, truncated, flagged;
    the caller resets them by mask, as after any end of episode, and stepping goes on."""
    fns = [make_space_env("box_f32", big_info_every=0, max_steps=1000) for _ in range(4)]
    mode = gym.vector.AutoresetMode.DISABLED
    envs = ShmVectorEnv(fns, autoreset_mode=mode, envs_per_worker=2, on_worker_failure="restart")
    envs.reset(seed=0)
    last = envs.step(ZEROS)[0].copy()
    obs, rewards, terminations, truncations, infos = _killed_and_stepped(envs)
    np.testing.assert_array_equal(obs[2:], last[2:])
    assert truncations[2:].all() and not terminations[2:].any() and not rewards[2:].any()
    assert list(infos["_worker_restarted"]) == [False, False, True, True]
    reset_obs, reset_infos = envs.reset(seed=5, options={"reset_mask": truncations | terminations})
    reference = ShmVectorEnv(fns[:1], autoreset_mode=mode)  # env 2 reset with seed 7, as Gymnasium seeds a list
    np.testing.assert_array_equal(reset_obs[2], reference.reset(seed=7)[0][0])
    reference.close()
    envs.step(ZEROS)
    assert envs.get_attr("t")[2:] == (1, 1)  # stepping goes on from the caller's reset
    envs.close()


@pytest.mark.timeout(120)
def test_a_reset_that_meets_a_dead_worker_is_redone_and_says_so(no_leaks):
    """A reset in flight on a worker that died is redone on the rebuilt one, for all its envs
    (those outside ``reset_mask`` too: their episodes were lost with it), without the seeds, and
    their infos say ``worker_restarted``; on ShmVecEnv, in ``reset_infos``."""
    fns = [make_space_env("box_f32", big_info_every=0, max_steps=1000) for _ in range(4)]
    mode = gym.vector.AutoresetMode.DISABLED
    envs = ShmVectorEnv(fns, autoreset_mode=mode, envs_per_worker=2, on_worker_failure="restart")
    envs.reset(seed=0)
    envs.step(ZEROS)
    os.kill(envs.processes[1].pid, signal.SIGKILL)
    with pytest.warns(RuntimeWarning, match=r"worker 1 \(envs 2-3\) was killed by SIGKILL.*restarting"):
        obs, infos = envs.reset(seed=3, options={"reset_mask": np.array([True, False, True, False])})
    assert list(infos["_worker_restarted"]) == [False, False, True, True]
    assert infos["_reset_seed"][0] and not infos["_reset_seed"][1]  # the others as Gymnasium's partial reset
    assert envs.get_attr("t")[2:] == (0, 0)
    envs.step(ZEROS)  # and stepping goes on
    envs.close()
    venv = ShmVecEnv(fns, envs_per_worker=2, on_worker_failure="restart")
    venv.reset()
    os.kill(venv.processes[1].pid, signal.SIGKILL)
    with pytest.warns(RuntimeWarning, match="restarting"):
        venv.reset()
    assert [info.get("worker_restarted", False) for info in venv.reset_infos] == [False, False, True, True]
    venv.close()


@pytest.mark.transport
@pytest.mark.timeout(120)
@pytest.mark.parametrize("obs_key", ["box_f32", "frame_u8"])  # copied, and lent, observations
def test_restart_policy_rebuilds_a_killed_worker_and_truncates_its_episodes(obs_key, no_leaks):
    fns = [make_space_env(obs_key, big_info_every=0, max_steps=1000) for _ in range(4)]
    venv = ShmVecEnv(fns, envs_per_worker=2, on_worker_failure="restart")
    venv.reset()
    last = venv.step(ZEROS)[0]
    victim = venv.processes[1].pid
    os.kill(victim, signal.SIGKILL)
    with pytest.warns(RuntimeWarning, match=r"worker 1 \(envs 2-3\) was killed by SIGKILL.*restarting"):
        obs, rewards, dones, infos = venv.step(ZEROS)
    assert dones[2] and dones[3]
    for i in (2, 3):
        assert infos[i]["TimeLimit.truncated"] and infos[i]["worker_restarted"]
        # the lost episode ends on the last observation the caller saw
        np.testing.assert_array_equal(infos[i]["terminal_observation"], last[i])
    assert venv.processes[1].pid != victim
    for _ in range(5):
        obs, rewards, dones, infos = venv.step(ZEROS)  # the vec env goes on as before
    assert obs.shape == (4, *venv.observation_space.shape)
    venv.close()


@pytest.mark.transport
@pytest.mark.timeout(120)
def test_restart_policy_ends_episodes_on_piped_observation_leaves(no_leaks):
    """A dynamic observation leaf too large for its arena row comes over the worker's socket; a
    restart must still end the lost episodes on the last observation the caller saw."""
    fns = [make_space_env("dyn_text", big_info_every=0, max_steps=1000) for _ in range(4)]
    venv = ShmVecEnv(fns, envs_per_worker=2, on_worker_failure="restart", info_bytes=8)
    venv.reset()
    last = venv.step(ZEROS)[0]
    assert (venv.segment.obs_blob_len == INFO_PIPED).all(), "every observation must have been piped"
    os.kill(venv.processes[1].pid, signal.SIGKILL)
    with pytest.warns(RuntimeWarning, match=r"worker 1 \(envs 2-3\) was killed by SIGKILL.*restarting"):
        obs, rewards, dones, infos = venv.step(ZEROS)
    for i in (2, 3):
        assert dones[i] and infos[i]["worker_restarted"]
        assert infos[i]["terminal_observation"] == last[i]
    venv.close()


def test_restart_policy_is_validated():
    with pytest.raises(ValueError, match="on_worker_failure"):
        ShmVecEnv([healthy], on_worker_failure="ignore")
