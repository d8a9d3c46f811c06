"""vecshm's options, declared once (``vecshm/options.py``): every vec env class shows them as
keyword arguments with their declared defaults, refuses a keyword none declares as Python does,
and passes each to the engine. ``start_timeout`` is the option added as one declaration."""

from __future__ import annotations

import inspect
import pydoc
import time
import typing

import gymnasium as gym
import pytest
from faulty_envs import hangs_in_constructor, healthy

from vecshm import ShmVecEnv, ShmVectorEnv, StepTimeoutError
from vecshm.options import Option, ProcessOptions, StartOptions, VecOptions, declared
from vecshm.pettingzoo import AgentVecEnv, AgentVectorEnv, SuperSuitVecEnv


def _classes() -> list[tuple[type, type]]:
    classes = [
        (ShmVecEnv, ProcessOptions),
        (ShmVectorEnv, VecOptions),
        (AgentVecEnv, StartOptions),
        (AgentVectorEnv, StartOptions),
        (SuperSuitVecEnv, StartOptions),
    ]
    try:
        from vecshm.ray import RayVecEnv
    except ImportError:  # (ray is an extra)
        return classes
    return [*classes, (RayVecEnv, StartOptions)]


OWN = {("RayVecEnv", "start_timeout")}  # a class's own keyword of an option's name: its actors' start


@pytest.mark.parametrize(("cls", "options"), _classes(), ids=lambda value: getattr(value, "__name__", ""))
def test_every_class_shows_every_option_as_a_keyword_with_its_declared_default(cls, options):
    """``inspect.signature`` (what IDEs and ``help()`` read at run time) lists each option as a
    keyword-only argument with the default declared once, and no ``**options``; the docstring
    ``help()`` prints lists each option."""
    signature = inspect.signature(cls)
    assert not [p for p in signature.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    for option in declared(options).values():
        parameter = signature.parameters[option.name]
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY, option.name
        if (cls.__name__, option.name) not in OWN:
            assert parameter.default == option.default, option.name
            assert f"``{option.name}``" in text, option.name


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: ShmVecEnv([healthy], **kw),
        lambda **kw: ShmVectorEnv([healthy], **kw),
        lambda **kw: AgentVecEnv(_parallel_env(), 1, **kw),
        lambda **kw: AgentVectorEnv(_parallel_env(), 1, **kw),
    ],
    ids=["ShmVecEnv", "ShmVectorEnv", "AgentVecEnv", "AgentVectorEnv"],
)
def test_a_keyword_no_option_declares_is_a_type_error_before_any_process_starts(make, no_leaks):
    """As a Python function refuses an unknown keyword, naming the class and the keyword."""
    with pytest.raises(TypeError, match=r"\w+\(\) got an unexpected keyword argument 'envs_per_wroker'"):
        make(envs_per_wroker=2)


def _parallel_env():
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(max_cycles=5)


@pytest.mark.parametrize("cls", [ShmVecEnv, ShmVectorEnv])
def test_start_timeout_ends_a_start_whose_env_never_builds(cls, no_leaks):
    """The option added as one declaration: an env whose constructor never returns is a
    ``StepTimeoutError`` naming it once ``start_timeout`` has passed (without it, and without a
    ``step_timeout``, the start waits as the peers' do), and no process is left."""
    started = time.monotonic()
    with pytest.raises(StepTimeoutError, match=r"env\(s\) \[1\] did not finish env construction"):
        cls([healthy, hangs_in_constructor], envs_per_worker=1, start_timeout=1.0)
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("value", [0, -1.0])
def test_start_timeout_must_be_positive(value):
    with pytest.raises(ValueError, match="start_timeout must be a positive number of seconds or None"):
        ShmVecEnv([lambda: gym.make("CartPole-v1")], start_timeout=value)


def test_the_engine_s_option_fields_are_the_declared_options_with_their_declared_defaults():
    """``EngineOptions`` is made from the declarations: every option the engine reads is its field,
    with the declared type and default, and no other field shares an option's name."""
    import dataclasses

    from vecshm.parent.engine_options import ENGINE_FIELDS, EngineOptions

    engine = {f.name: f for f in dataclasses.fields(EngineOptions)}
    options = declared(StartOptions)
    for option in options.values():
        if option.engine:
            assert engine[option.name].default == option.default, option.name
            assert engine[option.name].type == option.annotation, option.name
        else:  # the facades' alone (batch_size reaches the engine as async_batch)
            assert option.name not in engine, option.name
    assert set(engine) - set(options) == {name for name, *_ in ENGINE_FIELDS}


def test_an_option_declared_once_is_a_field_of_the_engine():
    """Adding an option is one declaration plus its use: a typed dict with one more line makes an
    ``EngineOptions`` with one more field, with that default."""
    from vecshm.parent.engine_options import engine_options_type
    from vecshm.shared.protocol import AutoReset

    class Planted(StartOptions, total=False):
        planted_option: typing.Annotated[int, Option(7, "a new option, for this test")]  # (read by name: module level)

    assert engine_options_type(Planted)(AutoReset.NEXT_STEP).planted_option == 7
