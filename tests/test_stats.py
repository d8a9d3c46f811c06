"""venv.stats: where the time goes. Counts exactly as a reference loop counts them (SB3's
DummyVecEnv, the caller's own tally of async results), the slowest env named, the bound told
apart, a snapshot that stays as it was taken, and SB3's logger fed from inside PPO.learn."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv

from vecshm import ShmVecEnv, ShmVectorEnv, StatsOffError
from vecshm.stats import VecStats


class WorkEnv(gym.Env):
    """An env whose step busy-works ``micros`` (no sleep: it holds its core, as a real env does),
    and whose episodes last ``length`` steps."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, micros: float = 50.0, length: int = 7) -> None:
        self.micros, self.length = micros, length

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        end = time.perf_counter() + self.micros * 1e-6
        x = 0
        while time.perf_counter() < end:
            x += 1
        self.t += 1
        return np.full(3, self.t / 100, np.float32), 1.0, self.t == self.length, False, {}


def work(micros: float = 50.0, length: int = 7) -> Any:
    return lambda: WorkEnv(micros, length)


LENGTHS = [3, 4, 5, 7, 11, 2]


def test_steps_and_episodes_are_those_a_dummy_vec_env_loop_counts(no_leaks):
    fns = [work(20, n) for n in LENGTHS]
    reference = DummyVecEnv(fns)
    with ShmVecEnv(fns, envs_per_worker=3, stats=True) as venv:
        venv.reset()
        reference.reset()
        episodes = np.zeros(len(fns), int)
        for _ in range(40):
            venv.step(np.zeros(len(fns), np.int64))
            episodes += reference.step(np.zeros(len(fns), np.int64))[2]
        stats = venv.stats
    assert [env.steps for env in stats.envs] == [40] * len(fns)
    assert [env.episodes for env in stats.envs] == episodes.tolist()
    assert [env.restarts for env in stats.envs] == [0] * len(fns)
    assert stats.whole_steps == 40 and stats.steps == 40 * len(fns)


def test_async_batches_count_each_env_s_results_as_the_caller_received_them(no_leaks):
    fns = [work(30 * (1 + i % 3), n) for i, n in enumerate(LENGTHS)]
    with ShmVectorEnv(fns, batch_size=2, stats=True) as envs:
        envs.async_reset(seed=0)
        steps, episodes, first = np.zeros(len(fns), int), np.zeros(len(fns), int), set(range(len(fns)))
        for _ in range(60):
            obs, rewards, terminated, truncated, infos, env_ids = envs.recv()
            for k, i in enumerate(env_ids.tolist()):
                if i in first:  # its reset's result
                    first.discard(i)
                    continue
                steps[i] += 1
                episodes[i] += bool(terminated[k] or truncated[k])
            envs.send(np.zeros(len(env_ids), np.int64), env_ids)
        stats = envs.stats
    assert [env.steps for env in stats.envs] == steps.tolist()
    assert [env.episodes for env in stats.envs] == episodes.tolist()


def test_a_restart_after_a_kill_is_counted_for_the_dead_worker_s_envs(no_leaks):
    with pytest.warns(RuntimeWarning, match="restarting"):
        fns = [work(20, 1000) for _ in range(4)]
        with ShmVecEnv(fns, envs_per_worker=2, on_worker_failure="restart", stats=True) as venv:
            venv.reset()
            for _ in range(5):
                venv.step(np.zeros(4, np.int64))
            os.kill(venv.processes[1].pid, signal.SIGKILL)
            venv.processes[1].join()
            dones = venv.step(np.zeros(4, np.int64))[2]
            venv.step(np.zeros(4, np.int64))
            stats = venv.stats
    assert dones.tolist() == [False, False, True, True]
    assert [env.restarts for env in stats.envs] == [0, 0, 1, 1]
    assert [env.episodes for env in stats.envs] == [0, 0, 1, 1]  # (the restart truncated theirs)
    assert [env.steps for env in stats.envs] == [7] * 4


def test_an_env_made_slower_than_the_rest_is_named_the_slowest_and_the_bound_is_the_envs(no_leaks):
    fns = [work(1500 if i == 4 else 150, 1000) for i in range(6)]
    with ShmVecEnv(fns, envs_per_worker=1, stats=True) as venv:
        venv.reset()
        for _ in range(120):
            venv.step(np.zeros(6, np.int64))
        stats = venv.stats
    assert stats.slowest_env is not None and stats.slowest_env.index == 4
    assert stats.slowest_env.mean_step > 5 * stats.median_step
    assert stats.bound == "env-bound"
    assert stats.verdict.startswith("env-bound: ") and "env 4 steps" in stats.verdict and "batch_size" in stats.verdict
    assert all(env.timed_steps > 0 for env in stats.envs)


def test_a_caller_that_sleeps_between_steps_gets_the_caller_bound_verdict(no_leaks):
    with ShmVectorEnv([work(20) for _ in range(4)], stats=True) as envs:
        envs.reset(seed=0)
        envs.reset_stats()
        for _ in range(30):
            envs.step(np.zeros(4, np.int64))
            time.sleep(0.01)  # the caller's policy and learner, standing still
        stats = envs.stats
    assert stats.bound == "caller-bound" and stats.caller / stats.wall > 0.6
    assert stats.verdict.startswith("caller-bound: the envs were idle ")
    assert stats.steps == 30 * 4  # (counted since reset_stats)


