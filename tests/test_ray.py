"""``RayVecEnv`` on a two-node Ray cluster (both nodes on this machine), against SB3's own classes.

Every test here shares one ``ray.cluster_utils.Cluster``; the references are SB3's ``DummyVecEnv``
and ``SubprocVecEnv``, stepped in lockstep with the same seeds and actions.
"""

from __future__ import annotations

import functools
import multiprocessing.util
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from contextlib import closing

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import (
    ACTION_SPACES,
    SPACES,
    LoadWitness,
    SpaceEnv,
    as_dummy_rewards,
    assert_tree_equal,
    make_space_env,
    process_alive,
    sample_actions,
    wait_gone,
)
from faulty_envs import (
    LockedFactory,
    faulty,
    hangs_then_interrupts,
    healthy,
    interrupted_at,
    pids_left_in,
    raises_in_constructor,
)
from lockstep import lockstep
from stable_baselines3.common.vec_env import DummyVecEnv as SB3DummyVecEnv
from stable_baselines3.common.vec_env import SubprocVecEnv

from vecshm import (
    ActorDiedError,
    AlreadyPendingCallError,
    ClosedError,
    FailedError,
    NoAsyncCallError,
    ShmVecEnv,
    StepTimeoutError,
    WorkerDiedError,
    WorkerError,
)

ray = pytest.importorskip("ray", reason="the Ray tests need vecshm[ray]")
from vecshm.ray import RayVecEnv  # noqa: E402
from vecshm.ray.ending import CLOSE_TIMEOUT  # noqa: E402

# one process of make test's -n runs them all (xdist_group), on the one cluster of the module
pytestmark = [pytest.mark.usefixtures("ray_cluster"), pytest.mark.slow, pytest.mark.xdist_group("ray")]

ON_BOTH_NODES = [{"resources": {"node_a": 1}}, {"resources": {"node_b": 1}}]


def ray_vec_env(env_fns, **options) -> RayVecEnv:
    """Two actors, one on each node, each with one vecshm worker (the machine has 2 cores)."""
    options.setdefault("num_actors", 2)
    options.setdefault("actor_options", ON_BOTH_NODES)
    return RayVecEnv(env_fns, **options)


CASES = [
    ("dict", "discrete"),
    ("tuple", "discrete"),
    ("dict_img", "box"),
    ("frame_u8", "multidiscrete"),
    ("multibinary", "dict"),
]


def actor_and_worker_pids(venv: RayVecEnv) -> list[int]:
    return [host["pid"] for host in venv.hosts] + [p for ps in venv.worker_pids() for p in ps]


def actor_temp_dirs(venv: RayVecEnv) -> list[str]:
    """Each actor's multiprocessing temp folder (``/tmp/pymp-*``: its forkserver's socket lives there)."""
    return ray.get([a.__ray_call__.remote(lambda _: multiprocessing.util.get_temp_dir()) for a in venv.actors])


def assert_step_reports_lost_actor(venv: RayVecEnv, within: float, actor: int, env_indices: list[int]) -> None:
    """The next step raises ActorDiedError within ``within`` seconds, naming ``actor`` and its envs."""
    started = time.monotonic()
    with pytest.raises(ActorDiedError) as error:
        venv.step(np.zeros(venv.num_envs, dtype=np.int64))
    assert time.monotonic() - started < within, "Ray reports a lost actor within seconds"
    assert error.value.env_indices == env_indices
    envs = f"envs {env_indices[0]}-{env_indices[-1]}"
    assert f"Ray actor {actor}" in str(error.value) and envs in str(error.value)


@pytest.mark.parametrize(("obs_key", "act_key"), CASES)
def test_bit_identical_to_sb3_dummy_vec_env(obs_key, act_key):
    # 5 envs over 2 actors (3 + 2): obs, rewards, dones, infos, terminal observations, reset_infos
    fns = [make_space_env(obs_key, act_key, max_steps=4 + i) for i in range(5)]
    with closing(ray_vec_env(fns)) as venv, closing(SB3DummyVecEnv(fns)) as reference:
        assert venv.observation_space == reference.observation_space
        assert lockstep(venv, reference, 20, seed=3, action_space=ACTION_SPACES[act_key]) > 0


