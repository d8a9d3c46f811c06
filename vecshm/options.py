"""vecshm's own keywords, declared once for every vec env class.

Each option is one line of :class:`VecOptions` (or :class:`StartOptions`): its name, its type, and an
:class:`Option` holding its default and one line of doc. Every facade takes them as
``**options: Unpack[VecOptions]`` beside its peer's own keywords, so a type checker and an IDE
list them as real keyword arguments (PEP 692), and :func:`takes_options` gives the class the
signature and the docstring's option list that ``help()`` and ``inspect.signature`` show; the API
site expands them too (``docs/griffe_options.py``). :func:`resolved` checks the keywords a caller
passed and fills in the defaults. A new option is one line here, plus its use.

The peers' own keywords stay in each facade's signature, where they are the peer's: ``SubprocVecEnv``'s
``start_method``, ``AsyncVectorEnv``'s ``context``, ``copy``, ``autoreset_mode`` and the rest.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Annotated, Any, NamedTuple, TypedDict, TypeVar

from vecshm.parent.balance_rules import DEFAULT_BALANCE_RULES, BalanceRules

__all__ = ["Option", "ProcessOptions", "StartOptions", "VecOptions", "declared", "resolved", "takes_options"]


class Option(NamedTuple):
    """An option's default and its one line of doc (the metadata of its ``Annotated`` type), and
    whether the engine reads it (``engine=False``: the facade alone does, and the engine never
    sees it): each option the engine reads is a field of ``EngineOptions``, made from here."""

    default: Any
    doc: str
    engine: bool = True


DEFAULT_INFO_BYTES = 2048
# Lending a batch (a slot's, or the ring's units) costs a few microseconds; below this many bytes of
# observations a plain copy is cheaper. ``lend_min_bytes=0`` lends every batch.
LEND_MIN_BYTES = 64 * 1024


class VecOptions(TypedDict, total=False):
    """vecshm's options, the same keyword-only arguments for every vec env class."""

    envs_per_worker: Annotated[int | None, Option(None, "envs per worker process (None: a process per usable core)")]
    batch_size: Annotated[
        int | None, Option(None, "envs (multi-agent: copies) per async ``recv()``; up to all", engine=False)
    ]
    step_timeout: Annotated[float | None, Option(None, "seconds an env may take for one command (None: no limit)")]
    start_timeout: Annotated[float | None, Option(None, "seconds to build the envs (None: 60 with a step_timeout)")]
    info_bytes: Annotated[int, Option(DEFAULT_INFO_BYTES, "per-env shared bytes for pickled infos; more: slower path")]
    spin: Annotated[float | None, Option(None, "longest busy-wait in seconds (None: adaptive, on x86; 0: never)")]
    cpu_affinity: Annotated[Any, Option(None, "None, ``'auto'``, or cores (or core lists) for the worker processes")]
    pin_parent: Annotated[list[int] | None, Option(None, "cores to pin the calling process to, once workers started")]
    limit_threads: Annotated[bool, Option(True, "cap native thread pools (OpenMP, MKL, ...) to one per worker")]
    on_worker_failure: Annotated[str, Option("raise", "``'raise'``, or ``'restart'``: rebuild a dead worker's envs")]
    device: Annotated[
        Any, Option(None, "None (numpy), ``'cpu'`` or ``'cuda[:N]'``: results as torch tensors there", engine=False)
    ]
    pin_memory: Annotated[
        bool | None, Option(None, "page-lock the segment for DMA copies (None: with a CUDA device)", engine=False)
    ]
    lend_min_bytes: Annotated[int, Option(LEND_MIN_BYTES, "lend batches of observations this large, copy smaller ones")]
    balance_rules: Annotated[
        BalanceRules, Option(DEFAULT_BALANCE_RULES, "when the parent keeps a core in async batches")
    ]
    stats: Annotated[bool, Option(False, "count where the time goes, for ``venv.stats`` (costs cheap steps a few %)")]


class ProcessOptions(VecOptions, total=False):
    """:class:`VecOptions`, whether the worker processes are daemons, and whether observations are
    copies: for ``ShmVecEnv``, whose peer has no keyword for either (``AsyncVectorEnv`` has
    ``daemon`` and ``copy`` of its own)."""

    daemon: Annotated[bool, Option(True, "start the workers as daemon processes (False: envs may start processes)")]
    copy: Annotated[
        bool, Option(True, "observations as arrays of their own (lent, not copied); False: views", engine=False)
    ]


class StartOptions(ProcessOptions, total=False):
    """:class:`ProcessOptions`, and the start method: for the classes whose peers have no keyword
    of their own for it (the multi-agent classes, and ``RayVecEnv``'s ``ShmVecEnv`` in each actor)."""

    start_method: Annotated[str | None, Option(None, "``'fork'``, ``'forkserver'`` or ``'spawn'`` (None: the peer's)")]


class Declared(NamedTuple):
    """One option as declared: its name, type, default, doc, and whether the engine reads it."""

    name: str
    annotation: Any
    default: Any
    doc: str
    engine: bool


@functools.cache
def declared(options: type = VecOptions) -> Mapping[str, Declared]:
    """The options ``options`` (a :class:`VecOptions` or :class:`StartOptions`) declares, in order:
    read from the type hints once per typed dict (every vec env a facade builds asks again), and
    read-only, since every caller shares it."""
    hints = typing.get_type_hints(options, include_extras=True)
    found = {}
    for name, hint in hints.items():
        annotation, option = typing.get_args(hint)[:2]
        found[name] = Declared(name, annotation, option.default, option.doc, option.engine)
    return MappingProxyType(found)


def resolved(owner: str, given: Mapping[str, Any], options: type = VecOptions) -> dict[str, Any]:
    """Every option of ``options``: those ``given`` (the keywords a caller passed to ``owner``),
    the defaults for the rest. A keyword no option declares is a ``TypeError``, as Python raises
    for a function's unknown keyword."""
    known = declared(options)
    for name in given:
        if name not in known:
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}")
    return {name: given.get(name, option.default) for name, option in known.items()}


def options_doc(options: type = VecOptions) -> str:
    """The option list of a class's docstring, as ``help()`` shows it."""
    lines = [f"vecshm's options (keyword-only; ``vecshm.options.{options.__name__}``):", ""]
    for option in declared(options).values():
        lines.append(f"- ``{option.name}`` (default ``{option.default!r}``): {option.doc}")
    return "\n".join(lines)


Facade = TypeVar("Facade", bound=type)


def takes_options(options: type = VecOptions) -> Callable[[Facade], Facade]:
    """A class decorator for a facade whose ``__init__`` takes ``**options: Unpack[...]``: its
    signature (``help()``, ``inspect.signature``) lists the options as keyword-only arguments
    with their defaults, and its docstring ends with their list."""

    def decorate(cls: Facade) -> Facade:
        init = cls.__init__  # type: ignore[misc]
        signature = inspect.signature(init)
        kept = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        own = {p.name for p in kept}
        added = [
            inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default, annotation=o.annotation)
            for o in declared(options).values()
            if o.name not in own
        ]
        init.__signature__ = signature.replace(parameters=[*kept, *added])
        # the class's own, for ``inspect.signature(cls)`` and ``help(cls)``, which a ``__new__`` would hide
        own_signature = signature.replace(parameters=[*kept[1:], *added], return_annotation=inspect.Signature.empty)
        cls.__signature__ = own_signature  # type: ignore[attr-defined]  # (without ``self``)
        cls.__doc__ = f"{inspect.cleandoc(cls.__doc__ or '')}\n\n{options_doc(options)}\n"
        return cls

    return decorate
