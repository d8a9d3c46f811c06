"""Drop-in behaviour, each checked against the peer class itself (AsyncVectorEnv, SubprocVecEnv).

Errors and their messages, warnings, action dtypes, reset keywords, space checks, and the
cases where the peers fail their users and vecshm must not (env ids registered in ``main()``, a
script without a main guard, a platform without eventfd/memfd).
"""

from __future__ import annotations

import copy
import functools
import subprocess
import sys
import textwrap
import warnings
from contextlib import closing
from typing import Any

import gymnasium as gym
import numpy as np
import psutil
import pytest
from conftest import DYNAMIC_SPACES, assert_tree_equal, process_alive
from dropin_envs import (
    DiscreteObservationEnv,
    EchoEnv,
    FailingEnv,
    LockEnv,
    SleepEnv,
    StrictResetEnv,
    echo,
)
from faulty_envs import LockedFactory
from gymnasium import spaces
from gymnasium.error import NoAsyncCallError
from gymnasium.vector import AsyncVectorEnv
from lockstep import lockstep
from stable_baselines3.common.vec_env import SubprocVecEnv

from vecshm import ShmVecEnv, ShmVectorEnv

ZEROS = np.zeros(2, dtype=np.float32)
PENDING = {
    None: lambda env: None,
    "reset": lambda env: env.reset_async(),
    "step": lambda env: env.step_async(ZEROS),
    "call": lambda env: env.call_async("render_mode"),
}
OPERATIONS = {
    "reset_async": lambda env: env.reset_async(),
    "step_async": lambda env: env.step_async(ZEROS),
    "call_async": lambda env: env.call_async("render_mode"),
    "set_attr": lambda env: env.set_attr("extra", 1),
    "reset_wait": lambda env: env.reset_wait(),
    "step_wait": lambda env: env.step_wait(),
    "call_wait": lambda env: env.call_wait(),
}


def outcome(env: Any, pending: str | None, operation: str) -> BaseException | None:
    """Start ``pending``, try ``operation``, then finish whatever is still pending; the error raised, if any."""
    PENDING[pending](env)
    error = None
    try:
        OPERATIONS[operation](env)
    except Exception as exc:
        error = exc
    for wait in ("reset_wait", "step_wait", "call_wait"):
        try:
            getattr(env, wait)()
        except NoAsyncCallError:
            pass
    return error


@pytest.mark.gymnasium_peer
def test_out_of_order_calls_raise_what_async_vector_env_raises():
    ours, reference = ShmVectorEnv([EchoEnv] * 2), AsyncVectorEnv([EchoEnv] * 2)
    try:
        ours.reset()
        reference.reset()
        for pending in PENDING:
            for operation in OPERATIONS:
                expected, got = outcome(reference, pending, operation), outcome(ours, pending, operation)
                where = f"{operation} while {pending or 'idle'}"
                if expected is None:
                    assert got is None, f"{where}: vecshm raised {got!r}, AsyncVectorEnv did not"
                    continue
                assert isinstance(got, type(expected)), f"{where}: {got!r} is not a {type(expected).__name__}"
                assert str(got) == str(expected), f"{where}: message differs"
    finally:
        ours.close()
        reference.close()


@pytest.mark.gymnasium_peer
@pytest.mark.parametrize("pending", ["reset", "step", "call"])
def test_close_with_a_pending_call_warns_as_async_vector_env(pending, no_leaks):
    messages = []
    for cls in (AsyncVectorEnv, ShmVectorEnv):
        env = cls([EchoEnv] * 2)
        env.reset()
        PENDING[pending](env)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            env.close()
        messages.append([str(w.message) for w in caught])
    assert messages[0] and messages[1] == messages[0]


@pytest.mark.gymnasium_peer
@pytest.mark.parametrize("name", ["reset", "step", "close", "_setattr", "_check_spaces"])
def test_call_refuses_the_names_async_vector_env_refuses(name):
    # a fresh AsyncVectorEnv each time: after an error it has closed the failing worker's pipe
    with ShmVectorEnv([EchoEnv] * 2) as ours, closing(AsyncVectorEnv([EchoEnv] * 2)) as reference:
        with pytest.raises(ValueError) as expected:
            reference.call(name)
        with pytest.raises(ValueError) as got:
            ours.call(name)
        assert str(got.value) == str(expected.value)
        assert ours.call("render_mode") == (None, None)  # a refused name does not break vecshm


