"""``vecshm.tune``: vecshm's settings for one env on this machine, chosen by measuring them in the
caller's loop, within a time budget.

It first times the env alone. Then it measures the plans in the order of what they could reach at
best (:func:`~vecshm.tune.plans.upper_bound`), and skips each plan whose best could not beat a rate
already measured. The plans left are measured again in turn, with ``SubprocVecEnv`` and the
in-process reference beside them, and the best median wins; then, on it, whether the busy-wait pays
(only where a step is short enough for it to matter) and, where there are cores to pin, pinning.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vecshm.shared.affinity import usable_cores
from vecshm.tune.measure import REFERENCES, Measurer, live_measurer
from vecshm.tune.plans import EnvProfile, Plan, candidates, upper_bound
from vecshm.user_env import EnvSource, env_factories

__all__ = ["LOOPS", "Measured", "Tuned", "tune"]

LOOPS = ("step", "send-recv")
SPIN_MATTERS_BELOW = 1e-3  # a batch that takes this long or more leaves nothing for a busy-wait to win
PIN_FROM_CORES = 4  # pinning is weighed from this many usable cores (with fewer, every process shares them)
VARIANT_MARGIN = 1.03  # a variant (no busy-wait, pinned) must beat its plan by this much: less is the host's noise
# Where each phase ends, as a share of the budget: each phase sizes its measurements from the time
# left to it, so that building vec envs (not measured) cannot push the whole past the budget.
_ENDS = {"profile": 0.05, "first": 0.5, "final": 0.85, "variants": 1.0}
SHORTEST = 0.2  # seconds: no measurement is shorter


@dataclass(frozen=True)
class Measured:
    """One plan: its label, its options, its median env-steps/s (None: not measured), and why it was
    skipped or how it fared."""

    label: str
    options: dict[str, Any]
    rate: float | None
    note: str = ""


@dataclass(frozen=True)
class Tuned:
    """The chosen settings (``options``: give them to ``ShmVecEnv`` or ``ShmVectorEnv``), why, and
    everything measured on the way. ``print(tuned)`` shows it; ``to_dict()`` gives JSON's values."""

    env: str
    num_envs: int
    loop: str
    caller_seconds: float
    options: dict[str, Any]
    rate: float
    reason: str
    profile: EnvProfile
    measured: tuple[Measured, ...] = ()
    references: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    cores: int = 0
    reference_names: dict[str, str] = field(default_factory=dict)  # the system measured for each role
    unit: str = "env-steps/s"
    agents: bool = False  # a PettingZoo parallel env: copies of it, every agent a row

    def speedup(self, reference: str) -> float | None:
        """The chosen plan's rate over ``reference``'s ("SubprocVecEnv" or "in-process"), measured in turn."""
        base = self.references.get(reference)
        return self.rate / base if base else None

    def constructor(self) -> str:
        """The line to paste: the class the caller's loop uses, with the chosen options."""
        keywords = ", ".join(f"{name}={value!r}" for name, value in self.options.items())
        if self.agents:
            return f"AgentVecEnv(parallel_env, {self.num_envs}, {keywords})"
        face = "ShmVectorEnv" if self.loop == "send-recv" else "ShmVecEnv"
        return f"{face}(env_fns, {keywords})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "num_envs": self.num_envs,
            "loop": self.loop,
            "caller_seconds": self.caller_seconds,
            "options": self.options,
            "constructor": self.constructor(),
            "env_steps_per_second": self.rate,
            "reason": self.reason,
            "env_step_seconds": self.profile.step_seconds,
            "env_step_spread": self.profile.spread,
            "unit": self.unit,
            "speedup": {name: self.speedup(name) for name in self.references},
            "references": self.references,
            "reference_names": self.reference_names,
            "measured": [vars(m) for m in self.measured],
            "seconds": self.seconds,
            "cores": self.cores,
        }

    def __str__(self) -> str:
        caller = f", the caller {self.caller_seconds * 1e3:g} ms per step" if self.caller_seconds else ""
        lines = [
            f"vecshm.tune: {self.env}, {self.num_envs} {'copies' if self.agents else 'envs'}, {self.cores} cores, "
            f"loop {self.loop}{caller}: "
            f"a step takes {self.profile.step_seconds * 1e6:,.0f} us alone (spread {self.profile.spread:.0%}), "
            f"{self.seconds:.0f} s",
            "",
            f"| plan | {self.unit} | note |",
            "|---|---:|---|",
        ]
        for m in self.measured:
            lines.append(f"| {m.label} | {f'{m.rate:,.0f}' if m.rate else '-'} | {m.note} |")
        for name, rate in self.references.items():
            lines.append(f"| {self.reference_names.get(name, name)} (reference) | {rate:,.0f} | |")
        lines += ["", f"Chosen: {self.constructor()}", f"Why: {self.reason}"]
        gains = [f"{self.speedup(n):.2f}x {self.reference_names.get(n, n)}" for n in self.references if self.speedup(n)]
        if gains:
            lines.append(f"Speed-up, measured in turn in this run: {', '.join(gains)}")
        return "\n".join(lines)


