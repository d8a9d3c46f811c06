"""What a check found, as values: each finding with its kind, each run with its outcome, and the
report that holds them, prints them and says whether the env is safe to switch."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["KINDS", "CheckReport", "Finding", "Kind", "Outcome", "RunOutcome"]

Kind = Literal[
    "nondeterministic",
    "parent-state",
    "not-identical",
    "cannot-cross",
    "cast",
    "outside-space",
    "no-episode-end",
    "fails-in-process",
]

# Each kind, whether it fails the check, and what it means, for the report's legend and the docs.
KINDS: dict[str, tuple[bool, str]] = {
    "nondeterministic": (
        False,
        "two in-process runs with the same seeds and actions differ: the env itself is not deterministic, "
        "so vecshm's runs are compared on structure only",
    ),
    "parent-state": (
        True,
        "the env behaves differently in a worker started afresh (forkserver, spawn) than in this process",
    ),
    "not-identical": (
        True,
        "vecshm's results differ from the in-process reference in every worker process, or it fails there",
    ),
    "cannot-cross": (
        True,
        "a factory, a space or an info that cannot be pickled, so it cannot reach or leave a worker process",
    ),
    "cast": (True, "a value of the wrong dtype, shape or type, which the peers cast or refuse differently"),
    "fails-in-process": (True, "the env raises in this process under Gymnasium's SyncVectorEnv, without vecshm"),
    "outside-space": (False, "an observation outside its declared space, passed on as it is"),
    "no-episode-end": (False, "no episode ended, so the automatic resets were not compared"),
}


@dataclass(frozen=True)
class Finding:
    """One thing the check found: its ``kind`` (a key of :data:`KINDS`), a sentence a user can act
    on, and where known the env and step."""

    kind: str
    message: str
    env: int | None = None
    step: int | None = None

    @property
    def fails(self) -> bool:
        """Whether this finding makes the check fail (exit status 1)."""
        return KINDS[self.kind][0]


Outcome = Literal["same", "differs", "error", "same structure"]


@dataclass(frozen=True)
class RunOutcome:
    """One run of the env and how it compared: ``same`` (bit-identical to its reference), ``differs``,
    ``error`` (it raised), or ``same structure`` (the env is not deterministic by itself, so only
    dtypes, shapes and types were compared, and they agree)."""

    name: str
    start_method: str | None
    transport: str | None
    outcome: Outcome
    detail: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class CheckReport:
    """Everything one check found. ``ok``: no finding fails it. ``print(report)`` shows it; ``to_dict()``
    gives it as JSON's values."""

    env: str
    num_envs: int
    steps: int
    seed: int
    episodes: int
    runs: tuple[RunOutcome, ...] = ()
    findings: tuple[Finding, ...] = ()
    seconds: float = 0.0
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(finding.fails for finding in self.findings)

    def works_under(self) -> list[tuple[str, str]]:
        """The (start method, transport) pairs under which vecshm ran the env without an error."""
        pairs = {(r.start_method, r.transport) for r in self.runs if r.outcome != "error"}
        return sorted((method, transport) for method, transport in pairs if method and transport)

    def to_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["ok"] = self.ok
        for finding, row in zip(self.findings, found["findings"]):
            row["fails"] = finding.fails
        return found

    def __str__(self) -> str:
        lines = [
            f"vecshm.check: {self.env}, {self.num_envs} envs, {self.steps} steps from seed {self.seed} "
            f"({self.episodes} episodes ended), {self.seconds:.1f} s",
            "",
        ]
        width = max([len(run.name) for run in self.runs] + [3])
        lines.append(f"  {'run':<{width}}  seconds  result")
        for run in self.runs:
            detail = f": {run.detail}" if run.detail else ""
            lines.append(f"  {run.name:<{width}}  {run.seconds:7.1f}  {run.outcome}{detail}")
        lines.append("")
        if not self.findings:
            lines.append("No findings: vecshm's results were bit-identical to the in-process reference in every run.")
        elif self.ok and any(f.kind == "nondeterministic" for f in self.findings):
            lines.append("vecshm ran the env in every run, with the in-process reference's dtypes, shapes and types.")
        for finding in self.findings:
            lines.append(f"{'FAIL' if finding.fails else 'warn'} [{finding.kind}] {finding.message}")
        lines.append("")
        lines.append(
            "Safe to switch." if self.ok else "Not safe to switch as it is: see each FAIL above (docs/check.md)."
        )
        return "\n".join(lines)