def test_sb3_s_rules_are_shm_vec_env_s_exactly():
    """RayVecEnv and ShmVecEnv sit on one SB3 kernel: a call during a pending step is refused alike,
    word for word, and reset during a pending step finishes the step and drops its results on
    both (SubprocVecEnv itself would read the step's answers as the reset's). That the dropped
    step ran shows in what follows: the next step is DummyVecEnv's after step, reset, step."""
    fns = [make_space_env("box_f32", "discrete", max_steps=50) for _ in range(5)]
    actions, next_actions = np.array([0, 1, 2, 0, 1]), np.array([2, 2, 1, 0, 0])
    refused: dict[str, list[str]] = {}
    with (
        closing(ray_vec_env(fns)) as on_ray,
        closing(ShmVecEnv(fns, start_method="fork")) as local,
        closing(SB3DummyVecEnv(fns)) as reference,
    ):
        reference.seed(5)
        reference.reset()
        reference.step(actions)
        expected_reset = reference.reset()
        expected_step = reference.step(next_actions)
        for name, venv in (("RayVecEnv", on_ray), ("ShmVecEnv", local)):
            venv.seed(5)
            venv.reset()
            venv.step_async(actions)
            calls = {
                "get_attr": lambda venv=venv: venv.get_attr("tag"),
                "set_attr": lambda venv=venv: venv.set_attr("tag", 1, [0]),
                "env_method": lambda venv=venv: venv.env_method("render", indices=2),
                "env_is_wrapped": lambda venv=venv: venv.env_is_wrapped(gym.wrappers.TimeLimit),
                "has_attr": lambda venv=venv: venv.has_attr("tag"),
                "step_async": lambda venv=venv: venv.step_async(actions),
            }
            refused[name] = []
            for call in calls.values():
                with pytest.raises(AlreadyPendingCallError) as error:
                    call()
                refused[name].append(str(error.value))
            assert_tree_equal(venv.reset(), expected_reset, f"{name}: reset during a pending step")
            with pytest.raises(NoAsyncCallError):  # the step is no longer pending: its results were dropped
                venv.step_wait()
            obs, rewards, dones, infos = venv.step(next_actions)
            ours = (obs, as_dummy_rewards(rewards), dones)  # (rewards in SubprocVecEnv's dtype, as_dummy_rewards says)
            assert_tree_equal(ours, expected_step[:3], f"{name}: the step after")
    assert refused["RayVecEnv"] == refused["ShmVecEnv"]
    assert refused["ShmVecEnv"][0] == "get_attr() was called while a step is pending; call step_wait() first"


def test_actors_are_placed_on_both_nodes_by_default():
    # SPREAD is the default strategy: two actors go to two nodes without any resource asked for
    with closing(RayVecEnv([healthy] * 4)) as venv:
        assert len(venv.actors) == 2, "one actor per alive node by default"
        assert len({host["node_id"] for host in venv.hosts}) == 2


def test_seed_options_and_calls_with_indices_match_subproc_vec_env():
    fns = [make_space_env("box_f32", "discrete") for _ in range(5)]
    with closing(ray_vec_env(fns)) as venv, closing(SubprocVecEnv(fns)) as reference:
        for v in (venv, reference):
            v.seed(11)
            v.set_options({"level": 3})
        assert_tree_equal(venv.reset(), reference.reset(), "reset")
        assert_tree_equal(list(venv.reset_infos), list(reference.reset_infos), "reset_infos")
        for indices in (None, 4, [4, 0, 2], [-1, 1, 1], range(1, 4)):
            for v in (venv, reference):
                v.set_attr("tag", f"t{indices}", indices)
            assert venv.get_attr("tag") == reference.get_attr("tag")
            assert venv.get_attr("tag", indices) == reference.get_attr("tag", indices)
            assert venv.env_method("get_wrapper_attr", "tag", indices=indices) == reference.env_method(
                "get_wrapper_attr", "tag", indices=indices
            )
            assert venv.env_method("get_wrapper_attr", name="tag", indices=indices) == reference.env_method(
                "get_wrapper_attr", name="tag", indices=indices
            )
        assert venv.env_is_wrapped(gym.wrappers.TimeLimit) == reference.env_is_wrapped(gym.wrappers.TimeLimit)
        assert venv.env_is_wrapped(gym.wrappers.ClipAction, [0, 3]) == [False, False]
        assert venv.has_attr("tag") and not venv.has_attr("no_such_attribute")
        with pytest.raises(AttributeError):
            venv.get_attr("no_such_attribute")
        with pytest.raises(IndexError):
            venv.get_attr("tag", [5])
        assert venv.get_attr("tag", 0) == reference.get_attr("tag", 0), "a failed call leaves the vec env usable"