@pytest.mark.gymnasium_peer
def test_a_call_result_nothing_can_pickle_is_an_error_naming_the_env():
    """AsyncVectorEnv's worker catches the pickling error and the caller gets it (the last failing
    env's); vecshm raises the same type, naming the env, and the vec env goes on (where a
    SubprocVecEnv worker dies)."""
    with closing(AsyncVectorEnv([LockEnv] * 2)) as reference, pytest.raises(Exception) as expected:
        reference.get_attr("lock")
    with ShmVectorEnv([LockEnv] * 2) as ours:
        with pytest.raises(type(expected.value), match=r"env 1 raised .*during env_method\('lock'\)"):
            ours.get_attr("lock")
        assert ours.get_attr("render_mode") == (None, None)
    with ShmVecEnv([LockEnv] * 2) as venv:
        with pytest.raises(type(expected.value)) as got:
            venv.get_attr("lock", indices=[1])
        assert got.value.env_index == 1
        assert venv.get_attr("render_mode") == [None, None]


@pytest.mark.gymnasium_peer
def test_a_scalar_action_is_a_type_error_in_both_facades():
    with ShmVectorEnv([EchoEnv] * 2) as ours, closing(AsyncVectorEnv([EchoEnv] * 2)) as reference:
        for env in (reference, ours):
            env.reset()
            with pytest.raises(TypeError):
                env.step(np.float64(0.5))
            env.step(ZEROS)  # still usable, as AsyncVectorEnv is
    with ShmVecEnv([EchoEnv] * 2) as venv:
        venv.reset()
        with pytest.raises(TypeError, match="one action per env"):
            venv.step(np.float64(0.5))
        venv.step(ZEROS)


ACTION_BATCHES = {
    "float64": np.array([0.5, -0.25]),
    "float32": np.array([0.5, -0.25], dtype=np.float32),
    "float16": np.array([0.5, -0.25], dtype=np.float16),
    "int32": np.array([1, 0], dtype=np.int32),
}


@pytest.mark.gymnasium_peer
def test_actions_reach_the_env_in_the_callers_dtype_as_in_async_vector_env():
    with ShmVectorEnv([EchoEnv] * 2) as ours, closing(AsyncVectorEnv([EchoEnv] * 2)) as reference:
        ours.reset()
        reference.reset()
        for name, actions in ACTION_BATCHES.items():
            # twice, the second time with other values: a batch like the last one is written
            # without its checks' dispatch, and must still reach the envs as the peer's does
            for batch in (actions, actions[::-1] * 0.5):
                assert_tree_equal(ours.step(batch)[4], reference.step(batch)[4], name)


def test_actions_reach_the_env_in_the_callers_dtype_as_in_subproc_vec_env():
    fns = [echo(action_space=spaces.Discrete(3)), echo(action_space=spaces.Discrete(3))]
    with ShmVecEnv(fns) as ours, closing(SubprocVecEnv(fns)) as reference:
        ours.reset()
        reference.reset()
        for dtype in (np.int64, np.int32, np.uint8):
            for values in ([2, 1], [0, 2]):  # (the second batch repeats the first's shape and dtype)
                actions = np.array(values, dtype=dtype)
                assert_tree_equal(ours.step(actions)[3], list(reference.step(actions)[3]), str(dtype))


def failures_as_logged(cls: type, call: Any, envs_per_worker: dict) -> tuple[list[str], BaseException]:
    """Run ``call`` on a vec env of FailingEnvs: the warnings (tracebacks cut to their last line), and the error."""
    envs = cls([FailingEnv] * 3, **envs_per_worker)
    try:
        envs.reset(seed=[0, 0, 0])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(ValueError) as error:
                call(envs)
    finally:
        envs.close()
    return [str(w.message).rstrip("\x1b[0m").strip().splitlines()[-1] for w in caught], error.value


