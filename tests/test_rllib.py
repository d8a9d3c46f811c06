"""RLlib's PPO with env runners vectorized by ``ShmVectorEnv`` (``vecshm.ray.register_env``), on two Ray nodes.

RLlib pins its own Gymnasium version, so ``make test`` runs this module in a second virtualenv
with ``vecshm[rllib]`` (see the Makefile); it is skipped where RLlib is not installed.
"""

from __future__ import annotations

import os
import signal

import gymnasium as gym
import pytest
from conftest import wait_gone

pytest.importorskip("ray.rllib.algorithms.ppo", reason="the RLlib tests need vecshm[rllib]", exc_type=ImportError)
import ray  # noqa: E402
from ray.rllib.algorithms.ppo import PPOConfig  # noqa: E402
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME  # noqa: E402

from vecshm import ShmVectorEnv  # noqa: E402
from vecshm.ray import register_env  # noqa: E402

pytestmark = [
    pytest.mark.usefixtures("ray_cluster"),
    pytest.mark.slow,
    pytest.mark.rllib,
    pytest.mark.xdist_group("ray"),  # one cluster, in one of make test's processes
]

RUNNER_CPUS = 3  # two runners of 3 CPUs cannot share a 4-CPU node: one runs on each


def ppo(env: str, num_env_runners: int = 2, num_envs: int = 8, **env_runner_options) -> PPOConfig:
    """A PPO config small enough for a 2-core machine: one short iteration."""
    return (
        PPOConfig()
        .environment(env)
        .env_runners(
            num_env_runners=num_env_runners,
            num_envs_per_env_runner=num_envs,
            num_cpus_per_env_runner=RUNNER_CPUS,
            gym_env_vectorize_mode="vector_entry_point",
            rollout_fragment_length=16,
            **env_runner_options,
        )
        .learners(num_learners=0)
        .training(train_batch_size_per_learner=256, minibatch_size=128, num_epochs=1)
        .debugging(seed=0)
    )


def on_runners(algo, fn) -> list:
    return algo.env_runner_group.foreach_env_runner(fn, local_env_runner=False)


def describe(runner) -> dict:
    env = runner.env.unwrapped
    return {
        "node": ray.get_runtime_context().get_node_id(),
        "type": type(env).__name__,
        "num_envs": env.num_envs,
        "workers": [p.pid for p in env.processes],
    }


def test_ppo_trains_with_two_shm_vector_env_runners_on_two_nodes():
    register_env("vecshm-cartpole", "CartPole-v1")
    algo = ppo("vecshm-cartpole").build_algo()
    try:
        result = algo.train()
        runners = on_runners(algo, describe)
    finally:
        algo.stop()
    assert result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME] >= 256
    assert [r["type"] for r in runners] == ["ShmVectorEnv", "ShmVectorEnv"]
    assert len({r["node"] for r in runners}) == 2, "one runner on each node"
    # 8 envs per runner, 3 CPUs per runner: 3 vecshm workers each, not 8 processes and not one per core
    assert [(r["num_envs"], len(r["workers"])) for r in runners] == [(8, RUNNER_CPUS)] * 2


def test_the_creator_builds_what_rllib_asks_for():
    from vecshm.ray.rllib import VectorEnvCreator

    creator = VectorEnvCreator("CartPole-v1", {})
    single = creator({})
    assert isinstance(single, gym.Env), "without num_envs (RLlib's other modes): one env"
    single.close()
    with creator({"num_envs": 3}) as envs:
        assert isinstance(envs, ShmVectorEnv) and envs.num_envs == 3
        reference = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
        assert envs.single_observation_space == reference.single_observation_space
        reference.close()


