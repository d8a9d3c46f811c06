"""``vecshm.tune``'s choices, checked with a measurer and a clock the test controls: a cost model
stands in for the machine, so a noisy host cannot change what it chooses or how long it takes."""

from __future__ import annotations

import json

import pytest

import vecshm
from vecshm.tune import EnvProfile, Plan
from vecshm.tune.__main__ import main
from vecshm.tune.plans import candidates, upper_bound


class Model:
    """A machine of ``cores`` cores as a cost model: a step of the env takes ``step`` seconds; each
    worker process adds ``hand_off`` seconds to a whole step; a process's envs run one after another
    and the processes share the cores; the caller's time adds to a whole step and overlaps an async
    batch. Each measurement moves the clock on by its length, and building a plan by ``build``."""

    names = {"SubprocVecEnv": "SB3 SubprocVecEnv", "in-process": "SB3 DummyVecEnv"}
    unit = "env-steps/s"
    noun = "envs"

    def __init__(self, step: float, hand_off: float = 60e-6, cores: int = 2, caller: float = 0.0) -> None:
        self.step, self.hand_off, self.cores, self.caller = step, hand_off, cores, caller
        self.now = 0.0
        self.built: set = set()
        self.asked: list = []
        self.build = 0.3

    def clock(self) -> float:
        return self.now

    def profile(self, seconds: float) -> EnvProfile:
        self.now += seconds
        return EnvProfile(self.step, 0.1)

    def true_rate(self, what) -> float:
        if what == "SubprocVecEnv":
            return what_subproc(self)
        if what == "in-process":
            return 1 / (self.step + 2e-6 + self.caller / 8)
        busy = min(what.processes, self.cores)
        if what.batch_size is None:
            compute = max(what.envs_per_worker * self.step, what.num_envs * self.step / busy)
            seconds = compute + self.hand_off * what.processes + self.caller
            return what.num_envs / seconds
        compute = what.batch_size * self.step / busy + self.hand_off
        return what.batch_size / max(compute, self.caller + self.hand_off)

    def rate(self, what, seconds: float) -> float:
        if what not in self.built:
            self.built.add(what)
            self.now += self.build
        self.now += seconds
        self.asked.append(what)
        return self.true_rate(what)

    def close(self) -> None:
        pass


def what_subproc(model: Model) -> float:
    return 8 / (8 * model.step / model.cores + 8 * 2 * model.hand_off + model.caller)


def tuned(model: Model, **options):
    options.setdefault("seconds", 20.0)
    return vecshm.tune("CartPole-v1", num_envs=8, measurer=model, cores=model.cores, clock=model.clock, **options)


def best_plan(model: Model, loop: str) -> Plan:
    plans = candidates(8, model.cores, async_batches=loop == "send-recv")
    return max(plans, key=model.true_rate)


@pytest.mark.parametrize("step", [2e-6, 20e-6, 200e-6, 2e-3])
@pytest.mark.parametrize("cores", [2, 8])
def test_it_chooses_the_best_plan_the_machine_offers_within_its_budget(step, cores):
    model = Model(step, cores=cores)
    result = tuned(model)
    assert result.options == {**best_plan(model, "step").options(), **result.options}
    assert result.rate == pytest.approx(model.true_rate(best_plan(model, "step")))
    assert model.now <= 20.0 * 1.05
    assert result.reason and "\n" not in result.reason


def test_a_cheap_env_gets_one_process_and_a_costly_one_a_process_per_core():
    cheap, costly = tuned(Model(2e-6)), tuned(Model(2e-3))
    assert cheap.options["envs_per_worker"] == 8 and "one process" in cheap.reason
    assert costly.options["envs_per_worker"] == 4 and "2 processes" in costly.reason


def test_plans_that_cannot_win_are_skipped_not_measured():
    """With a costly env on 8 cores, one process could not reach what 8 do, even with no cost of its own."""
    model = Model(2e-3, cores=8)
    result = tuned(model)
    skipped = [m for m in result.measured if m.note.startswith("skipped: at best")]
    assert skipped and all(m.rate is None for m in skipped)
    one_process = Plan(8, 8)
    assert one_process not in model.asked
    assert upper_bound(one_process, EnvProfile(2e-3, 0.1), 8, 0.0) < model.true_rate(Plan(8, 1))