@pytest.mark.gymnasium_peer
@pytest.mark.parametrize(
    "call",
    [lambda envs: envs.reset(seed=[1, 0, 1]), lambda envs: envs.step([0, 1, 2])],
    ids=["reset", "step"],
)
def test_env_failures_are_logged_and_raised_as_async_vector_env_does(call):
    """Every failing env is logged (its traceback), then the last failure is raised, even when the
    failing envs share a worker process (the worker steps its other envs all the same)."""
    expected, expected_error = failures_as_logged(AsyncVectorEnv, call, {})
    got, got_error = failures_as_logged(ShmVectorEnv, call, {"envs_per_worker": 3})
    # AsyncVectorEnv logs in the order its workers happen to report (its own test says the order is
    # random) and raises the last of them; the set of messages and the closing line are fixed
    assert sorted(got) == sorted(expected) and got[-1] == expected[-1]
    failures = [line for line in expected if line.startswith("ValueError")]
    assert isinstance(got_error, ValueError) and any(str(got_error).count(f.split(": ", 1)[1]) for f in failures)


@pytest.mark.gymnasium_peer
def test_one_element_actions_given_as_scalars_reach_the_env_as_scalars():
    fns = [echo(action_space=spaces.Box(0, 1, (1,), np.float32))] * 3
    with ShmVectorEnv(fns) as ours, closing(AsyncVectorEnv(fns)) as reference:
        ours.reset()
        reference.reset()
        for actions in (np.array([0, 1, 0]), np.array([0.5, 0.25, 1.0]), np.array([[0.5], [0.25], [1.0]], np.float32)):
            assert_tree_equal(ours.step(actions)[4], reference.step(actions)[4], repr(actions))


DYNAMIC_ACTION_SPACES = {
    "text": spaces.Text(5),
    "tuple_text_box": spaces.Tuple((spaces.Text(4), spaces.Box(-1, 1, (2,), np.float32))),
}


@pytest.mark.gymnasium_peer
@pytest.mark.parametrize("key", sorted(DYNAMIC_ACTION_SPACES))
def test_dynamic_action_spaces_reach_the_env_as_in_async_vector_env(key, no_leaks):
    fns = [echo(action_space=DYNAMIC_ACTION_SPACES[key])] * 3
    with (
        ShmVectorEnv(fns, envs_per_worker=2, shared_memory=False) as ours,
        closing(AsyncVectorEnv(fns, shared_memory=False)) as reference,
    ):
        ours.reset()
        reference.reset()
        reference.action_space.seed(5)
        for t in range(5):
            actions = reference.action_space.sample()
            assert_tree_equal(ours.step(actions)[4], reference.step(actions)[4], f"step {t}")


class MirrorEnv(gym.Env):
    """Observes its last action, so every action leaf makes the round trip back through the vec env."""

    def __init__(self, space: spaces.Space) -> None:
        self.observation_space = copy.deepcopy(space)
        self.action_space = copy.deepcopy(space)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        assert action in self.action_space, f"{action!r} is not in {self.action_space}"
        return action, 0.0, False, False, {"action_type": type(action).__name__}


@pytest.mark.gymnasium_peer
@pytest.mark.parametrize("key", sorted(DYNAMIC_SPACES))
def test_every_dynamic_space_as_observation_and_action_matches_async_vector_env(key):
    fns = [functools.partial(MirrorEnv, DYNAMIC_SPACES[key])] * 3
    with (
        ShmVectorEnv(fns, envs_per_worker=2, shared_memory=False) as ours,
        closing(AsyncVectorEnv(fns, shared_memory=False)) as reference,
    ):
        assert ours.action_space == reference.action_space
        assert_tree_equal(ours.reset(seed=3), reference.reset(seed=3), "reset")
        reference.action_space.seed(9)
        for t in range(4):
            actions = reference.action_space.sample()
            assert_tree_equal(ours.step(actions), reference.step(actions), f"step {t}")


