"""``vecshm.check``: each kind of fault it claims to find, planted in more than one form, is found
and named; and real envs (vecshm's, SB3's identity envs, Gymnasium's classic control and Atari) pass.

The check compares vecshm with references it did not write (Gymnasium's ``SyncVectorEnv``, SB3's
``DummyVecEnv``); these tests check its verdicts on envs whose faults are known.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading

import check_envs
import gymnasium as gym
import pytest

import vecshm
from vecshm.check import KINDS, CheckReport
from vecshm.check.__main__ import main

# Two start methods and one transport keep each check to two vecshm runs: fork, which inherits this
# process's state, and forkserver, whose workers start afresh (the default's behaviour).
FAST = {"start_methods": ["fork", "forkserver"], "transports": ["native"], "steps": 40}


def kinds(report: CheckReport) -> set[str]:
    return {finding.kind for finding in report.findings}


def named(report: CheckReport, kind: str) -> str:
    return " ".join(finding.message for finding in report.findings if finding.kind == kind)


def test_a_clean_env_passes_every_run_with_no_finding():
    report = vecshm.check(check_envs.Walk, api="both", **FAST)
    assert report.ok and not report.findings, report
    assert [run.outcome for run in report.runs] == ["same"] * len(report.runs)
    assert report.episodes > 0
    assert report.works_under() == [("fork", "native"), ("forkserver", "native")]


@pytest.mark.parametrize("env", ["ReadsScaleAtStep", "ReadsBonusAtInit"])
def test_state_set_in_this_process_is_named_as_parent_state(monkeypatch, env):
    monkeypatch.setattr(check_envs, "SCALE", 3.0)
    monkeypatch.setattr(check_envs, "BONUS", 0.5)
    report = vecshm.check(getattr(check_envs, env), api="gymnasium", **FAST)
    assert not report.ok
    assert kinds(report) == {"parent-state"}, report
    outcomes = {run.start_method: run.outcome for run in report.runs if run.start_method}
    assert outcomes == {"fork": "same", "forkserver": "differs"}
    message = named(report, "parent-state")
    assert "check_envs.SCALE" in message if env == "ReadsScaleAtStep" else "'bonus'" in message, message
    assert "under forkserver" in message


def test_an_env_that_differs_in_every_worker_process_is_not_identical():
    report = vecshm.check(check_envs.KnowsItsProcess, api="gymnasium", **FAST)
    assert kinds(report) == {"not-identical"}, report
    assert "step 1, env 0, rewards[0]" in named(report, "not-identical")


@pytest.mark.parametrize("env", ["PythonRandom", "GlobalNumpyRandom", "UnseededGenerator"])
def test_an_env_not_deterministic_by_itself_is_named_and_vecshm_is_not_blamed(env):
    report = vecshm.check(getattr(check_envs, env), api="both", **FAST)
    assert kinds(report) == {"nondeterministic"}, report
    assert report.ok  # a warning: no vectorizer could give the same results twice
    assert "two runs in this process" in named(report, "nondeterministic")
    assert {run.outcome for run in report.runs if run.start_method} == {"same structure"}


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ("Float64Observation", "float64, but its space declares float32"),
        ("ListObservation", "list of float64, but its space declares float32"),
    ],
)
def test_observations_the_peers_cast_are_named(env, words):
    """vecshm casts them as SB3's DummyVecEnv and SyncVectorEnv do, so every run is identical to
    those; SubprocVecEnv's dtype would differ, which the finding says."""
    report = vecshm.check(getattr(check_envs, env), api="both", **FAST)
    assert kinds(report) == {"cast"}, report
    assert words in named(report, "cast") and "SubprocVecEnv as float64" in named(report, "cast")
    assert not report.ok


def test_integer_flags_are_named_as_cast_and_explain_sb3_s_infos_that_differ():
    """SB3's DummyVecEnv and SubprocVecEnv compute ``TimeLimit.truncated`` from the env's own
    ``0``; vecshm from the flags it holds as bools: a difference the cast explains."""
    report = vecshm.check(check_envs.IntegerFlags, api="both", **FAST)
    assert kinds(report) == {"cast", "not-identical"}, report
    assert "terminated at step 1 is 0 (int), not a bool" in named(report, "cast")
    blamed = named(report, "not-identical")
    assert blamed.startswith("ShmVecEnv:") and "[cast]" in blamed and "'TimeLimit.truncated'" in blamed


def test_a_reward_the_vectorizers_refuse_is_named_though_the_env_fails_in_this_process():
    report = vecshm.check(check_envs.ArrayReward, api="gymnasium", **FAST)
    assert kinds(report) == {"cast", "fails-in-process"}, report
    assert "not a single number" in named(report, "cast")
    assert "setting an array element with a sequence" in named(report, "fails-in-process")
    assert not report.ok and [run.outcome for run in report.runs] == ["error"]


def test_an_observation_outside_its_space_is_a_warning():
    report = vecshm.check(check_envs.OutsideSpace, api="gymnasium", **FAST)
    assert kinds(report) == {"outside-space"} and report.ok, report