def test_render_tiles_every_actors_frames_as_sb3():
    fns = [make_space_env("box_f32", "discrete", tag=i) for i in range(3)]
    with closing(ray_vec_env(fns)) as venv, closing(SB3DummyVecEnv(fns)) as reference:
        venv.reset()
        reference.reset()
        assert_tree_equal(venv.get_images(), reference.get_images(), "images")
        assert_tree_equal(venv.render(), reference.render(), "tiled image")


def _train_ppo(vec_env_cls) -> tuple[torch.Tensor, list[float]]:
    """PPO on 4 seeded CartPoles for 4 updates: the trained weights and the episodes' returns."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecMonitor

    returns: list[float] = []

    def record(local: dict, _: dict) -> bool:
        returns.extend(info["episode"]["r"] for info in local["infos"] if "episode" in info)
        return True

    with closing(VecMonitor(make_vec_env("CartPole-v1", n_envs=4, seed=0, vec_env_cls=vec_env_cls))) as venv:
        model = PPO("MlpPolicy", venv, n_steps=128, batch_size=128, n_epochs=4, seed=0, device="cpu")
        model.learn(2048, callback=record)
    return torch.cat([p.detach().flatten() for p in model.policy.parameters()]), returns


def test_sb3_ppo_trains_to_the_same_weights_as_on_sb3_dummy_vec_env():
    """PPO through two actors on two nodes is PPO through SB3's own DummyVecEnv, bit for bit."""
    ours, theirs = _train_ppo(ray_vec_env), _train_ppo(SB3DummyVecEnv)
    assert len(theirs[1]) > 20, "episodes ended and were recorded"
    assert ours[1] == theirs[1], "the episodes' returns differ"
    assert torch.equal(ours[0], theirs[0]), "the trained weights differ"


def test_an_env_that_raises_names_its_global_index():
    fns = [healthy] * 3 + [faulty("raise", fail_at=2)] + [healthy]
    with closing(ray_vec_env(fns)) as venv:
        venv.reset()
        folders = actor_temp_dirs(venv)
        venv.step(np.zeros(5, dtype=np.int64))
        with pytest.raises(WorkerError) as error:
            venv.step(np.zeros(5, dtype=np.int64))
        assert isinstance(error.value, ValueError), "the env's exception type is kept"
        assert error.value.env_index == 3
        assert "env 3 raised builtins.ValueError during step in Ray actor 1" in str(error.value)
        with pytest.raises(FailedError):
            venv.step(np.zeros(5, dtype=np.int64))
    assert [f for f in folders if os.path.exists(f)] == [], "idle actors exit cleanly after a failure too"


def test_an_env_that_cannot_be_built_fails_the_constructor_naming_it():
    with pytest.raises(WorkerError, match="cannot build this env") as error:
        ray_vec_env([healthy, healthy, raises_in_constructor])
    assert error.value.env_index == 2


def test_a_factory_that_cannot_be_sent_to_the_actors_is_named():
    with pytest.raises(TypeError, match=r"env_fns\[2\] cannot be sent to Ray actor 1: TypeError: cannot pickle"):
        ray_vec_env([healthy, healthy, LockedFactory()])