def test_a_dead_vecshm_worker_is_rebuilt_by_rllibs_sub_environment_restart():
    register_env("vecshm-cartpole-restart", "CartPole-v1")
    config = ppo("vecshm-cartpole-restart", num_env_runners=1).fault_tolerance(restart_failed_sub_environments=True)
    algo = config.build_algo()
    try:
        algo.train()
        (before,) = on_runners(algo, describe)
        os.kill(before["workers"][0], signal.SIGKILL)
        result = algo.train()  # the runner's env step fails, RLlib rebuilds its ShmVectorEnv and goes on
        (after,) = on_runners(algo, describe)
    finally:
        algo.stop()
    assert result[ENV_RUNNER_RESULTS]["num_env_step_failures"] >= 1
    assert set(after["workers"]).isdisjoint(before["workers"]), "a new ShmVectorEnv with new workers"


def test_vecshms_own_restart_rebuilds_a_dead_worker_without_rllib_seeing_a_failure():
    """``register_env(..., on_worker_failure="restart")``: the ShmVectorEnv rebuilds the killed
    worker itself (its episodes end as truncated, NEXT_STEP's way); RLlib sees no env failure, and
    the runner keeps its ShmVectorEnv and the other workers."""
    register_env("vecshm-cartpole-own-restart", "CartPole-v1", on_worker_failure="restart")
    algo = ppo("vecshm-cartpole-own-restart", num_env_runners=1).build_algo()
    try:
        algo.train()
        (before,) = on_runners(algo, describe)
        os.kill(before["workers"][0], signal.SIGKILL)
        result = algo.train()
        (after,) = on_runners(algo, describe)
    finally:
        algo.stop()
    assert not result[ENV_RUNNER_RESULTS].get("num_env_step_failures", 0)
    assert after["workers"][0] != before["workers"][0], "the killed worker was rebuilt"
    assert after["workers"][1:] == before["workers"][1:], "the same ShmVectorEnv and its other workers"


def test_by_default_rllib_restarts_the_runner_and_its_workers_do_not_outlive_it():
    register_env("vecshm-cartpole-runner-restart", "CartPole-v1")
    # RLlib waits delay_between_env_runner_restarts_s (60 s by default) before it restarts a runner
    config = ppo("vecshm-cartpole-runner-restart", num_env_runners=1)
    algo = config.fault_tolerance(delay_between_env_runner_restarts_s=1.0).build_algo()
    try:
        algo.train()
        (before,) = on_runners(algo, describe)
        os.kill(before["workers"][0], signal.SIGKILL)
        # the runner's sample() raises (vecshm's WorkerDiedError); RLlib takes the runner out of
        # service and restarts its actor (restart_failed_env_runners, on by default); training goes on
        result = algo.train()
        assert ENV_RUNNER_RESULTS in result
        assert wait_gone(before["workers"][1:], 60) == [], "the old runner's other vecshm workers are gone"
    finally:
        algo.stop()


def _atari(env_config: dict) -> gym.Env:
    import ale_py
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack

    gym.register_envs(ale_py)
    return wrap_atari_for_new_api_stack(gym.make("ALE/Pong-v5", **env_config), dim=64, framestack=None)


def test_atari_with_rllibs_frame_stacking_connectors():
    from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
    from ray.rllib.connectors.learner.frame_stacking import FrameStackingLearner
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    register_env("vecshm-pong", _atari)
    config = (
        ppo(
            "vecshm-pong",
            num_env_runners=1,
            num_envs=4,
            env_to_module_connector=lambda *_: FrameStackingEnvToModule(num_frames=4),
        )
        .environment(
            "vecshm-pong",
            env_config={"frameskip": 1, "full_action_space": False, "repeat_action_probability": 0.0},
            clip_rewards=True,
        )
        .training(learner_connector=lambda *_: FrameStackingLearner(num_frames=4))
        .rl_module(model_config=DefaultModelConfig(conv_filters=[(16, 4, 2), (32, 4, 2), (64, 4, 2), (128, 4, 2)]))
    )
    algo = config.build_algo()
    try:
        result = algo.train()
        (runner,) = on_runners(algo, describe)
    finally:
        algo.stop()
    assert result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME] >= 256
    assert runner["type"] == "ShmVectorEnv" and runner["num_envs"] == 4