def tune(
    env: EnvSource,
    *,
    num_envs: int | None = None,
    seconds: float = 60.0,
    loop: str = "step",
    caller_seconds: float = 0.0,
    env_kwargs: Mapping[str, Any] | None = None,
    progress: Callable[[str, float], None] | None = None,
    measurer: Measurer | None = None,
    cores: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Tuned:
    """Choose vecshm's settings for ``env`` by measuring them here, within about ``seconds``.

    - ``env``: a Gymnasium id, ``"module:callable"`` or ``"file.py:callable"`` (with ``env_kwargs``),
      a factory, or a list of factories; ``num_envs`` envs (default: 4 per usable core). A callable
      that makes a PettingZoo ``ParallelEnv`` (``"mpe2.simple_spread_v3:parallel_env"``) is tuned
      as ``num_envs`` copies of it on ``AgentVecEnv``, every agent a row.
    - ``loop``: ``"step"`` for a caller that steps whole batches (SB3, most Gymnasium loops), which
      gets only settings such a loop can use; ``"send-recv"`` for one that uses async batches.
    - ``caller_seconds``: the caller's own time per step (a policy's forward pass), spent on the
      same cores as the envs (PufferLib's ``model_forward_s``).
    - ``progress``: called with a line and the fraction of the budget spent.
    - ``measurer``, ``cores`` and ``clock``: what measures, how many cores there are and what tells
      the time (the tests give their own).

    Returns :class:`Tuned`: ``ShmVecEnv(env_fns, **tuned.options)`` takes its choice.

    >>> import vecshm
    >>> tuned = vecshm.tune("CartPole-v1", seconds=20)  # doctest: +SKIP
    >>> venv = vecshm.ShmVecEnv(env_fns, **tuned.options)  # doctest: +SKIP
    """
    if loop not in LOOPS:
        raise ValueError(f"loop must be one of {LOOPS}, got {loop!r}")
    cores = cores or len(usable_cores())
    factories, name = env_factories(env, num_envs or 4 * cores, env_kwargs)
    n = len(factories)
    say = progress or (lambda line, done: None)
    started = clock()
    owned = measurer is None
    measurer = measurer or live_measurer(factories, caller_seconds)
    try:
        search = _Search(measurer, n, cores, caller_seconds, seconds, clock, started, say)
        return search.run(name, loop)
    finally:
        if owned:
            measurer.close()


class _Search:
    """One tuning run: its budget, what it measured and what it skipped."""

    def __init__(
        self,
        measurer: Measurer,
        num_envs: int,
        cores: int,
        caller_seconds: float,
        budget: float,
        clock: Callable[[], float],
        started: float,
        say: Callable[[str, float], None],
    ) -> None:
        self.measurer = measurer
        self.n = num_envs
        self.cores = cores
        self.caller = caller_seconds
        self.budget = budget
        self.clock = clock
        self.started = started
        self.say = say
        self.rates: dict[Plan | str, list[float]] = {}
        self.noun = measurer.noun
        self.notes: dict[Plan, str] = {}

    def spent(self) -> float:
        return self.clock() - self.started

    def measure(self, what: Plan | str, seconds: float) -> float:
        label = self.measurer.names.get(what, what) if isinstance(what, str) else what.label(self.noun)
        self.say(f"measuring {label}", min(1.0, self.spent() / self.budget))
        rate = self.measurer.rate(what, seconds)
        self.rates.setdefault(what, []).append(rate)
        return rate

    def median(self, what: Plan | str) -> float:
        return statistics.median(self.rates[what])

    def each(self, phase: str, measurements: int) -> float:
        """Seconds for each of ``measurements`` still to come in ``phase``, from the time left to it."""
        left = self.budget * _ENDS[phase] - self.spent()
        return max(SHORTEST, min(2.0, left / max(measurements, 1) * 0.8))  # (a fifth kept for builds)

    def run(self, name: str, loop: str) -> Tuned:
        self.say("timing the env alone", 0.0)
        profile = self.measurer.profile(min(2.0, self.budget * _ENDS["profile"]))
        plans = candidates(self.n, self.cores, async_batches=loop == "send-recv")
        bounds = {plan: upper_bound(plan, profile, self.cores, self.caller) for plan in plans}
        # first pass: the most promising first, each only if it could still beat the best so far
        best = 0.0
        ordered = sorted(plans, key=lambda p: -bounds[p])
        for k, plan in enumerate(ordered):
            if bounds[plan] < best:
                self.notes[plan] = f"skipped: at best {bounds[plan]:,.0f}/s for this env, below {best:,.0f}/s measured"
                continue
            if self.spent() > self.budget * _ENDS["first"] and best > 0:
                self.notes[plan] = "skipped: the budget ran out"
                continue
            best = max(best, self.measure(plan, self.each("first", len(ordered) - k)))
        # final rounds: the leaders again, in turn with the references
        measured = [p for p in plans if p in self.rates]
        leaders = sorted(measured, key=self.median, reverse=True)[:3]
        rounds = 2
        turn: list[Plan | str] = [*leaders, *(r for r in REFERENCES if r in self.measurer.names)]
        for r in range(rounds):
            for k, what in enumerate(turn):
                self.measure(what, self.each("final", (rounds - r) * len(turn) - k))
        chosen = max(leaders, key=self.median)
        chosen = self._variants(chosen, profile)
        self.say("done", 1.0)
        return Tuned(
            name,
            self.n,
            loop,
            self.caller,
            chosen.options(),
            self.median(chosen),
            self._reason(chosen, profile, measured),
            profile,
            tuple(self._table(plans)),
            {ref: self.median(ref) for ref in REFERENCES if ref in self.rates},
            self.spent(),
            self.cores,
            dict(self.measurer.names),
            self.measurer.unit,
            self.noun == "copies",
        )

    def _variants(self, chosen: Plan, profile: EnvProfile) -> Plan:
        """The busy-wait off, and pinning, on the chosen plan: kept only where they win in turn with it."""
        variants = []
        batch_seconds = chosen.envs_per_worker * profile.step_seconds
        if batch_seconds < SPIN_MATTERS_BELOW:
            variants.append(Plan(self.n, chosen.envs_per_worker, chosen.batch_size, spin=0))
        else:
            self.notes[chosen] = (
                f"a process's share of a step takes {batch_seconds * 1e3:.1f} ms: the busy-wait cannot matter"
            )
        if self.cores >= PIN_FROM_CORES:
            variants.append(Plan(self.n, chosen.envs_per_worker, chosen.batch_size, cpu_affinity="auto"))
        if not variants:
            return chosen
        if self.spent() + 2 * len(variants) * SHORTEST > self.budget:
            for variant in variants:
                self.notes[variant] = "skipped: the budget ran out"
            return chosen
        turn = [chosen, *variants]
        for r in range(2):
            for k, what in enumerate(turn):
                self.measure(what, self.each("variants", (2 - r) * len(turn) - k))
        for variant in variants:
            self.notes[variant] = "on the chosen plan, measured in turn with it"
        best = max(variants, key=self.median)
        return best if self.median(best) > VARIANT_MARGIN * self.median(chosen) else chosen

    def _reason(self, chosen: Plan, profile: EnvProfile, measured: list[Plan]) -> str:
        step = profile.step_seconds * 1e6
        if chosen.batch_size:
            why = (
                f"async batches of {chosen.batch_size}: the caller works on one batch while the envs step "
                f"the next, and a batch need not wait for the slowest env (spread {profile.spread:.0%})"
            )
        elif chosen.processes == 1:
            why = (
                f"one process for all {self.n} {self.noun}: a step takes {step:,.0f} us, too little for more "
                "processes to repay the hand-offs between them"
            )
        else:
            why = (
                f"{chosen.processes} processes of {chosen.envs_per_worker} {self.noun}: a step takes {step:,.0f} "
                f"us, enough work to keep {min(chosen.processes, self.cores)} cores busy"
            )
        skipped = sum(1 for note in self.notes.values() if note.startswith("skipped: at best"))
        plans = f"{len(measured)} plan{'s' if len(measured) != 1 else ''} measured"
        others = f"; {plans}, {skipped} skipped as unable to win" if measured else ""
        extras = []
        if chosen.spin == 0:
            extras.append("no busy-wait, which won in turn")
        if chosen.cpu_affinity:
            extras.append("pinned, which won in turn")
        return why + (f", {', '.join(extras)}" if extras else "") + others

    def _table(self, plans: list[Plan]) -> list[Measured]:
        rows = []
        for plan in [*plans, *(p for p in self.rates if isinstance(p, Plan) and p not in plans)]:
            rate = self.median(plan) if plan in self.rates else None
            rows.append(Measured(plan.label(self.noun), plan.options(), rate, self.notes.get(plan, "")))
        return rows