def test_a_text_action_space_reaches_the_env_as_in_subproc_vec_env():
    fns = [echo(action_space=spaces.Text(5))] * 2
    with ShmVecEnv(fns) as ours, closing(SubprocVecEnv(fns)) as reference:
        ours.reset()
        reference.reset()
        for actions in (["ab", "c"], np.array(["xyz", "q"])):
            assert_tree_equal(ours.step(actions)[3], list(reference.step(actions)[3]), repr(actions))


@pytest.mark.timeout(120)
def test_step_wait_times_out_on_an_env_that_sleeps_its_float64_action(no_leaks):
    """Gymnasium's own timeout test: with float32 actions the env would raise TypeError instead."""
    envs = ShmVectorEnv([SleepEnv] * 4)
    envs.reset()
    envs.step_async(np.array([0.1, 0.1, 0.3, 0.1]))
    with pytest.raises(TimeoutError):
        envs.step_wait(timeout=0.1)
    envs.close(terminate=True)


@pytest.mark.gymnasium_peer
def test_reset_keywords_are_those_async_vector_env_passes():
    fns = [StrictResetEnv] * 2
    with ShmVectorEnv(fns) as ours, closing(AsyncVectorEnv(fns)) as reference:
        for kwargs in ({}, {"seed": 1}, {"seed": 1, "options": {"level": 2}}):
            assert_tree_equal(ours.reset(**kwargs)[1], reference.reset(**kwargs)[1], str(kwargs))
        mask = np.array([False, True])
        ours.step(ZEROS)
        reference.step(ZEROS)
        assert_tree_equal(
            ours.reset(options={"reset_mask": mask.copy()})[1], reference.reset(options={"reset_mask": mask})[1]
        )


def test_reset_keywords_are_those_subproc_vec_env_passes():
    fns = [EchoEnv] * 2
    with ShmVecEnv(fns) as ours, closing(SubprocVecEnv(fns)) as reference:
        for options in (None, {"level": 2}):
            for venv in (ours, reference):
                venv.set_options(options)
                venv.reset()
            assert_tree_equal(list(ours.reset_infos), list(reference.reset_infos), str(options))


MISMATCHES = {
    "observation bounds": ([EchoEnv, echo(low=-2.0)], "same"),
    "observation shape": ([EchoEnv, echo(shape=(4,))], "different"),
    "action space": ([EchoEnv, echo(action_space=spaces.Box(-2, 2, (), np.float32))], "same"),
    "observation type": ([EchoEnv, DiscreteObservationEnv], "different"),  # a TypeError in AsyncVectorEnv
}


def live_children() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True) if process_alive(child.pid)}


def close_half_built_reference(excinfo: pytest.ExceptionInfo) -> None:
    """AsyncVectorEnv leaves its workers running when its constructor raises (a peer bug): close them."""
    for entry in excinfo.traceback:
        env = entry.frame.f_locals.get("self")
        if isinstance(env, AsyncVectorEnv) and getattr(env, "processes", None):
            env.close_extras(terminate=True)
            env.closed = True


@pytest.mark.gymnasium_peer
@pytest.mark.parametrize("case", sorted(MISMATCHES))
def test_mismatched_spaces_raise_what_async_vector_env_raises(case):
    fns, mode = MISMATCHES[case]
    with pytest.raises((RuntimeError, ValueError, AssertionError, TypeError)) as expected:
        AsyncVectorEnv(fns, observation_mode=mode)
    close_half_built_reference(expected)
    before = live_children()
    with pytest.raises(type(expected.value)) as got:
        ShmVectorEnv(fns, observation_mode=mode)
    assert str(got.value) == str(expected.value)
    assert isinstance(got.value, (RuntimeError, AssertionError))  # what other Gymnasium versions' tests expect
    assert live_children() <= before, "vecshm's workers must be gone after the refusal"


@pytest.mark.gymnasium_peer
def test_differing_bounds_are_accepted_in_different_mode_as_in_async_vector_env():
    fns = [EchoEnv, echo(low=-2.0)]
    with ShmVectorEnv(fns, observation_mode="different") as ours:
        reference = AsyncVectorEnv(fns, observation_mode="different")
        assert ours.observation_space == reference.observation_space
        reference.close()


