"""Is it safe to switch? ``vecshm.check(env)`` and ``python -m vecshm.check ENV`` run a user's env
under vecshm and under the in-process reference, with the same seeds and actions, and report every
difference with its kind: the env not deterministic by itself, state a worker process lacks,
values that cannot cross processes, values the peers cast, and which start methods and transports
the env works under. See ``docs/check.md``.
"""

from vecshm.check.checker import check
from vecshm.check.findings import KINDS, CheckReport, Finding, RunOutcome

__all__ = ["KINDS", "CheckReport", "Finding", "RunOutcome", "check"]
