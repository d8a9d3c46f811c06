"""With which settings? ``vecshm.tune(env)`` and ``python -m vecshm.tune ENV`` measure vecshm's plans
for one env on this machine, in the caller's loop and within a time budget, and return the options
to pass (``ShmVecEnv(env_fns, **tuned.options)``). See ``docs/tune.md``.
"""

from vecshm.tune.plans import EnvProfile, Plan
from vecshm.tune.tuner import LOOPS, Measured, Tuned, tune

__all__ = ["LOOPS", "EnvProfile", "Measured", "Plan", "Tuned", "tune"]