def test_shared_data_is_per_machine_and_refused_with_the_way_to_share_it_on_each_node():
    import functools

    import numpy as np

    import vecshm

    shared = vecshm.share(np.arange(10.0))
    with pytest.raises(ValueError, match=r"env_fns\[2:4\] hold arrays shared with vecshm.share, which is per machine"):
        ray_vec_env([healthy, healthy, functools.partial(healthy_holding, shared), healthy])


def healthy_holding(data):
    return healthy()


def test_ctrl_c_while_the_actors_build_their_envs_ends_them_at_once(tmp_path):
    """Actors still building their envs would answer a close only once built (never, here): they
    are killed at once instead of after the 10 s given to a close. Ctrl-C comes from the envs'
    constructors, once both actors' workers are in there."""
    interrupts = functools.partial(hangs_then_interrupts, os.getpid(), str(tmp_path), 2)
    with pytest.raises(KeyboardInterrupt):
        ray_vec_env([interrupts] * 2)
    assert time.time() - interrupted_at(str(tmp_path)) < CLOSE_TIMEOUT
    assert len(pids_left_in(str(tmp_path))) == 4  # two actors, and the vecshm worker in each
    assert wait_gone(pids_left_in(str(tmp_path)), 30) == []


def test_close_with_a_hung_step_in_flight_kills_its_actor_after_a_second():
    """An actor that has not answered its last call (a step left in flight on an env that hangs, or
    one interrupted by Ctrl-C) would run a close only after it: it gets 1 s, then is killed."""
    venv = ray_vec_env([healthy] * 2 + [faulty("hang", fail_at=2)] * 2)
    venv.reset()
    venv.step(np.zeros(4, dtype=np.int64))
    pids = actor_and_worker_pids(venv)
    venv.step_async(np.zeros(4, dtype=np.int64))  # envs 2-3 hang in it
    started = time.monotonic()
    venv.close()
    assert time.monotonic() - started < CLOSE_TIMEOUT
    assert wait_gone(pids, 30) == []


def test_a_vecshm_worker_killed_inside_an_actor_names_its_envs():
    with closing(ray_vec_env([healthy] * 4)) as venv:
        venv.reset()
        worker = venv.worker_pids()[1][0]
        os.kill(worker, signal.SIGKILL)
        with pytest.raises(WorkerDiedError) as error:
            venv.step(np.zeros(4, dtype=np.int64))
        assert error.value.env_indices == [2, 3]
        assert "SIGKILL" in str(error.value) and "Ray actor 1" in str(error.value)


def test_an_actor_killed_mid_run_is_an_error_naming_its_envs_within_seconds():
    venv = ray_vec_env([healthy] * 4)
    venv.reset()
    pids = actor_and_worker_pids(venv)
    os.kill(venv.hosts[0]["pid"], signal.SIGKILL)
    assert_step_reports_lost_actor(venv, 30, actor=0, env_indices=[0, 1])
    with pytest.raises(FailedError):
        venv.reset()
    venv.close()
    assert wait_gone(pids, 30) == [], "the other actor and every vecshm worker end with close()"


def test_restart_policy_rebuilds_a_dead_actor_and_truncates_its_episodes():
    with closing(ray_vec_env([healthy] * 4, on_actor_failure="restart")) as venv:
        venv.reset()
        last_obs, *_ = venv.step(np.zeros(4, dtype=np.int64))
        os.kill(venv.hosts[1]["pid"], signal.SIGKILL)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            obs, rewards, dones, infos = venv.step(np.zeros(4, dtype=np.int64))
        assert any("Ray actor 1" in str(w.message) and "hosting envs 2-3," in str(w.message) for w in caught)
        assert dones.tolist() == [False, False, True, True]
        for i in (2, 3):
            assert infos[i]["TimeLimit.truncated"] and infos[i]["actor_restarted"]
            assert_tree_equal(infos[i]["terminal_observation"], last_obs[i], f"terminal obs of env {i}")
        assert rewards[2:].tolist() == [0.0, 0.0]
        venv.step(np.zeros(4, dtype=np.int64))  # and it goes on