def test_the_snapshot_is_a_value_later_steps_leave_alone(no_leaks):
    with ShmVecEnv([work(10) for _ in range(2)], stats=True) as venv:
        venv.reset()
        venv.step(np.zeros(2, np.int64))
        snapshot = venv.stats
        taken = snapshot.as_dict(per_env=True)
        for _ in range(5):
            venv.step(np.zeros(2, np.int64))
        np.testing.assert_equal(snapshot.as_dict(per_env=True), taken)  # (NaN where no step was timed yet)
        assert venv.stats.steps == 12
        with pytest.raises(dataclasses.FrozenInstanceError):
            snapshot.wall = 0.0  # type: ignore[misc]


def test_as_dict_is_flat_and_numeric_and_the_table_ends_with_the_verdict(no_leaks):
    with ShmVecEnv([work(10) for _ in range(3)], stats=True) as venv:
        venv.reset()
        for _ in range(20):
            venv.step(np.zeros(3, np.int64))
        stats = venv.stats
    flat = stats.as_dict(per_env=True)
    assert all(key.startswith("vecshm/") and type(value) is float for key, value in flat.items())
    assert {"vecshm/waiting_share", "vecshm/caller_share", "vecshm/env_2/step_ms_p99"} <= set(flat)
    text = str(stats)
    assert text.splitlines()[-1] == stats.verdict and "worker processes busy" in text


def test_the_multi_agent_classes_count_rows_of_their_copies(no_leaks):
    pytest.importorskip("pettingzoo")
    from ma_envs import RandomDeaths

    from vecshm.pettingzoo import AgentVecEnv

    with AgentVecEnv(RandomDeaths(max_len=50, info=False), 3, 2, start_method="fork", stats=True) as venv:
        venv.reset()
        for _ in range(8):
            venv.step(np.zeros(12, np.int64))
        stats = venv.stats
    assert [env.steps for env in stats.envs] == [8, 8, 8]  # (an env of the engine is a copy)


def test_plot_draws_the_split_and_each_env_s_step_times(no_leaks, monkeypatch):
    pytest.importorskip("matplotlib")
    with ShmVecEnv([work(30) for _ in range(3)], stats=True) as venv:
        venv.reset()
        for _ in range(40):
            venv.step(np.zeros(3, np.int64))
        stats = venv.stats
    figure = stats.plot()
    assert len(figure.axes) == 2
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)  # (matplotlib not installed)
    with pytest.raises(ImportError, match=r"pip install 'vecshm\[plot\]'"):
        stats.plot()


def test_the_sb3_callback_writes_the_figures_to_sb3_s_logger_inside_ppo_learn(tmp_path, no_leaks):
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import VecNormalize

    from vecshm.callbacks import StatsCallback

    fns = [lambda: gym.make("CartPole-v1") for _ in range(2)]
    venv = VecNormalize(ShmVecEnv(fns, stats=True))  # (found through the wrappers)
    try:
        model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, device="cpu")
        model.set_logger(configure(str(tmp_path), ["csv"]))
        model.learn(128, callback=StatsCallback())
    finally:
        venv.close()
    header = (tmp_path / "progress.csv").read_text().splitlines()[0].split(",")
    assert {"vecshm/steps", "vecshm/waiting_share", "vecshm/caller_share", "vecshm/env_bound"} <= set(header)


def test_the_stats_type_is_public():
    assert VecStats.__module__ == "vecshm.stats"


@pytest.mark.parametrize("facade", [ShmVecEnv, ShmVectorEnv])
def test_without_stats_true_nothing_is_counted_and_asking_says_how_to_turn_it_on(facade, no_leaks):
    with facade([work(10) for _ in range(2)]) as venv:
        venv.reset()
        venv.step(np.zeros(2, np.int64))
        for ask in (lambda: venv.stats, venv.reset_stats):
            with pytest.raises(StatsOffError, match="stats=True"):
                ask()


def test_the_sb3_callback_refuses_a_vec_env_that_counts_nothing_before_training():
    from stable_baselines3 import PPO

    from vecshm.callbacks import StatsCallback

    venv = ShmVecEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    try:
        model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, device="cpu")
        with pytest.raises(StatsOffError, match="stats=True"):
            model.learn(64, callback=StatsCallback())
    finally:
        venv.close()


def test_past_eight_worker_processes_the_table_gives_the_spread_and_both_ends():
    """A 16-core box's 16 processes: the table names the least and the most busy, not every one."""
    n = 16
    stats = VecStats.build(
        wall=1.0, outside=0.2, waiting=0.7, steps=np.full(n, 10), episodes=np.zeros(n, int),
        restarts=np.zeros(n, int), step_times=np.zeros((n, 130)), process_envs=[(i, i + 1) for i in range(n)],
        process_busy=np.linspace(0.1, 0.9, n), whole_steps=10, barrier_mean=0.0, last_to_finish=[],
    )  # fmt: skip
    line = next(line for line in str(stats).splitlines() if "worker processes busy" in line)
    assert "least 0 (env 0) 10%" in line and "most 15 (env 15) 90%" in line and "of 16" in line
    assert len(stats.processes) == n
