"""Random sequences of public calls give what the peers give, call for call.

Each case draws one sequence of calls (resets with and without seeds, partial resets, steps, the
``*_async``/``*_wait`` halves in any order, attribute reads and writes, ``call``, ``render``,
out-of-order and malformed calls, ``close``) and runs it on vecshm's facade and on its peer: every
call must return the same values bit for bit, or raise an exception of the peer's type (vecshm's
may carry more detail) with the same warnings. Such sequences found a bug that the
scenario-by-scenario tests missed: a partial reset before an env's first reset.

A sequence ends at the first error raised inside an env or by a malformed action: from there the
peers are not in a state worth comparing (``AsyncVectorEnv`` has sent the actions to some workers
before it raises, and shuts down a worker whose env raised). Errors raised in the caller before
anything is sent (a call out of order, a malformed seed, mask or ``set_attr`` list) do not end it.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest import (
    ACTION_SPACES,
    as_dummy_rewards,
    assert_tree_equal,
    make_space_env,
    sample_actions,
    shared_memory_for,
)
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.vector import AsyncVectorEnv, AutoresetMode
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from vecshm import ShmVecEnv, ShmVectorEnv

N_ENVS = 3
CALLS = 30
# errors raised by the facade itself, before any worker runs: the sequence goes on after them
STATE_ERRORS = (AlreadyPendingCallError, NoAsyncCallError, ClosedEnvironmentError)
REFUSED_BEFORE_SENDING = ("bad_mask", "bad_seed", "set_attr")  # arguments checked in the caller
ENDINGS = ("close", "call_missing", "malformed_action")  # drawn rarely: they end what can be compared


def env_fns(obs_key: str, act_key: str, monitor: bool = False) -> list[Callable[[], gym.Env]]:
    """Envs whose observations are reproducible without a seeded reset too (seeded spaces)."""
    fns = [make_space_env(obs_key, act_key, max_steps=5, tag=i, space_seed=100 + i) for i in range(N_ENVS)]
    return [(lambda fn=fn: Monitor(fn())) for fn in fns] if monitor else fns


def without_wall_clock(value: Any) -> Any:
    """``value`` with Monitor's episode time ``t`` zeroed: wall-clock, the one field that may differ."""
    if isinstance(value, dict):
        return {k: 0.0 if k == "t" and isinstance(v, float) else without_wall_clock(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(without_wall_clock(v) for v in value)
    return value


Calls = list[tuple[str, Any]]  # (name, the values drawn for it): the same sequence for both classes


def outcome(call: Callable[[], Any]) -> tuple[tuple[Any, ...], list[str]]:
    """``("ok", value)`` or ``("error", type, message)``, and the first line of each warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result: tuple[Any, ...] = ("ok", copy.deepcopy(call()))  # copy=False views change later
        except Exception as error:  # noqa: BLE001 - what was raised is the result under test
            result = ("error", type(error), str(error))
    lines = sorted(str(w.message).splitlines()[0] for w in caught)
    return result, [line.replace("ShmVectorEnv", "AsyncVectorEnv") for line in lines]


def play(venv: Any, calls: Calls, perform: dict[str, Callable[[Any, Any], Any]]) -> list[tuple[str, tuple, list[str]]]:
    """Run ``calls`` on ``venv`` until an error other than a state error; each call's outcome."""
    log = []
    try:
        for name, value in calls:
            result, caught = outcome(lambda name=name, value=value: perform[name](venv, value))
            log.append((name, result, caught))
            if result[0] == "error" and not issubclass(result[1], STATE_ERRORS) and name not in REFUSED_BEFORE_SENDING:
                break
    finally:
        venv.close(terminate=True) if isinstance(venv, (AsyncVectorEnv, ShmVectorEnv)) else venv.close()
    return log


def assert_same_outcomes(ours: list, theirs: list, malformed: tuple[str, ...] = ()) -> None:
    """Call for call: equal values, or an error of the peer's type whose message contains the
    peer's (for a malformed action vecshm raises its own ``ValueError``: only that is checked)."""
    for k, ((name, got, got_warnings), (_, want, want_warnings)) in enumerate(zip(ours, theirs)):
        where = f"call {k} ({name}) after {[n for n, *_ in theirs[:k]]}"
        assert got[0] == want[0], f"{where}: {got[:3]} != {want[:3]}"
        assert got_warnings == want_warnings, where
        if want[0] == "error":
            if name in malformed and not issubclass(want[1], STATE_ERRORS):
                assert issubclass(got[1], ValueError), f"{where}: {got[1]}"
            else:
                assert issubclass(got[1], want[1]), f"{where}: {got[1]} is not a {want[1]}"
                assert want[2] in got[2].replace("ShmVectorEnv", "AsyncVectorEnv"), where
        else:
            assert_tree_equal(without_wall_clock(got[1]), without_wall_clock(want[1]), where)
    assert len(ours) == len(theirs), f"{[n for n, *_ in ours]} != {[n for n, *_ in theirs]}"


# -- the Gymnasium facade against AsyncVectorEnv --------------------------------------------------------


GYM_CALLS: dict[str, Callable[[Any, Any], Any]] = {
    "reset": lambda e, seed: e.reset(seed=seed),
    "reset_options": lambda e, level: e.reset(options={"level": level}),
    "reset_mask": lambda e, mask: e.reset(options={"reset_mask": mask.copy()}),
    "bad_mask": lambda e, mask: e.reset(options={"reset_mask": mask}),
    "bad_seed": lambda e, _: e.reset(seed=[1, 2]),
    "reset_async": lambda e, seed: e.reset_async(seed=seed),
    "reset_wait": lambda e, _: e.reset_wait(),
    "step": lambda e, actions: e.step(actions),
    "step_async": lambda e, actions: e.step_async(actions),
    "step_wait": lambda e, _: e.step_wait(),
    "malformed_action": lambda e, _: e.step(np.zeros(7)),
    "call": lambda e, name: e.call(name),
    "call_with_args": lambda e, _: e.call("get_wrapper_attr", "tag"),
    "call_missing": lambda e, _: e.call("missing"),
    "get_attr": lambda e, _: e.get_attr("tag"),
    "set_attr": lambda e, values: e.set_attr("tag", values),
    "render": lambda e, _: e.render(),
    "close": lambda e, _: e.close(),
}


def gymnasium_calls(seed: int, action_space: gym.Space) -> Calls:
    """A seeded reset, then ``CALLS`` calls drawn from everything ``AsyncVectorEnv`` offers."""
    rng = np.random.default_rng(seed)

    def value(name: str) -> Any:
        pick = int(rng.integers(3))
        return {
            "reset": [None, 5, [1, 2, 3]][pick],
            "reset_options": pick,
            "reset_mask": rng.random(N_ENVS) < 0.5,
            "bad_mask": [np.zeros(N_ENVS, bool), np.ones(2, bool), np.ones(N_ENVS, int)][pick],
            "reset_async": [None, 7, None][pick],
            "step": sample_actions(action_space, N_ENVS, rng),
            "step_async": sample_actions(action_space, N_ENVS, rng),
            "call": ["render", "tag", "t"][pick],
            "set_attr": [9, [1, 2, 3], [1, 2]][pick],
        }.get(name)

    # the envs' own spaces are seeded, so a first reset without a seed, or a partial one (an env
    # that has no observation yet), is reproducible too
    first = [("reset", int(rng.integers(100))), ("reset", None), ("reset_mask", rng.random(N_ENVS) < 0.5)]
    calls: Calls = [first[seed % 3]]
    while len(calls) < CALLS:
        name = str(rng.choice(list(GYM_CALLS)))
        if name not in ENDINGS or rng.random() < 0.15:
            calls.append((name, value(name)))
    return calls


GYM_CASES = [
    (seed, obs_key, act_key, mode)
    for seed, (obs_key, act_key, mode) in enumerate(
        [
            ("box_f32", "discrete", AutoresetMode.NEXT_STEP),
            ("dict", "box", AutoresetMode.SAME_STEP),
            ("frame_u8", "multidiscrete", AutoresetMode.DISABLED),
            ("tuple", "discrete", AutoresetMode.NEXT_STEP),
            ("nested", "box", AutoresetMode.SAME_STEP),
            ("discrete", "multidiscrete", AutoresetMode.DISABLED),
            ("dyn_text", "discrete", AutoresetMode.NEXT_STEP),
            ("dyn_sequence", "box", AutoresetMode.SAME_STEP),
            ("dyn_oneof", "discrete", AutoresetMode.DISABLED),
            ("multibinary", "box", AutoresetMode.NEXT_STEP),
        ]
    )
]


@pytest.mark.gymnasium_peer
@pytest.mark.parametrize("seed, obs_key, act_key, mode", GYM_CASES, ids=[f"{c[1]}-{c[3].value}" for c in GYM_CASES])
def test_random_call_sequences_match_async_vector_env(seed, obs_key, act_key, mode, no_leaks):
    options = {"autoreset_mode": mode, "shared_memory": shared_memory_for(obs_key), "copy": bool(seed % 2)}
    calls = gymnasium_calls(seed, ACTION_SPACES[act_key])
    theirs = play(AsyncVectorEnv(env_fns(obs_key, act_key), **options), calls, GYM_CALLS)
    ours = play(ShmVectorEnv(env_fns(obs_key, act_key), envs_per_worker=1 + seed % 3, **options), calls, GYM_CALLS)
    assert_same_outcomes(ours, theirs, malformed=("malformed_action",))


# -- the SB3 facade against DummyVecEnv -----------------------------------------------------------------


def dummy_rewards(step: tuple) -> tuple:
    """A step's results with the rewards as DummyVecEnv gives them (``as_dummy_rewards``)."""
    obs, rewards, dones, infos = step
    return obs, as_dummy_rewards(rewards), dones, infos


SB3_CALLS: dict[str, Callable[[Any, Any], Any]] = {
    "reset": lambda e, _: e.reset(),
    "step": lambda e, actions: dummy_rewards(e.step(actions)),
    "step_async_wait": lambda e, actions: dummy_rewards((e.step_async(actions), e.step_wait())[1]),
    "seed": lambda e, seed: e.seed(seed),
    "set_options": lambda e, options: e.set_options(options),
    "env_method": lambda e, indices: e.env_method("get_wrapper_attr", "tag", indices=indices),
    "get_attr": lambda e, drawn: e.get_attr(drawn[0], indices=drawn[1]),
    "set_attr": lambda e, drawn: e.set_attr("tag", drawn[0], indices=drawn[1]),
    "env_is_wrapped": lambda e, drawn: e.env_is_wrapped(drawn[0], indices=drawn[1]),
    "get_images": lambda e, _: e.get_images(),
}


def sb3_calls(seed: int, action_space: gym.Space) -> Calls:
    """A reset, then ``CALLS`` calls that SB3's classes all answer (SubprocVecEnv hangs on an
    out-of-order one, so there are none here)."""
    rng = np.random.default_rng(seed)

    def value(name: str) -> Any:
        pick, indices = int(rng.integers(2)), [None, 1, [0, 2], [2, 2]][int(rng.integers(4))]
        return {
            "step": sample_actions(action_space, N_ENVS, rng),
            "step_async_wait": sample_actions(action_space, N_ENVS, rng),
            "seed": int(rng.integers(10)),
            "set_options": [{"level": 1}, [{"level": 2}, None, {}]][pick],
            "env_method": indices,
            "get_attr": (["tag", "render_mode", "t"][int(rng.integers(3))], indices),
            "set_attr": (int(rng.integers(9)), indices),
            "env_is_wrapped": ([Monitor, gym.wrappers.TimeLimit][pick], indices),
        }.get(name)

    calls: Calls = [("reset", None)]
    while len(calls) < CALLS:
        name = str(rng.choice(list(SB3_CALLS)))
        calls.append((name, value(name)))
    return calls


SB3_CASES = [
    (seed, obs_key, act_key)
    for seed, (obs_key, act_key) in enumerate(
        [
            ("box_f32", "discrete"),
            ("dict", "box"),
            ("frame_u8", "multidiscrete"),
            ("tuple", "discrete"),
            ("box_i16", "box"),
            ("dict_img", "multidiscrete"),
        ]
    )
]


@pytest.mark.parametrize("seed, obs_key, act_key", SB3_CASES, ids=[f"{c[1]}-{c[2]}" for c in SB3_CASES])
def test_random_call_sequences_match_dummy_vec_env(seed, obs_key, act_key, no_leaks):
    calls = sb3_calls(seed, ACTION_SPACES[act_key])
    monitor = bool(seed % 2)
    theirs = play(DummyVecEnv(env_fns(obs_key, act_key, monitor)), calls, SB3_CALLS)
    ours = play(ShmVecEnv(env_fns(obs_key, act_key, monitor), envs_per_worker=1 + seed % 3), calls, SB3_CALLS)
    assert_same_outcomes(ours, theirs)
