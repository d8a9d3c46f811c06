"""What is done to envs beside stepping them: wrapper checks, and a worker's answers to rare calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from vecshm.shared.errors import RemoteError
from vecshm.shared.pickling import Pickled, dumps
from vecshm.shared.protocol import Arena, CallOp

__all__ = ["unwrap_wrapper", "is_wrapped", "call_answers"]


def unwrap_wrapper(env: gym.Env, wrapper_class: type[gym.Wrapper]) -> gym.Wrapper | None:
    """The first wrapper of type ``wrapper_class`` around ``env``, or None."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, wrapper_class):
            return env
        env = env.env
    return None


def is_wrapped(env: gym.Env, wrapper_class: type[gym.Wrapper]) -> bool:
    """Whether ``env`` is wrapped in ``wrapper_class``; an env whose class answers this itself
    (``is_wrapped_by``: vecshm.pettingzoo's copy, which knows PettingZoo's wrappers) answers."""
    own = getattr(type(env), "is_wrapped_by", None)
    if own is not None:
        return bool(own(env, wrapper_class))
    return unwrap_wrapper(env, wrapper_class) is not None


def call_answers(request: tuple[int, list[int], Any], envs: list[gym.Env], start: int) -> tuple[dict, list]:
    """Run the rare call ``request`` (its operation, the envs' indices, its arguments) on some of
    ``envs`` (env ``start`` first): each env's answer pickled, by ``(Arena.ANSWER, index)``, or the
    errors of the envs that raised (then no answer)."""
    op, indices, args = request
    answers, failures = {}, []
    try:  # still pickled when a Ray actor passed them on (their modules load here, not there)
        args = args.load() if isinstance(args, Pickled) else args
    except Exception as exc:  # their module is not installed here, or fails to import
        return {}, [RemoteError(exc, index, CallOp(op).name.lower()) for index in indices]
    for index in indices:
        try:  # each result pickled here, so that one nothing can pickle is that env's error
            answers[(Arena.ANSWER, index)] = dumps(_CALLS[op](envs[index - start], *args))
        except Exception as exc:
            what = f"{CallOp(op).name.lower()}({args[0]!r})" if args else CallOp(op).name.lower()
            failures.append(RemoteError(exc, index, what))
    return ({}, failures) if failures else (answers, [])


def _has_attr(env: gym.Env, name: str) -> bool:
    try:
        env.get_wrapper_attr(name)
    except AttributeError:
        return False
    return True


def _set_attr(env: gym.Env, name: str, value: Any, through_wrappers: bool) -> None:
    if through_wrappers:
        env.set_wrapper_attr(name, value)
    else:
        setattr(env, name, value)


def _env_method(env: gym.Env, name: str, args: tuple, kwargs: dict, call_if_callable: bool) -> Any:
    attr = env.get_wrapper_attr(name)
    if call_if_callable and not callable(attr):
        return attr
    return attr(*args, **kwargs)


_CALLS: dict[int, Callable[..., Any]] = {
    CallOp.GET_ATTR: lambda env, name: env.get_wrapper_attr(name),
    CallOp.SET_ATTR: _set_attr,
    CallOp.HAS_ATTR: _has_attr,
    CallOp.ENV_METHOD: _env_method,
    CallOp.IS_WRAPPED: is_wrapped,
    CallOp.RENDER: lambda env: env.render(),
}