def test_close_leaves_no_actor_or_worker_and_later_use_is_refused():
    venv = ray_vec_env([healthy] * 4)
    venv.reset()
    pids = actor_and_worker_pids(venv)
    actors = list(venv.actors)
    folders = actor_temp_dirs(venv)
    venv.close()
    assert not [p for p in pids if process_alive(p)], "close() returns once its local processes are gone"
    assert [f for f in folders if os.path.exists(f)] == [], "the actors exited cleanly: no /tmp/pymp-* left"
    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.describe.remote())
    with pytest.raises(ClosedError):
        venv.step(np.zeros(4, dtype=np.int64))
    venv.close()  # twice is fine


def test_importing_vecshm_does_not_import_ray():
    code = "import sys, vecshm; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False"]


def test_a_lost_node_is_an_error_naming_the_envs_it_hosted(ray_cluster):
    node = ray_cluster.add_node(num_cpus=2, resources={"node_c": 100})
    ray_cluster.wait_for_nodes()
    options = [{"resources": {"node_a": 1}}, {"resources": {"node_c": 1}}]
    venv = RayVecEnv([healthy] * 5, num_actors=2, actor_options=options)
    try:
        venv.reset()
        ray_cluster.remove_node(node)
        assert_step_reports_lost_actor(venv, 60, actor=1, env_indices=[3, 4])
    finally:
        venv.close()


def test_actors_that_cannot_be_placed_fail_the_constructor_instead_of_hanging():
    with pytest.raises(StepTimeoutError, match="was it placed"):
        RayVecEnv([healthy] * 2, num_actors=1, actor_options={"resources": {"no_such_resource": 1}}, start_timeout=2)


def test_an_actor_that_does_not_answer_within_actor_timeout_is_named_and_stopped():
    venv = ray_vec_env([healthy] * 2 + [faulty("hang", fail_at=1)] * 2, actor_timeout=3)
    venv.reset()
    pids = actor_and_worker_pids(venv)
    with pytest.raises(StepTimeoutError) as error:
        venv.step(np.zeros(4, dtype=np.int64))
    assert error.value.env_indices == [2, 3] and "Ray actor 1" in str(error.value)
    venv.close()
    assert wait_gone(pids, 30) == [], "the stuck actor and its workers are gone after close()"


DRIVER = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np, ray
from faulty_envs import faulty, healthy
from vecshm.ray import RayVecEnv

if __name__ == "__main__":
    ray.init(address={address!r}, log_to_driver=False)
    venv = RayVecEnv([healthy, healthy, faulty("hang", fail_at=1), healthy], num_actors=2, actor_options={options!r})
    venv.reset()
    pids = [host["pid"] for host in venv.hosts] + [p for ps in venv.worker_pids() for p in ps]
    print(" ".join(map(str, pids)), flush=True)
    venv.step(np.zeros(4, dtype=np.int64))  # env 2 hangs: the driver waits here until it is killed
"""


def test_actors_and_their_workers_end_when_the_driver_is_killed(ray_cluster):
    tests = os.path.dirname(os.path.abspath(__file__))
    script = DRIVER.format(tests=tests, address=ray_cluster.address, options=ON_BOTH_NODES)
    driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in driver.stdout.readline().split()]
        assert len(pids) >= 4, "two actors and their vecshm workers"
    finally:
        driver.kill()
        driver.wait()
    # Ray ends the actors a dead driver owned; their workers die with them (parent-death signal)
    assert wait_gone(pids, 60) == []


def test_a_factory_the_actors_cannot_load_is_an_error_naming_the_actor(tmp_path, monkeypatch):
    source = "import gymnasium as gym\n\ndef make():\n    return gym.make('CartPole-v1')\n"
    (tmp_path / "driver_only_envs.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))  # importable here, not on the Ray workers
    import driver_only_envs

    with pytest.raises(ModuleNotFoundError, match="driver_only_envs") as error:
        ray_vec_env([driver_only_envs.make] * 2)
    assert isinstance(error.value, WorkerError)
    assert re.match(
        r"env ([01]) raised builtins.ModuleNotFoundError during env construction in Ray actor \1 ", str(error.value)
    )


def test_call_arguments_and_results_cross_the_actors_without_being_loaded(tmp_path):
    """SB3's calls reach the workers, and their results the driver, still pickled: an actor that
    loaded ``env_is_wrapped(Monitor)``'s class imported PyTorch for it (PSS 59 -> 200 MiB)."""
    with closing(ray_vec_env([healthy] * 3)) as venv:
        workers = {pid for pids in venv.worker_pids() for pid in pids}
        venv.set_attr("witness", LoadWitness(str(tmp_path)), indices=[0, 2])
        assert LoadWitness.loaded_by(tmp_path) == workers, "loaded by the workers of envs 0 and 2 alone"
        assert len(venv.get_attr("witness", indices=[2, 0])) == 2
        assert LoadWitness.loaded_by(tmp_path) == {os.getpid()}, "the results are loaded by the driver alone"
        venv.env_method("reset", options={"witness": LoadWitness(str(tmp_path))}, indices=1)  # on actor 0
        assert LoadWitness.loaded_by(tmp_path) == set(venv.worker_pids()[0])


