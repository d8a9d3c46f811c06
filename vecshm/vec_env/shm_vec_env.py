"""``ShmVecEnv``: SB3's ``SubprocVecEnv`` semantics on the shared-memory engine.

SB3's rules are the kernel's (:mod:`vecshm.vec_env.sb3_kernel`), and so is SB3's own result shape,
of a batch whose rows are the run's envs: this class takes ``SubprocVecEnv``'s constructor and says
that its rows are its run's envs (:class:`~vecshm.row_maps.EnvRows`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import gymnasium as gym

from vecshm.options import ProcessOptions, resolved, takes_options
from vecshm.parent.core.inspection import RunProperties
from vecshm.parent.core.run import VecRun
from vecshm.row_maps import EnvRows
from vecshm.sb3 import stands_for
from vecshm.shared.protocol import AutoReset
from vecshm.vec_env.base import stack_dynamic
from vecshm.vec_env.sb3_kernel import SB3AsyncBatches

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["ShmVecEnv"]


@stands_for("SubprocVecEnv", one_way=True)  # (a SubprocVecEnv lacks the async API)
@takes_options(ProcessOptions)
class ShmVecEnv(RunProperties, SB3AsyncBatches):
    """Drop-in replacement for ``SubprocVecEnv``: workers write straight into shared memory.

    :param env_fns: factories, one per env (cloudpickled, so lambdas work with every start method)
    :param start_method: ``"fork"``, ``"forkserver"`` or ``"spawn"``; default as SB3 (forkserver)

    ``device`` (vecshm's options, below) returns the results of ``recv()`` as torch tensors there;
    ``step`` and ``reset`` stay numpy, as SB3 expects (docs/gpu.md).

    >>> import gymnasium as gym
    >>> from vecshm import ShmVecEnv
    >>> venv = ShmVecEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])
    >>> obs = venv.reset()
    >>> obs, rewards, dones, infos = venv.step(np.zeros(4, dtype=np.int64))
    >>> venv.close()
    """

    def __init__(
        self,
        env_fns: list[Callable[[], gym.Env]],
        start_method: str | None = None,
        **options: Unpack[ProcessOptions],
    ) -> None:
        fns = list(env_fns)
        given = resolved("ShmVecEnv", options, ProcessOptions)
        copy = given.pop("copy")  # (the facade's: each batch's observations as arrays of their own, or views)
        run = VecRun(
            fns,
            given,
            autoreset=AutoReset.SAME_STEP,
            reward_codes=True,  # rewards in np.stack's dtype, as SubprocVecEnv returns them
            start_method=start_method,
            batch_dynamic=stack_dynamic,
        )
        self._started(run, EnvRows(len(fns)), copy, run.observation_space, run.action_space)

    # -- lifecycle --------------------------------------------------------------------------------

    def __repr__(self) -> str:
        run = getattr(self, "_run", None)
        if run is None:
            return f"{type(self).__name__}(<not started>)"
        sizes = sorted({b - a for a, b in run.plan.process_slices})
        per_worker = "/".join(map(str, sizes))
        return (
            f"{type(self).__name__}(num_envs={run.num_envs}, workers={run.plan.num_processes}x{per_worker} envs, "
            f"start_method={run.start_method!r}, shared={run.nbytes / 2**20:.2f} MiB, "
            f"{'closed' if self.closed else 'open'})"
        )