@pytest.mark.gymnasium_peer
def test_async_vector_env_keywords_in_its_positional_order():
    with pytest.raises(ValueError, match="max_concurrency"):
        ShmVectorEnv([EchoEnv], max_concurrency=0)
    with pytest.raises(ValueError, match="A custom `worker` must accept"):
        ShmVectorEnv([EchoEnv], True, True, None, True, lambda a, b: None)  # the sixth: worker
    with ShmVectorEnv([EchoEnv] * 4, max_concurrency=1) as envs:
        assert envs.plan.num_lanes == 1  # at most one env runs at a time
        envs.reset()


def run_script(tmp_path, source: str, timeout: float = 240) -> subprocess.CompletedProcess:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.slow
def test_the_forkserver_starts_with_vecshm_s_worker_modules_and_the_program_s_own_preloads(tmp_path):
    """Workers fork from a server that has already imported NumPy, Gymnasium and vecshm, instead of
    importing them each (vecshm.parent.processes.start_methods.preload_in_forkserver); a preload the program asked
    for (sqlite3 here) is kept. Seen from the server's memory maps: the modules' shared objects."""
    result = run_script(
        tmp_path,
        """
        import multiprocessing
        import os

        import psutil

        multiprocessing.set_forkserver_preload(["__main__", "sqlite3"])

        def main():
            import gymnasium as gym
            from vecshm import ShmVecEnv

            with ShmVecEnv([lambda: gym.make("CartPole-v1")] * 2) as venv:
                venv.reset()
                server = [p for p in psutil.Process().children() if "forkserver" in " ".join(p.cmdline())]
                loaded = {os.path.basename(m.path).split(".")[0] for m in server[0].memory_maps()}
                print("numpy", "_multiarray_umath" in loaded, "sqlite3", "_sqlite3" in loaded)

        if __name__ == "__main__":
            main()
        """,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "numpy True sqlite3 True" in result.stdout, result.stdout


@pytest.mark.slow
def test_the_forkserver_imports_the_installed_modules_the_main_script_imports_at_its_top_level(tmp_path):
    """Each forkserver worker runs the main script again, and multiprocessing's own preload of
    ``__main__`` never reaches the server (it is not given the script's path), so a script that
    imports PyTorch made every worker import it anew. The server now imports the installed modules
    the script imports at its top level (sqlite3 here, as PyTorch would be), once: not those under
    ``if __name__ == "__main__":`` (cProfile), which workers do not run, nor the script's own
    modules beside it (a helper importing curses), which the server could not be sure to import.
    The workers still see all three, as they did; seen from the server's memory maps."""
    (tmp_path / "helper.py").write_text("import curses  # noqa: F401\n")
    result = run_script(
        tmp_path,
        """
        import os
        import sqlite3

        import gymnasium as gym
        import psutil

        import helper
        from vecshm import ShmVecEnv


        def modules_seen():
            import sys

            return {name: name in sys.modules for name in ("sqlite3", "helper", "cProfile")}


        class Probe(gym.Wrapper):
            def seen(self):
                return modules_seen()


        if __name__ == "__main__":
            import cProfile

            with ShmVecEnv([lambda: Probe(gym.make("CartPole-v1"))] * 2, start_method="forkserver") as venv:
                server = [p for p in psutil.Process().children() if "forkserver" in " ".join(p.cmdline())]
                loaded = {os.path.basename(m.path).split(".")[0] for m in server[0].memory_maps()}
                print("server", {name: name in loaded for name in ("_sqlite3", "_lsprof", "_curses")})
                print("workers", venv.env_method("seen"))
        """,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "server {'_sqlite3': True, '_lsprof': False, '_curses': False}" in result.stdout, result.stdout
    assert "workers [{'sqlite3': True, 'helper': True, 'cProfile': False}" in result.stdout, result.stdout


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ids_registered_in_main_reach_forkserver_and_spawn_workers(tmp_path):
    result = run_script(
        tmp_path,
        """
        import gymnasium as gym
        import numpy as np

        class Counter(gym.Env):
            observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
            action_space = gym.spaces.Discrete(2)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                self.t = 0
                return np.zeros(1, np.float32), {}

            def step(self, action):
                self.t += 1
                return np.full(1, self.t, np.float32), 1.0, False, False, {}

        def main():
            import ale_py  # noqa: F401  (registers the ALE namespace in this process only)
            from vecshm import ShmVecEnv

            gym.register("LocalCounter-v0", entry_point=Counter)
            for method in ("forkserver", "spawn"):
                with ShmVecEnv([lambda: gym.make("LocalCounter-v0")] * 2, start_method=method) as venv:
                    venv.reset()
                    assert venv.step(np.zeros(2, dtype=np.int64))[0].tolist() == [[1.0], [1.0]]
                with ShmVecEnv([lambda: gym.make("ALE/Pong-v5")] * 2, start_method=method) as venv:
                    assert venv.reset().shape == (2, 210, 160, 3)
            print("registry ok")

        if __name__ == "__main__":
            main()
        """,
    )
    assert result.returncode == 0 and "registry ok" in result.stdout, result.stderr[-3000:]
    assert "Overriding environment" not in result.stderr, "an id must not be registered twice in a worker"


@pytest.mark.gymnasium_peer
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_space_class_defined_in_the_main_script_works_with_every_start_method(tmp_path):
    """Env and Space subclasses from ``__main__`` reach a forkserver or spawn worker by value, and
    their spaces must come back to the parent as the same classes. (Both peers fail here: the
    worker's ``__main__`` is the script imported again, whose classes are other objects, so
    SubprocVecEnv cannot pickle the spaces back and AsyncVectorEnv finds them not equal.)"""
    result = run_script(
        tmp_path,
        """
        import gymnasium as gym
        from gymnasium.vector import SyncVectorEnv

        class Card(gym.Space):
            def sample(self, mask=None, probability=None):
                return str(self.np_random.integers(1, 14))

            def contains(self, x):
                return isinstance(x, str)

            def __eq__(self, other):
                return isinstance(other, Card)

        class Note:
            def __init__(self, text):
                self.text = text

        class Misdeal(Exception):
            pass

        class CardEnv(gym.Env):
            def __init__(self):
                self.observation_space, self.action_space = Card(), Card()
                self.note = Note("attr")

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                return "reset", {}

            def step(self, action):
                if action == "joker":
                    raise Misdeal("no jokers")
                return f"step({action})", 0.0, False, False, {"note": Note(action)}

        def run(envs):
            try:
                return [envs.reset(seed=0)[0], envs.step(("2", "3"))[0], type(envs.single_observation_space)]
            finally:
                envs.close()

        def main():
            from vecshm import ShmVecEnv, ShmVectorEnv

            theirs = run(SyncVectorEnv([CardEnv] * 2))
            for method in ("forkserver", "spawn"):
                ours = run(ShmVectorEnv([CardEnv] * 2, shared_memory=False, context=method))
                assert ours == theirs and ours[2] is Card, (ours, theirs)
                with ShmVecEnv([CardEnv] * 2, start_method=method) as venv:
                    assert type(venv.observation_space) is Card
                    assert venv.reset().tolist() == ["reset", "reset"]
                    notes = venv.get_attr("note")  # results of rare calls, and infos, by value too
                    assert all(type(note) is Note and note.text == "attr" for note in notes)
                    infos = venv.step(["2", "3"])[3]
                    assert [(type(info["note"]), info["note"].text) for info in infos] == [(Note, "2"), (Note, "3")]
                    try:
                        venv.step(["2", "joker"])
                    except Misdeal as error:  # the env's own exception type, though it lives in __main__
                        assert error.env_index == 1
                    else:
                        raise AssertionError("Misdeal not raised")
            print("main-script spaces ok")

        if __name__ == "__main__":
            main()
        """,
    )
    assert result.returncode == 0 and "main-script spaces ok" in result.stdout, result.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
@pytest.mark.timeout(120)
def test_a_script_without_a_main_guard_is_told_how_to_fix_it(tmp_path, start_method):
    result = run_script(
        tmp_path,
        f"""
        import gymnasium as gym
        from vecshm import ShmVecEnv

        venv = ShmVecEnv([lambda: gym.make("CartPole-v1")] * 2, start_method={start_method!r})
        venv.close()
        """,
    )
    assert result.returncode != 0
    assert 'if __name__ == "__main__":' in result.stderr, result.stderr[-3000:]
    assert "WorkerDiedError" in result.stderr and "script.py" in result.stderr


UNGUARDED_SCRIPT = """
import hashlib
import sys

import gymnasium as gym
import numpy as np

from vecshm import ShmVectorEnv

VecEnv = ShmVectorEnv if sys.argv[-1] == "vecshm" else gym.vector.AsyncVectorEnv
envs = VecEnv([lambda: gym.make("CartPole-v1")] * 3)
rows = [envs.reset(seed=0)[0]]
for t in range(60):
    rows += envs.step(np.full(3, t % 2))[:4]
print("trajectory", hashlib.sha256(b"".join(np.asarray(row).tobytes() for row in rows)).hexdigest())
if isinstance(envs, ShmVectorEnv):
    print("start method", envs.runtime.start_method)
envs.close()
"""


@pytest.mark.gymnasium_peer
@pytest.mark.slow
@pytest.mark.parametrize("fed", ["file", "stdin"])
@pytest.mark.timeout(120)
def test_scripts_that_run_under_async_vector_env_run_under_shm_vector_env(tmp_path, fed):
    """AsyncVectorEnv(context=None) forks (multiprocessing's default on Linux), so a script without a
    main guard, or one fed through stdin, runs under it; it must run under ShmVectorEnv too, with the
    same trajectory."""
    path = tmp_path / "script.py"
    path.write_text(UNGUARDED_SCRIPT)

    def run(which: str) -> str:
        command = [sys.executable, str(path), which] if fed == "file" else [sys.executable, "-", which]
        result = subprocess.run(
            command,
            input=None if fed == "file" else UNGUARDED_SCRIPT,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=100,
            check=False,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout

    ours, reference = run("vecshm"), run("gymnasium")
    assert ours.splitlines()[0] == reference.splitlines()[0]
    assert "start method fork" in ours


@pytest.mark.gymnasium_peer
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_guarded_script_keeps_forkserver_unless_the_program_chose_a_method(tmp_path):
    result = run_script(
        tmp_path,
        """
        import multiprocessing as mp

        import gymnasium as gym

        from vecshm import ShmVectorEnv

        def method():
            envs = ShmVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
            envs.close()
            return envs.runtime.start_method

        if __name__ == "__main__":
            print("default", method())
            gym.vector.AsyncVectorEnv([lambda: gym.make("CartPole-v1")]).close()  # fixes mp's default, fork
            print("after AsyncVectorEnv", method())
            mp.set_start_method("spawn", force=True)
            print("chosen", method())
        """,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["default forkserver", "after AsyncVectorEnv forkserver", "chosen spawn"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_platform_without_eventfd_or_memfd_takes_the_portable_path(tmp_path):
    result = run_script(
        tmp_path,
        """
        import os

        for name in ("eventfd", "memfd_create", "sched_setaffinity", "sched_getaffinity"):
            if hasattr(os, name):
                delattr(os, name)  # as on macOS

        import gymnasium as gym
        import numpy as np
        from stable_baselines3.common.vec_env import DummyVecEnv

        from vecshm import ShmVecEnv

        def main():
            fns = [lambda: gym.make("CartPole-v1")] * 3
            ours, reference = ShmVecEnv(fns, start_method="fork"), DummyVecEnv(fns)
            assert ours.runtime.transport == "portable"
            ours.seed(0)
            reference.seed(0)
            assert np.array_equal(ours.reset(), reference.reset())
            for t in range(60):
                actions = np.full(3, t % 2)
                a, b = ours.step(actions), reference.step(actions)
                assert all(np.array_equal(x, y) for x, y in zip(a[:3], b[:3]))
            ours.close()
            try:
                ShmVecEnv(fns, cpu_affinity="auto")
            except ValueError as error:
                assert "Linux" in str(error)
            else:
                raise AssertionError("pinning without sched_setaffinity must be refused")
            print("portable ok")

        if __name__ == "__main__":
            main()
        """,
    )
    assert result.returncode == 0 and "portable ok" in result.stdout, result.stderr[-3000:]


@pytest.mark.gymnasium_peer
@pytest.mark.parametrize(
    ("ours", "peer"),
    [(ShmVectorEnv, AsyncVectorEnv), (ShmVecEnv, SubprocVecEnv)],
    ids=["ShmVectorEnv", "ShmVecEnv"],
)
def test_processes_are_live_worker_processes_until_close_as_the_peers(ours, peer):
    """``processes`` (both peers have it): live processes while open, none running after ``close()``.
    vecshm's are its workers, one per ``envs_per_worker`` envs (``close()`` also releases the
    ``Process`` objects, so ask the system about their pids afterwards)."""
    fns = [EchoEnv] * 4
    for cls in (peer, ours):
        kwargs = {} if cls is peer else {"envs_per_worker": 2}
        envs = cls(fns, **kwargs)
        processes = list(envs.processes)
        assert len(processes) == (4 if cls is peer else 2)
        pids = {p.pid for p in processes}
        assert all(p.is_alive() for p in processes) and len(pids) == len(processes)
        envs.close()
        assert not any(process_alive(pid) for pid in pids)


@pytest.mark.gymnasium_peer
def test_repr_is_async_vector_env_s():
    """``repr``/``str``: Gymnasium's ``VectorEnv`` text (the spec's id where there is a spec, as
    ``gym.make_vec`` gives), with the class's own name, as ``AsyncVectorEnv``'s."""
    from vecshm import make_vec

    pairs = [
        (lambda: AsyncVectorEnv([EchoEnv] * 3), lambda: ShmVectorEnv([EchoEnv] * 3)),
        (
            lambda: gym.make_vec("CartPole-v1", 2, vectorization_mode="async"),
            lambda: make_vec("CartPole-v1", 2, vectorization_mode="async"),
        ),
    ]
    for make_peer, make_ours in pairs:
        with closing(make_peer()) as peer, closing(make_ours()) as ours:
            for text in (repr, str):
                assert text(ours) == text(peer).replace("AsyncVectorEnv", "ShmVectorEnv")


@pytest.mark.gymnasium_peer
def test_env_fns_and_worker_are_kept_as_async_vector_env_keeps_them():
    fns = [EchoEnv] * 2
    with ShmVectorEnv(fns) as ours, closing(AsyncVectorEnv(fns)) as reference:
        assert ours.env_fns is fns and reference.env_fns is fns
        assert ours.worker is None and reference.worker is None


@pytest.mark.timeout(120)
def test_factories_that_cannot_be_pickled_run_under_fork_as_subproc_vec_env_runs_them():
    fns = [LockedFactory() for _ in range(3)]
    with closing(ShmVecEnv(fns, start_method="fork")) as ours, closing(SubprocVecEnv(fns, start_method="fork")) as ref:
        lockstep(ours, ref, 60, seed=3, action_space=ours.action_space, reset_infos="ended")


@pytest.mark.gymnasium_peer
@pytest.mark.timeout(120)
def test_factories_that_cannot_be_pickled_run_wherever_async_vector_env_s_default_runs_them():
    """``AsyncVectorEnv(context=None)`` forks where multiprocessing's default is fork: there it takes
    such factories, and ShmVectorEnv must too (elsewhere both refuse them)."""
    fns = [LockedFactory() for _ in range(3)]
    try:
        reference = AsyncVectorEnv(fns)
    except Exception as error:
        with pytest.raises(type(error)):
            ShmVectorEnv(fns)
        return
    with closing(reference), closing(ShmVectorEnv(fns)) as ours:
        assert ours.runtime.start_method == "fork"
        assert_tree_equal(ours.reset(seed=5), reference.reset(seed=5), "reset")
        for t in range(60):
            actions = np.full(3, t % 2)
            assert_tree_equal(ours.step(actions), reference.step(actions), f"step {t}")