@pytest.mark.parametrize(
    ("factory", "words"),
    [
        (lambda: check_envs.Walk() if LOCK else None, "env_fns[0] -> global 'LOCK' is a _thread.lock"),
        (check_envs.FactoryWithLock(), "env_fns[0] -> attribute 'lock' is a _thread.lock"),
        (functools.partial(lambda lock: check_envs.Walk(), threading.Lock()), "argument 0 is a _thread.lock"),
    ],
    ids=["closure-global", "factory-object", "partial-argument"],
)
def test_a_factory_that_cannot_cross_names_what_it_holds(factory, words):
    report = vecshm.check(factory, api="gymnasium", **FAST)
    assert kinds(report) == {"cannot-cross"}, report
    assert words in named(report, "cannot-cross")
    outcomes = {run.start_method: run.outcome for run in report.runs if run.start_method}
    assert outcomes == {"fork": "same", "forkserver": "error"}  # what only fork can run
    assert report.works_under() == [("fork", "native")]


LOCK = threading.Lock()


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ("LockInInfo", "info['guard'] is a _thread.lock"),
        ("GeneratorInInfo", "info['upcoming'] is a generator"),
        ("LockInSpace", "observation_space -> attribute 'lock' is a _thread.lock"),
    ],
)
def test_infos_and_spaces_that_cannot_cross_are_named(env, words):
    report = vecshm.check(getattr(check_envs, env), api="gymnasium", **FAST)
    assert kinds(report) == {"cannot-cross"}, report
    assert words in named(report, "cannot-cross")
    assert all(run.outcome == "error" for run in report.runs if run.start_method)


def test_an_env_whose_episodes_do_not_end_is_warned_of():
    report = vecshm.check(functools.partial(check_envs.Walk, length=10_000), api="gymnasium", **FAST)
    assert kinds(report) == {"no-episode-end"} and report.ok, report


def sb3_identity_envs():
    envs = pytest.importorskip("stable_baselines3.common.envs")
    names = ["IdentityEnv", "IdentityEnvBox", "IdentityEnvMultiBinary", "IdentityEnvMultiDiscrete"]
    names += ["FakeImageEnv", "SimpleMultiObsEnv", "BitFlippingEnv"]
    return [getattr(envs, name) for name in names]


REAL_ENVS = ["CartPole-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1", "Acrobot-v1"]
REAL_ENVS += ["vecshm/Frames-v0", "vecshm/DictImage-v0", "vecshm/VectorObs-v0"]


@pytest.mark.parametrize("env", REAL_ENVS)
def test_real_envs_pass(env):
    report = vecshm.check(env, api="both", start_methods=["forkserver"], transports=["native"], steps=250)
    assert report.ok and kinds(report) <= {"no-episode-end"}, report


def test_sb3_identity_envs_pass():
    """Four of them reset to a sample of an unseeded space: named nondeterministic, and passed."""
    for env in sb3_identity_envs():
        report = vecshm.check(env, api="both", start_methods=["forkserver"], transports=["native"], steps=250)
        assert report.ok and kinds(report) <= {"nondeterministic"}, report


@pytest.mark.slow
@pytest.mark.parametrize("env", ["ALE/Pong-v5", "ALE/Breakout-v5"])
def test_atari_envs_pass(env):
    pytest.importorskip("ale_py")
    report = vecshm.check(env, api="both", start_methods=["forkserver"], transports=["native"], steps=120)
    assert report.ok and kinds(report) <= {"no-episode-end"}, report


def test_the_command_exits_1_on_a_fault_and_prints_json(capsys, monkeypatch):
    argv = ["check_envs:Float64Observation", "--steps", "20", "--start-methods", "fork", "--transports", "native"]
    assert main([*argv, "--json", "-q"]) == 1
    found = json.loads(capsys.readouterr().out)
    assert found["ok"] is False and {f["kind"] for f in found["findings"]} == {"cast"}
    assert set(found["findings"][0]) >= {"kind", "message", "env", "fails"}


def test_the_command_names_an_env_that_fails_without_vecshm(capsys):
    assert main(["NoSuchEnv-v0", "-q"]) == 1
    assert "fails in this process, without vecshm" in capsys.readouterr().err


@pytest.mark.slow
def test_python_m_vecshm_check_on_cartpole_exits_0_with_every_start_method_and_transport():
    done = subprocess.run(
        [sys.executable, "-m", "vecshm.check", "CartPole-v1"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Safe to switch." in done.stdout
    assert done.stdout.count(" same") == 1 + 1 + 3 * 2  # again in-process; SB3's face; 3 start methods x 2


def test_every_kind_is_documented():
    with open("docs/check.md") as page:
        text = page.read()
    assert all(f"`{kind}`" in text for kind in KINDS)


def test_gymnasium_ids_of_packages_that_register_on_import_are_found():
    from vecshm.user_env import make_named_env

    pytest.importorskip("ale_py")
    env = make_named_env("ALE/Pong-v5", {})
    assert isinstance(env, gym.Env)
    env.close()
