"""``vecshm.check``: the user's env run under vecshm and under the in-process reference, with the
same seeds and actions, and every way it could differ named.

The order matters. The env is first run twice in this process: if those two runs differ, the env
is not deterministic by itself, no difference in values under vecshm can be blamed on vecshm, and
the vecshm runs are compared on structure only (dtypes, shapes, types). Then vecshm runs it under each start method and
transport, each compared bit for bit with a fresh in-process run, and SB3's face against SB3's
``DummyVecEnv``. Where a run differs or fails, the start methods tell whose it is: identical under
fork but not in a worker started afresh means state this process set up and a fresh interpreter
lacks; the env's attributes and module values, asked in the worker and here, name it.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import gymnasium as gym
from gymnasium import logger
from gymnasium.vector import SyncVectorEnv

from vecshm.check.compare import first_difference, shown
from vecshm.check.crossing import crossing_failure
from vecshm.check.findings import CheckReport, Finding, Outcome, RunOutcome
from vecshm.check.lockstep import Actions, StepDifference, action_stream, step_sb3, step_vector
from vecshm.check.watch import Watched, watched
from vecshm.parent.processes.start_methods import default_start_method
from vecshm.shared.transport import ENV_VAR as TRANSPORT_VAR
from vecshm.shared.transport import native_available
from vecshm.user_env import EnvSource, env_factories

__all__ = ["check"]

APIS = ("gymnasium", "sb3", "both")
_START_METHOD_ORDER = ("fork", "forkserver", "spawn")


def check(
    env: EnvSource,
    *,
    num_envs: int = 2,
    steps: int = 1000,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    api: str = "both",
    start_methods: Sequence[str] | None = None,
    transports: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> CheckReport:
    """Run ``env`` under vecshm and in this process alike, and report every difference.

    - ``env``: a Gymnasium id, ``"module:callable"`` or ``"file.py:callable"`` (built with
      ``env_kwargs``), one factory, or a list of factories (then ``num_envs`` is its length).
    - ``steps`` action batches, drawn from the action space seeded with ``seed``; the envs are reset
      with ``seed`` too. Use enough steps for episodes to end: the automatic resets are compared then.
    - ``api``: ``"gymnasium"`` (``ShmVectorEnv`` against ``SyncVectorEnv``), ``"sb3"`` (``ShmVecEnv``
      against SB3's ``DummyVecEnv``) or ``"both"``.
    - ``start_methods`` and ``transports``: those to run under (default: every start method this
      platform has; ``"native"`` where available and ``"portable"``).
    - ``progress``: called with a line as each run starts.

    Returns a :class:`~vecshm.check.findings.CheckReport`: ``report.ok`` is whether the env is safe
    to switch, ``print(report)`` shows what was found, ``report.to_dict()`` gives it for JSON.

    >>> import vecshm
    >>> report = vecshm.check("CartPole-v1", steps=200)  # doctest: +SKIP
    >>> report.ok  # doctest: +SKIP
    True
    """
    if api not in APIS:
        raise ValueError(f"api must be one of {APIS}, got {api!r}")
    started = perf_counter()
    factories, name = env_factories(env, num_envs, env_kwargs)
    say = progress or (lambda line: None)
    methods = _start_methods(start_methods)
    kinds = _transports(transports)
    findings = _factories_that_cannot_cross(factories)
    space_findings, actions = _spaces(factories[0], len(factories), steps, seed)
    findings += space_findings

    say("this process, twice")
    check_run = _Run(factories, actions, seed)
    reference, notes, episodes, differs_alone, failure = check_run.in_process_twice()
    findings += notes
    if failure is not None:
        explained = " The [cast] findings say why." if any(f.kind == "cast" for f in notes) else ""
        findings.append(
            Finding(
                "fails-in-process",
                f"the env raises in this process, under Gymnasium's SyncVectorEnv, without vecshm: {failure}. "
                f"vecshm's runs were not started: there is nothing to compare them with.{explained}",
            )
        )
        runs = [RunOutcome("this process (SyncVectorEnv)", None, None, "error", failure)]
        return _report(name, factories, steps, seed, 0, runs, findings, started, api, methods, kinds)
    if differs_alone is not None:
        findings.append(
            Finding(
                "nondeterministic",
                "two runs in this process with the same seeds and actions differ "
                f"{differs_alone.describe('in the first run', 'in the second')}. The env draws randomness "
                "it was not seeded with (Python's random, np.random's global state, a space's sample(), a "
                "generator made without the reset's seed) or reads the clock. Its results cannot be the same "
                "from run to run under any vectorizer, so vecshm's runs are compared on dtypes, shapes and "
                "types only. Draw from self.np_random, which reset(seed=...) seeds",
                env=differs_alone.env,
                step=differs_alone.step,
            )
        )
    again: Outcome = "same" if differs_alone is None else "differs"
    runs = [RunOutcome("this process, again (SyncVectorEnv)", None, None, again)]
    plans = check_run.plans(api, methods, kinds)
    for k, plan in enumerate(plans, start=1):
        say(f"[{k}/{len(plans)}] {plan.name}")
        runs.append(check_run.under_vecshm(plan, reference, values=differs_alone is None))
    crossed = not any(f.kind == "cannot-cross" for f in findings)
    findings += _blame(runs, check_run.state_differences, crossed, cast=any(f.kind == "cast" for f in findings))
    if episodes == 0:
        findings.append(
            Finding(
                "no-episode-end",
                f"no episode ended in {steps} steps, so the automatic resets (final observations, reset infos) "
                "were not compared: raise the number of steps",
            )
        )
    return _report(name, factories, steps, seed, episodes, runs, findings, started, api, methods, kinds)


def _report(
    name: str,
    factories: list[Callable[[], gym.Env]],
    steps: int,
    seed: int,
    episodes: int,
    runs: list[RunOutcome],
    findings: list[Finding],
    started: float,
    api: str,
    methods: Sequence[str],
    transports: Sequence[str],
) -> CheckReport:
    settings = {"api": api, "start_methods": list(methods), "transports": list(transports)}
    seconds = perf_counter() - started
    return CheckReport(name, len(factories), steps, seed, episodes, tuple(runs), tuple(findings), seconds, settings)


def _start_methods(wanted: Sequence[str] | None) -> tuple[str, ...]:
    available = multiprocessing.get_all_start_methods()
    if wanted is None:
        return tuple(m for m in _START_METHOD_ORDER if m in available)
    unknown = [m for m in wanted if m not in available]
    if unknown:
        raise ValueError(f"start methods {unknown} are not available here: {available}")
    return tuple(wanted)


def _transports(wanted: Sequence[str] | None) -> tuple[str, ...]:
    available = ("native", "portable") if native_available() else ("portable",)
    if wanted is None:
        return available
    unknown = [t for t in wanted if t not in available]
    if unknown:
        raise ValueError(f"transports {unknown} are not available here: {available}")
    return tuple(wanted)


def _factories_that_cannot_cross(factories: list[Callable[[], gym.Env]]) -> list[Finding]:
    findings, seen = [], set()
    for i, factory in enumerate(factories):
        if id(factory) in seen:
            continue
        seen.add(id(factory))
        failure = crossing_failure(factory, f"env_fns[{i}]")
        if failure is not None:
            message = (
                f"{failure}. A factory reaches a forkserver or spawn worker pickled: create locks, open files, "
                "sockets and live envs inside it (under fork it is inherited, so only fork can run it)"
            )
            findings.append(Finding("cannot-cross", message, env=i))
    return findings


def _spaces(factory: Callable[[], gym.Env], num_envs: int, steps: int, seed: int) -> tuple[list[Finding], Actions]:
    """The spaces of one env built here, checked for pickling (a worker sends them at start-up);
    and the run's action stream, drawn from its action space."""
    env = factory()
    try:
        findings = []
        for label, space in (("observation_space", env.observation_space), ("action_space", env.action_space)):
            failure = crossing_failure(space, label)
            if failure is not None:
                findings.append(Finding("cannot-cross", f"{failure}. A worker sends its env's spaces at start-up"))
        return findings, action_stream(env.action_space, num_envs, steps, seed)
    finally:
        env.close()


@dataclass(frozen=True)
class _Plan:
    """One vecshm run: the face, its start method and transport, and its in-process reference."""

    name: str
    api: str
    start_method: str
    transport: str


@contextlib.contextmanager
def _transport(kind: str) -> Iterator[None]:
    """vecshm's transport for the vec envs built inside (it is chosen once, when one is built)."""
    before = os.environ.get(TRANSPORT_VAR)
    os.environ[TRANSPORT_VAR] = kind
    try:
        yield
    finally:
        if before is None:
            del os.environ[TRANSPORT_VAR]
        else:
            os.environ[TRANSPORT_VAR] = before


@contextlib.contextmanager
def _peer_log_silenced() -> Iterator[None]:
    """No Gymnasium log inside: ``ShmVectorEnv`` logs an env's failure there as ``AsyncVectorEnv``
    does, and a check reports the failure in its table instead."""
    before = logger.min_level
    logger.min_level = logger.ERROR + 1
    try:
        yield
    finally:
        logger.min_level = before


class _Run:
    """The runs of one check, which share its factories, actions, seed and this process's env state."""

    def __init__(self, factories: list[Callable[[], gym.Env]], actions: Actions, seed: int) -> None:
        self.factories = factories
        self.actions = actions
        self.seed = seed
        self.parent_state: list[dict[str, Any]] = []
        self.unstable: set[str] = set()  # state that differs between two envs built here: not compared
        self.state_differences: dict[str, list[str]] = {}  # by run name

    def fns(self, inspect: bool) -> list[Callable[[], gym.Env]]:
        return [functools.partial(watched, fn, i, inspect) for i, fn in enumerate(self.factories)]

    def in_process_twice(self) -> tuple[Callable[[], Any], list[Finding], int, StepDifference | None, str | None]:
        """The reference run, watched, against a second in-process run: the reference's factory,
        what watching found, the episodes that ended, where the two runs differ (None: nowhere),
        and the error the env raised here, if it did."""
        first, second = SyncVectorEnv(self.fns(inspect=True)), SyncVectorEnv(self.fns(inspect=False))
        differs, episodes, failure = None, 0, None
        try:
            self.parent_state = [env.vecshm_check_state() for env in first.envs]  # type: ignore[attr-defined]
            again = [env.vecshm_check_state() for env in second.envs]  # type: ignore[attr-defined]
            for mine, other in zip(self.parent_state, again):
                self.unstable |= {key for key in mine if first_difference(mine[key], other.get(key)) is not None}
            differs, episodes = step_vector(first, second, self.actions, self.seed)
        except Exception as exc:
            failure = f"{type(exc).__name__}: {exc}"
        finally:
            first.close()
            second.close()
        notes: dict[tuple[str, str], Finding] = {}
        for env in first.envs:
            assert isinstance(env, Watched)
            for key, finding in env.notes.items():
                notes.setdefault(key, finding)
        reference = functools.partial(SyncVectorEnv, self.factories)
        return reference, list(notes.values()), episodes, differs, failure

    def plans(self, api: str, methods: Sequence[str], transports: Sequence[str]) -> list[_Plan]:
        """SB3's face under its default start method, then the matrix of start methods and
        transports on Gymnasium's (SB3's where ``api`` is ``"sb3"``)."""
        found = []
        if api in ("sb3", "both"):
            method = default_start_method()
            found.append(_Plan(f"ShmVecEnv, {method}, {transports[0]}", "sb3", method, transports[0]))
        matrix_api = "sb3" if api == "sb3" else "gymnasium"
        face = "ShmVecEnv" if matrix_api == "sb3" else "ShmVectorEnv"
        for method in methods:
            for transport in transports:
                plan = _Plan(f"{face}, {method}, {transport}", matrix_api, method, transport)
                if plan.name not in {p.name for p in found}:
                    found.append(plan)
        return found

    def under_vecshm(self, plan: _Plan, reference: Callable[[], Any], values: bool) -> RunOutcome:
        """``plan``'s vecshm run against a fresh reference (with ``values`` false, on structure only)."""
        started = perf_counter()
        try:
            with _peer_log_silenced():
                differs = self._compared(plan, reference, values)
        except Exception as exc:
            text = f"{type(exc).__name__}: {str(exc).split(chr(10) * 2)[0].strip()}"  # (not the worker's traceback)
            return RunOutcome(plan.name, plan.start_method, plan.transport, "error", text, perf_counter() - started)
        outcome: Outcome = "differs" if differs is not None else ("same" if values else "same structure")
        detail = differs.describe() if differs is not None else ""
        return RunOutcome(plan.name, plan.start_method, plan.transport, outcome, detail, perf_counter() - started)

    def _compared(self, plan: _Plan, reference: Callable[[], Any], values: bool) -> StepDifference | None:
        """Build ``plan``'s vec env, note its workers' env state, and step it beside its reference."""
        from vecshm import ShmVecEnv, ShmVectorEnv

        ours: Any = None
        peer: Any = None
        try:
            with _transport(plan.transport):
                if plan.api == "sb3":
                    ours = ShmVecEnv(self.fns(inspect=False), start_method=plan.start_method)
                else:
                    ours = ShmVectorEnv(self.fns(inspect=False), context=plan.start_method)
            if plan.api == "sb3":
                self._compare_state(plan.name, plan.start_method, list(ours.env_method("vecshm_check_state")))
                peer = _sb3_reference(self.factories)
                return step_sb3(ours, peer, self.actions, self.seed, values)[0]
            self._compare_state(plan.name, plan.start_method, list(ours.call("vecshm_check_state")))
            peer = reference()
            return step_vector(ours, peer, self.actions, self.seed, values)[0]
        finally:
            for venv in (ours, peer):
                if venv is not None:
                    with contextlib.suppress(Exception):
                        venv.close()

    def _compare_state(self, name: str, method: str, states: list[dict[str, Any]]) -> None:
        """Note what a worker's envs hold that differs from what the same envs hold here."""
        found = []
        for i, (here, there) in enumerate(zip(self.parent_state, states)):
            for key in sorted(set(here) | set(there)):
                if key in self.unstable or key not in here:
                    continue
                if key not in there:
                    found.append(f"env {i}'s {key} is {shown(here[key], 60)} here and missing in a {method} worker")
                elif first_difference(there[key], here[key]) is not None:
                    found.append(
                        f"env {i}'s {key} is {shown(here[key], 60)} here, {shown(there[key], 60)} in a {method} worker"
                    )
        self.state_differences[name] = found


def _sb3_reference(factories: list[Callable[[], gym.Env]]) -> Any:
    """SB3's own ``DummyVecEnv`` where SB3 is installed, else vecshm's, which follows it."""
    reference: Any
    try:
        from stable_baselines3.common.vec_env import DummyVecEnv as reference
    except ImportError:
        from vecshm.vec_env.dummy import DummyVecEnv as reference
    return reference(factories)


def _blame(runs: list[RunOutcome], state_differences: dict[str, list[str]], crossed: bool, cast: bool) -> list[Finding]:
    """The findings that explain the vecshm runs that differ or fail, a face at a time.

    Identical under fork but not in a worker started afresh: state this process set up. Different
    under fork too, or with no fork run to tell: the values the peers cast (``cast``), the env's
    dependence on its process, or vecshm. Errors are left to the ``cannot-cross`` findings where
    something could not be pickled (``crossed`` false).
    """
    findings = []
    faces = dict.fromkeys(r.name.split(",")[0] for r in runs if r.start_method is not None)
    for face in faces:
        face_runs = [r for r in runs if r.start_method is not None and r.name.split(",")[0] == face]
        bad = [r for r in face_runs if r.outcome == "differs" or (r.outcome == "error" and crossed)]
        if not bad:
            continue
        first = bad[0]
        states = sorted({line for r in bad for line in state_differences.get(r.name, [])})
        named = f" What differs between the processes: {'; '.join(states[:5])}." if states else ""
        forked_fine = any(r.start_method == "fork" and r.outcome in ("same", "same structure") for r in face_runs)
        if forked_fine and all(r.start_method != "fork" for r in bad):
            methods = sorted({r.start_method for r in bad if r.start_method})
            what = "differs" if first.outcome == "differs" else "fails"
            message = (
                f"{face}: under {' and '.join(methods)} the env {what}, under fork it does not: it relies on state "
                "this process set up that a worker process started afresh does not have (a module's value changed "
                "at run time, a registration or a setting made under if __name__ == '__main__'). Set it up where "
                f"the env is made, in its factory or its constructor.{named} First, {first.name}: {first.detail}"
            )
            findings.append(Finding("parent-state", message))
            continue
        cause = (
            "the values named [cast] here are the likely cause: vecshm holds them in the space's dtype"
            if cast
            else "the env depends on its process (its pid, threads, files it holds), or this is vecshm's fault: "
            "please report it with this output"
        )
        message = (
            f"{face}: {len(bad)} of {len(face_runs)} runs differ from the in-process reference or fail, and no "
            f"fork run of it is identical: {cause}.{named} First, {first.name}: {first.detail}"
        )
        findings.append(Finding("not-identical", message))
    return findings