def test_a_whole_step_loop_gets_no_async_batches_and_a_send_recv_loop_is_offered_them():
    model = Model(1e-3, caller=2e-3)
    whole = tuned(model)
    assert "batch_size" not in whole.options and all(p.batch_size is None for p in model.asked if isinstance(p, Plan))
    batched = tuned(Model(1e-3, caller=2e-3), loop="send-recv", caller_seconds=2e-3)
    assert batched.options.get("batch_size") in (2, 4)
    assert batched.constructor().startswith("ShmVectorEnv(env_fns, ") and "async batches" in batched.reason


def test_the_caller_s_time_changes_the_choice():
    """Without a caller's time, whole steps over a process per core; with 2 ms of it per step, a
    send/recv loop does better with async batches, which overlap it."""
    alone = tuned(Model(1e-3), loop="send-recv")
    busy = tuned(Model(1e-3, caller=2e-3), loop="send-recv", caller_seconds=2e-3)
    assert alone.options != busy.options
    assert busy.options.get("batch_size")


def test_the_busy_wait_is_weighed_only_where_a_step_is_short():
    short, long = Model(5e-6), Model(5e-3)
    tuned(short), tuned(long)
    assert any(isinstance(p, Plan) and p.spin == 0 for p in short.asked)
    assert not any(isinstance(p, Plan) and p.spin == 0 for p in long.asked)


def test_pinning_is_weighed_where_there_are_cores_to_pin():
    two, eight = Model(1e-3, cores=2), Model(1e-3, cores=8)
    tuned(two), tuned(eight)
    assert not any(isinstance(p, Plan) and p.cpu_affinity for p in two.asked)
    assert any(isinstance(p, Plan) and p.cpu_affinity == "auto" for p in eight.asked)


def test_the_result_is_options_the_constructors_take_a_table_and_json():
    result = tuned(Model(20e-6))
    assert set(result.options) <= set(vecshm.options.declared())
    assert result.speedup("SubprocVecEnv") > 1 and result.speedup("in-process") is not None
    text = str(result)
    assert "Chosen: ShmVecEnv(env_fns, envs_per_worker=" in text and "SubprocVecEnv (reference)" in text
    assert json.loads(json.dumps(result.to_dict()))["constructor"] == result.constructor()


def test_the_chosen_options_build_a_vec_env_for_real():
    result = tuned(Model(20e-6))
    import gymnasium as gym

    venv = vecshm.ShmVecEnv([lambda: gym.make("CartPole-v1")] * 8, **result.options)
    venv.reset()
    venv.close()


@pytest.mark.slow
def test_the_command_measures_for_real_within_its_budget(capsys):
    assert main(["CartPole-v1", "-n", "4", "--seconds", "4", "--json", "-q"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["seconds"] <= 4 * 1.25 and found["options"]["envs_per_worker"] in (1, 2, 4)
    assert found["references"]["SubprocVecEnv"] > 0 and found["references"]["in-process"] > 0


@pytest.mark.slow
def test_a_pettingzoo_parallel_env_is_tuned_as_copies_on_agent_vec_env():
    pytest.importorskip("mpe2")
    result = vecshm.tune("mpe2.simple_spread_v3:parallel_env", num_envs=2, seconds=2)
    assert result.agents and result.unit == "copy-steps/s (3 agents each)"
    assert result.constructor().startswith("AgentVecEnv(parallel_env, 2, envs_per_worker=")
    assert all(m.label.split(", ")[0].endswith("copies") for m in result.measured)
    from mpe2 import simple_spread_v3

    from vecshm.pettingzoo import AgentVecEnv

    venv = AgentVecEnv(simple_spread_v3.parallel_env(), 2, **result.options)
    assert venv.reset().shape == (6, 18)
    venv.close()