def test_a_call_argument_the_workers_cannot_load_is_an_error_naming_the_envs(tmp_path, monkeypatch):
    (tmp_path / "driver_only_values.py").write_text("class Value:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # importable here, not on the Ray workers
    import driver_only_values

    with closing(ray_vec_env([healthy] * 3)) as venv:
        with pytest.raises(ModuleNotFoundError, match="driver_only_values") as error:
            venv.set_attr("value", driver_only_values.Value(), indices=[2])
        assert isinstance(error.value, WorkerError) and error.value.env_index == 2
        assert "env 2 raised builtins.ModuleNotFoundError during set_attr in Ray actor 1 " in str(error.value)
        assert venv.get_attr("t") == [0, 0, 0], "a failed call leaves the vec env usable, as in SubprocVecEnv"


TUPLE_ACTIONS = gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,), np.float32)))


def tuple_action_env() -> gym.Env:
    return gym.wrappers.TimeLimit(SpaceEnv(SPACES["box_f32"], TUPLE_ACTIONS), max_episode_steps=6)


def test_tuple_actions_as_one_batch_or_one_per_env_match_sb3_dummy_vec_env():
    fns = [tuple_action_env] * 3
    with closing(ray_vec_env(fns)) as venv, closing(SB3DummyVecEnv(fns)) as reference:
        venv.seed(5)
        reference.seed(5)
        assert_tree_equal(venv.reset(), reference.reset(), "reset")
        rng = np.random.default_rng(0)
        for t in range(10):
            batch = sample_actions(TUPLE_ACTIONS, 3, rng)  # Gymnasium's form: one array per subspace
            per_env = [tuple(leaf[i] for leaf in batch) for i in range(3)]  # SB3's form: one tuple per env
            expected = reference.step(per_env)
            obs, rewards, dones, infos = venv.step(batch if t % 2 else per_env)
            assert_tree_equal((obs, as_dummy_rewards(rewards), dones, infos), expected, f"step {t}")


def test_stats_are_each_actor_s_counted_as_a_dummy_vec_env_loop_counts_and_logged_per_actor():
    from vecshm.callbacks import logged_figures

    fns = [make_space_env("box_f32", "discrete", max_steps=3 + i) for i in range(5)]
    with closing(ray_vec_env(fns, stats=True)) as venv, closing(SB3DummyVecEnv(fns)) as reference:
        venv.reset()
        reference.reset()
        episodes = np.zeros(5, int)
        for _ in range(12):
            actions = np.zeros(5, dtype=np.int64)
            venv.step(actions)
            episodes += reference.step(actions)[2]
        stats = venv.stats
        assert [stop - start for start, stop in venv.actor_envs] == [len(actor.envs) for actor in stats] == [3, 2]
        assert [env.steps for actor in stats for env in actor.envs] == [12] * 5
        assert [env.episodes for actor in stats for env in actor.envs] == episodes.tolist()
        figures = logged_figures(stats)
        assert figures["vecshm/actor_0/steps"] == 36.0 and figures["vecshm/actor_1/steps"] == 24.0
        venv.reset_stats()
        assert [actor.steps for actor in venv.stats] == [0, 0]
