"""What the facades on a local run show of it: the inspection properties (:class:`RunProperties`),
each served by the facade's :class:`~vecshm.parent.core.run.VecRun`.

Each is the run's value of the same name, read when asked: one descriptor, :class:`FromRun`,
serves them all, so that a property shown is one line with its docstring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from vecshm.parent.core.run import Runtime, VecRun
from vecshm.parent.plan import VecEnvPlan
from vecshm.shared.buffers import Buffers

if TYPE_CHECKING:
    from vecshm.parent.core.balance import CoreBalance
    from vecshm.parent.core.waiting import WaitObserver

__all__ = ["FromRun", "RunProperties", "StatsHooks"]

Value = TypeVar("Value")


class FromRun(Generic[Value]):
    """A property whose value is the run's attribute of the same name; ``settable``: set there too."""

    def __init__(self, doc: str, settable: bool = False) -> None:
        self.__doc__ = doc
        self.settable = settable

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type) -> FromRun[Value]: ...

    @overload
    def __get__(self, instance: object, owner: type) -> Value: ...

    def __get__(self, instance: Any, owner: type) -> Any:
        if instance is None:
            return self
        return getattr(instance._run, self.name)

    def __set__(self, instance: Any, value: Value) -> None:
        if not self.settable:
            raise AttributeError(f"{self.name} is read-only")
        setattr(instance._run, self.name, value)


class StatsHooks:
    """``stats`` and ``reset_stats`` of a vec env on a run (a kernel's; the run counts, or refuses)."""

    _run: Any

    @property
    def stats(self) -> Any:
        """Where the time went, since the vec env started or :meth:`reset_stats`: a frozen
        :class:`~vecshm.stats.VecStats` (``print`` it; ``.as_dict()`` for a logger; ``.plot()``).
        A ``RayVecEnv``'s: one per actor, in actor order."""
        return self._run.stats()

    def reset_stats(self) -> None:
        """Count :attr:`stats` from now."""
        self._run.reset_stats()


class RunProperties:
    """What the facades on a local run show of their :class:`VecRun` (``self.run``)."""

    _run: Any  # a VecRun (the kernels name it by the protocol they speak to it)

    @property
    def run(self) -> VecRun:
        """The vec env's run: the workers, and the commands, batches and calls sent to them."""
        return self._run

    pin_memory: FromRun[bool] = FromRun("Whether the segment is page-locked and registered with CUDA (``pin_memory``).")
    processes: FromRun[list[Any]] = FromRun(
        """The worker processes (``multiprocessing.Process``), as the peers' ``processes``: one per
        worker process, each hosting ``envs_per_worker`` envs, so fewer than ``num_envs`` when a
        process hosts several. A restarted worker's new process replaces its old one."""
    )
    plan: FromRun[VecEnvPlan] = FromRun(
        "Which envs each worker process hosts, and each command runs on (see :mod:`vecshm.parent.plan`)."
    )
    runtime: FromRun[Runtime] = FromRun("How the vec env runs: start method, transport, cores, segment size, ring.")
    segment: FromRun[Buffers] = FromRun(
        "The shared segment's arrays by name, for diagnostics: read them, never write them."
    )
    core_balance: FromRun[CoreBalance] = FromRun(
        "Whether the workers keep off the parent's core in async batches (:mod:`vecshm.parent.core.balance`)."
    )
    in_flight: FromRun[bool] = FromRun(
        "Whether envs sent with ``send`` (or ``async_reset``) have not all come back from ``recv`` yet."
    )
    observer: FromRun[WaitObserver | None] = FromRun(
        "An object told of every wait for workers (see :class:`vecshm.parent.core.waiting.WaitObserver`).",
        settable=True,
    )
