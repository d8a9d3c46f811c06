"""A user's env named on a command line or passed to a function: a Gymnasium id, a
``module:callable`` or ``path/to/file.py:callable``, a factory, or a list of factories.

Each factory this module makes is a ``functools.partial`` of a module-level function, so it pickles
by name and a forkserver or spawn worker builds the env again from its name.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

__all__ = [
    "ENV_HELP",
    "EnvSource",
    "command_parser",
    "env_factories",
    "is_parallel_env",
    "make_named_env",
    "json_object",
]

# Gymnasium namespaces whose envs a package registers when it is imported (Gymnasium 1 no longer
# imports it for you): the package to import when ``gym.make`` does not know the namespace.
REGISTERING_PACKAGES = {"ALE": "ale_py"}

EnvSource = str | Callable[[], gym.Env] | Sequence[Callable[[], gym.Env]]


ENV_HELP = "a Gymnasium id (CartPole-v1), or module:callable, or path/to/file.py:callable"


def command_parser(prog: str, description: str, env: str | None = "env") -> argparse.ArgumentParser:
    """The parser of one of vecshm's commands (``vecshm-bench``, ``python -m vecshm.check``, ...),
    defaults shown in its help, with the env named as every command names it: ``env`` (a
    positional argument, or ``--env`` where it is optional, or None: none) and ``--env-kwargs``."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    if env is None:
        return parser
    if env.startswith("-"):
        parser.add_argument(env, default=None, metavar="ID_OR_MODULE:CALLABLE", help=f"your own env: {ENV_HELP}")
    else:
        parser.add_argument(env, help=ENV_HELP)
    parser.add_argument(
        "--env-kwargs",
        type=json_object,
        default={},
        metavar="JSON",
        help="keyword arguments for the env, a JSON object",
    )
    return parser


def json_object(text: str) -> dict[str, Any]:
    """``--env-kwargs``' JSON object, as keyword arguments (the parser's type: a bad one is a usage error)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not JSON ({error}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text!r}")
    return value


def is_parallel_env(env: Any) -> bool:
    """Whether ``env`` is a PettingZoo ``ParallelEnv`` (its agents, each with its spaces), not a Gymnasium env."""
    return not isinstance(env, gym.Env) and hasattr(env, "possible_agents") and callable(getattr(env, "step", None))


def make_named_env(name: str, kwargs: Mapping[str, Any]) -> Any:
    """The env ``name`` names, built with ``kwargs``: ``module:callable`` or ``file.py:callable``
    where the part after the colon is a callable of that module (a Gymnasium env, or a PettingZoo
    ``ParallelEnv`` such as ``mpe2.simple_spread_v3:parallel_env``), else ``gym.make(name, **kwargs)``
    (which also takes Gymnasium's own ``module:EnvId-v0``)."""
    target = _callable(name)
    if target is not None:
        return target(**kwargs)
    namespace = name.partition("/")[0] if "/" in name else None
    if namespace in REGISTERING_PACKAGES:
        package = importlib.import_module(REGISTERING_PACKAGES[namespace])
        if namespace == "ALE":  # its banner, printed by every process that makes a game, says nothing
            package.ALEInterface.setLoggerMode(package.LoggerMode.Error)
    return gym.make(name, **kwargs)


def _callable(name: str) -> Callable[..., gym.Env] | None:
    module_name, colon, attribute = name.rpartition(":")
    if not colon or not all(part.isidentifier() for part in attribute.split(".")):
        return None
    if module_name.endswith(".py"):
        module = _module_from_file(module_name)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return None
    target: Any = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
    return target if callable(target) else None


def _module_from_file(path: str) -> Any:
    """The module of a ``.py`` file, imported once per process under a name of its own."""
    path = os.path.abspath(path)
    name = "vecshm_user_env_" + "".join(c if c.isalnum() else "_" for c in path)
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def env_factories(
    source: EnvSource, num_envs: int, env_kwargs: Mapping[str, Any] | None = None
) -> tuple[list[Callable[[], gym.Env]], str]:
    """``num_envs`` factories for ``source``, and a name for it in a report.

    A string is an env's name (:func:`make_named_env`, with ``env_kwargs``); a callable is one
    factory, used for every env; a sequence is the factories themselves (``num_envs`` is then its
    length, and ``env_kwargs`` must be empty).
    """
    if isinstance(source, str):
        kwargs = dict(env_kwargs or {})
        return [functools.partial(make_named_env, source, kwargs) for _ in range(num_envs)], source
    if env_kwargs:
        raise ValueError("env_kwargs go with an env's name; a factory takes its arguments itself")
    if callable(source):
        return [source] * num_envs, getattr(source, "__qualname__", repr(source))
    factories = list(source)
    if not factories or not all(callable(fn) for fn in factories):
        raise TypeError("expected an env's name, a factory, or a non-empty list of factories")
    first = factories[0]
    return factories, f"{len(factories)} factories ({getattr(first, '__qualname__', type(first).__name__)}, ...)"
