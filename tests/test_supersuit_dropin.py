"""SuperSuit's two vectorizing functions, checked on SuperSuit itself and on vecshm's: the cases come
from what SuperSuit documents and tests (its ``test/test_vector/``, rewritten here: its tests are
not in its sdist) and from what its users' code does. Every case runs on both; a case that passes on
SuperSuit passes on vecshm, except where docs/multiagent.md's table says vecshm differs, and why:

- ``@vecshm_differs(row)``: SuperSuit's behaviour, which vecshm changes (strict xfail on vecshm);
  the test of what vecshm does instead sits beside it;
- ``@supersuit_fails(row)``: what SuperSuit gets wrong, which vecshm gets right (strict xfail on SuperSuit).

SuperSuit runs in this process (``num_cpus=0``, its in-process vec env), vecshm on two worker
processes. The lockstep tests at the end compare the two row for row on real envs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest import assert_tree_equal

pytest.importorskip("pettingzoo")
ss = pytest.importorskip("supersuit")

from ma_envs import DictAgents, GymAgent, MultiDiscreteAgents, RandomDeaths  # noqa: E402
from mpe2 import simple_spread_v3, simple_world_comm_v3  # noqa: E402
from pettingzoo.butterfly import knights_archers_zombies_v11, pistonball_v6  # noqa: E402

import vecshm.pettingzoo as vp  # noqa: E402


@dataclass
class Impl:
    """One implementation of SuperSuit's functions: SuperSuit's own (in this process), or vecshm's
    (on two worker processes)."""

    name: str

    @property
    def module(self) -> Any:
        return ss if self.name == "supersuit" else vp

    def to_vec(self, env: Any) -> Any:
        return self.module.pettingzoo_env_to_vec_env_v1(env)

    def concat(self, env: Any, copies: int, base_class: str = "gymnasium", num_cpus: int | None = None) -> Any:
        if self.name == "supersuit":
            return ss.concat_vec_envs_v1(env, copies, num_cpus=num_cpus or 0, base_class=base_class)
        return vp.concat_vec_envs_v1(env, copies, num_cpus=num_cpus or 2, base_class=base_class, start_method="fork")


def vecshm_differs(row: str) -> pytest.MarkDecorator:
    return pytest.mark.vecshm_differs(row)


def supersuit_fails(row: str) -> pytest.MarkDecorator:
    return pytest.mark.supersuit_fails(row)


@pytest.fixture(params=["supersuit", "vecshm"])
def impl(request: pytest.FixtureRequest) -> Impl:
    differs, fails = (
        request.node.get_closest_marker("vecshm_differs"),
        request.node.get_closest_marker("supersuit_fails"),
    )
    if differs and request.param == "vecshm":
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"vecshm differs: {differs.args[0]}"))
    if fails and request.param == "supersuit":
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"SuperSuit fails: {fails.args[0]}"))
    return Impl(request.param)


@pytest.fixture
def closing() -> Any:
    """Closes every vec env a test registers, whatever happens."""
    opened: list[Any] = []
    yield opened.append
    for venv in opened:
        venv.close()


def random_actions(venv: Any, rng_seed: int) -> list[Any]:
    """A list of per-row actions, as SuperSuit's tests and tutorials build them."""
    venv.action_space.seed(rng_seed)
    return [venv.action_space.sample() for _ in range(venv.num_envs)]


# -- pettingzoo_env_to_vec_env_v1: one copy, its agents as rows ----------------------------------


def test_one_copy_steps_by_itself_each_agent_a_row(impl, closing):
    env = impl.to_vec(simple_spread_v3.parallel_env(max_cycles=10))
    closing(env)
    assert env.num_envs == 3
    assert env.observation_space == simple_spread_v3.parallel_env().observation_space("agent_0")
    obs, infos = env.reset(seed=0)
    assert obs.shape == (3, 18) and isinstance(infos, list) and len(infos) == 3
    ended = 0
    for t in range(25):
        obs, rewards, terminations, truncations, infos = env.step(random_actions(env, t))
        assert len(obs) == len(rewards) == len(terminations) == len(truncations) == len(infos) == 3
        assert rewards.dtype == np.float32
        dones = np.asarray(terminations) | np.asarray(truncations)
        assert dones.all() or not dones.any()  # no agent death, only the env's end
        ended += int(dones.all())
    assert ended == 2


def test_one_copy_takes_step_async_and_step_wait(impl, closing):
    env = impl.to_vec(simple_spread_v3.parallel_env(max_cycles=10))
    closing(env)
    env.reset(seed=1)
    env.step_async(random_actions(env, 0))
    obs, rewards, *_ = env.step_wait()
    assert obs.shape == (3, 18) and rewards.shape == (3,)


def test_agents_whose_spaces_differ_are_an_assertion_error(impl):
    with pytest.raises(AssertionError, match="pad_observations_v0"):
        impl.to_vec(simple_world_comm_v3.parallel_env())


def test_what_is_no_parallel_env_is_an_assertion_error(impl):
    with pytest.raises(AssertionError):
        impl.to_vec(gym.make("CartPole-v1"))


@vecshm_differs("agents that die")
def test_agents_that_die_without_black_death_are_an_assertion_error(impl, closing):
    env = impl.to_vec(RandomDeaths(join_late=False, max_len=40))
    closing(env)
    env.reset(seed=0)
    with pytest.raises(AssertionError):
        for t in range(40):
            env.step(random_actions(env, t))


def test_black_death_keeps_every_agent_a_row(impl, closing):
    env = impl.to_vec(ss.black_death_v3(knights_archers_zombies_v11.parallel_env(max_cycles=60)))
    closing(env)
    env.reset(seed=0)
    for t in range(60):
        obs, *_ = env.step(random_actions(env, t))
        assert obs.shape[0] == env.num_envs


@pytest.mark.parametrize("num_cpus", [None, 1])
def test_dict_and_tuple_agent_spaces_come_as_batched_dicts_and_tuples(impl, num_cpus, closing):
    """SuperSuit's ``test_vector_dict``, alone and concatenated: Dict actions concatenated by
    Gymnasium's ``concatenate``, each row's observation in the agent's space."""
    env = (
        impl.to_vec(DictAgents()) if num_cpus is None else impl.concat(impl.to_vec(DictAgents()), 2, num_cpus=num_cpus)
    )
    closing(env)
    env.reset(seed=2)
    space = env.action_space
    for t in range(20):
        actions = gym.vector.utils.concatenate(
            space, random_actions(env, t), gym.vector.utils.create_empty_array(space, env.num_envs)
        )
        obs, rewards, terminations, truncations, infos = env.step(actions)
        assert obs["feature"][1][0] == 1
        assert {"feature": obs["feature"][1], "id": tuple(o[1] for o in obs["id"])} in env.observation_space
        per_copy = np.asarray(truncations).reshape(-1, 5)
        assert (per_copy.all(axis=1) | ~per_copy.any(axis=1)).all()  # a copy's agents end together


@supersuit_fails("Dict actions as a list of dicts")
def test_dict_actions_may_be_a_list_of_per_row_dicts(impl, closing):
    env = impl.concat(impl.to_vec(DictAgents()), 2)
    closing(env)
    env.reset(seed=3)
    obs, rewards, *_ = env.step(random_actions(env, 0))
    assert rewards.shape == (10,)


def test_multi_discrete_actions_may_be_a_list_of_per_row_actions(impl, closing):
    env = impl.concat(impl.to_vec(MultiDiscreteAgents()), 2)
    closing(env)
    env.reset(seed=4)
    assert env.action_space == gym.spaces.MultiDiscrete([3, 2])
    for t in range(5):
        env.step(random_actions(env, t))
        env.step(np.stack(random_actions(env, t)))


# -- concat_vec_envs_v1: copies, SuperSuit's shape ------------------------------------------------


@pytest.mark.parametrize("base_class", ["gymnasium", "stable_baselines3"])
def test_spaces_are_one_agent_s_and_rows_count_every_agent_of_every_copy(impl, base_class, closing):
    env = pistonball_v6.parallel_env(n_pistons=5, max_cycles=5)
    venv = impl.concat(impl.to_vec(env), 3, base_class=base_class)
    closing(venv)
    assert venv.num_envs == 15
    assert venv.observation_space == env.observation_space("piston_0")
    assert venv.action_space == env.action_space("piston_0")


@pytest.mark.parametrize("base_class", ["gymnasium", "stable_baselines3"])
def test_the_env_s_metadata_and_render_mode_are_handed_on(impl, base_class, closing):
    """The last line of PettingZoo's Pistonball tutorial: ``env.unwrapped.metadata['name']``."""
    env = pistonball_v6.parallel_env(n_pistons=4, max_cycles=5, render_mode="rgb_array")
    venv = impl.concat(impl.to_vec(env), 2, base_class=base_class)
    closing(venv)
    assert venv.unwrapped.metadata["name"] == "pistonball_v6"
    assert venv.unwrapped.metadata.get("render_fps") == env.metadata["render_fps"]
    assert venv.render_mode == "rgb_array"


def test_render_is_the_first_copy_s_image(impl, closing):
    env = pistonball_v6.parallel_env(n_pistons=4, max_cycles=5, render_mode="rgb_array")
    venv = impl.concat(impl.to_vec(env), 2)
    closing(venv)
    venv.reset(seed=0)
    image = venv.render()
    reference = pistonball_v6.parallel_env(n_pistons=4, max_cycles=5, render_mode="rgb_array")
    reference.reset(seed=0)
    assert_tree_equal(image, reference.render())


@vecshm_differs("SB3: render()")
def test_sb3_render_is_the_first_copy_s_image(impl, closing):
    env = pistonball_v6.parallel_env(n_pistons=4, max_cycles=5, render_mode="rgb_array")
    venv = impl.concat(impl.to_vec(env), 2, base_class="stable_baselines3")
    closing(venv)
    venv.reset()
    reference = pistonball_v6.parallel_env(n_pistons=4, max_cycles=5, render_mode="rgb_array")
    reference.reset()
    with pytest.warns(UserWarning):
        assert venv.render().shape == reference.render().shape


def test_sb3_render_tiles_every_copy_s_image_as_sb3_s_vec_envs(closing):
    from stable_baselines3.common.vec_env import DummyVecEnv

    env = pistonball_v6.parallel_env(n_pistons=4, max_cycles=5, render_mode="rgb_array")
    venv = vp.concat_vec_envs_v1(vp.pettingzoo_env_to_vec_env_v1(env), 2, 2, "stable_baselines3", start_method="fork")
    closing(venv)
    venv.seed(0)
    venv.reset()

    class Image(gym.Env):  # an env whose render is one copy's image, for SB3's own tiling
        render_mode = "rgb_array"
        observation_space = action_space = gym.spaces.Discrete(1)

        def __init__(self, image: np.ndarray) -> None:
            self.image = image

        def render(self) -> np.ndarray:
            return self.image

    copies = [pistonball_v6.parallel_env(n_pistons=4, max_cycles=5, render_mode="rgb_array") for _ in range(2)]
    images = [copy.reset(seed=k) and copy.render() for k, copy in enumerate(copies)]
    assert_tree_equal(venv.render(), DummyVecEnv([lambda image=image: Image(image) for image in images]).render())


def test_observations_returned_are_not_changed_by_later_steps(impl, closing):
    """SuperSuit's ``test_multiproc_buffer``: what a step returned stays as it was."""
    venv = impl.concat(impl.to_vec(simple_spread_v3.parallel_env(max_cycles=10)), 2)
    closing(venv)
    obs, _ = venv.reset(seed=5)
    for t in range(12):
        kept = obs.copy()
        new_obs, *_ = venv.step(random_actions(venv, t))
        assert_tree_equal(obs, kept)
        obs = new_obs


def test_copies_reset_without_a_seed_start_apart(impl, closing):
    """SuperSuit's ``test_inital_state_dissimilarity``."""
    venv = impl.concat(impl.to_vec(simple_spread_v3.parallel_env(max_cycles=10)), 2)
    closing(venv)
    obs, _ = venv.reset()
    assert not np.array_equal(obs[:3], obs[3:])


@supersuit_fails("seeding")
def test_rows_do_not_depend_on_the_number_of_processes(impl, closing):
    """SuperSuit's ``test_multiagent_mutliproc_single_proc_equivalency``, seeded: SuperSuit seeds
    process ``i``'s ``j``-th copy with ``seed + i + j``, so its rows change with ``num_cpus``."""
    runs = []
    for num_cpus in (1, 3):
        venv = impl.concat(impl.to_vec(simple_spread_v3.parallel_env(max_cycles=10)), 3, num_cpus=num_cpus)
        closing(venv)
        runs.append(venv)
    first = [venv.reset(seed=51)[0] for venv in runs]
    assert_tree_equal(first[0], first[1])
    for t in range(15):
        actions = random_actions(runs[0], t)
        one, other = (venv.step(actions) for venv in runs)
        for a, b in zip(one[:4], other[:4]):
            assert_tree_equal(np.asarray(a), np.asarray(b), f"step {t}")


# -- env_is_wrapped --------------------------------------------------------------------------------


@pytest.mark.parametrize("num_cpus", [None, 2])
def test_env_is_wrapped_answers_for_each_copy_of_a_gymnasium_env(impl, num_cpus, closing):
    """SuperSuit's ``test_env_is_wrapped``: a Gymnasium env's wrappers, per copy."""
    venv = impl.concat(gym.wrappers.ClipAction(gym.make("Pendulum-v1")), 3, num_cpus=num_cpus)
    closing(venv)
    assert venv.env_is_wrapped(gym.wrappers.ClipAction) == [True] * 3
    assert venv.env_is_wrapped(gym.wrappers.RescaleAction) == [False] * 3


def test_env_is_wrapped_of_a_pettingzoo_env_in_a_gymnasium_wrapper_class_is_false(impl, closing):
    venv = impl.concat(impl.to_vec(simple_spread_v3.parallel_env()), 3)
    closing(venv)
    assert venv.env_is_wrapped(gym.wrappers.ClipAction) == [False] * 9


@vecshm_differs("env_is_wrapped of PettingZoo envs")
def test_env_is_wrapped_is_false_for_every_pettingzoo_wrapper(impl, closing):
    venv = impl.concat(impl.to_vec(ss.dtype_v0(simple_spread_v3.parallel_env(), np.float64)), 2)
    closing(venv)
    assert venv.env_is_wrapped(type(ss.dtype_v0(simple_spread_v3.parallel_env(), np.float64))) == [False] * 6


def test_env_is_wrapped_names_pettingzoo_and_supersuit_wrappers_too(closing):
    from pettingzoo.utils.wrappers import OrderEnforcingWrapper

    wrapped = ss.dtype_v0(simple_spread_v3.parallel_env(), np.float64)
    for base_class in ("gymnasium", "stable_baselines3"):
        venv = vp.concat_vec_envs_v1(wrapped, 2, 2, base_class, start_method="fork")
        closing(venv)
        assert venv.env_is_wrapped(type(wrapped)) == [True] * 6
        assert venv.env_is_wrapped(OrderEnforcingWrapper) == [True] * 6  # (the AEC env the parallel one came from)
        assert venv.env_is_wrapped(gym.Wrapper) == [False] * 6


# -- what vecshm takes that SuperSuit cannot ------------------------------------------------------


@supersuit_fails("plain Gymnasium envs")
def test_a_gymnasium_env_steps_one_row_per_copy(impl, closing):
    venv = impl.concat(gym.make("MountainCarContinuous-v0"), 3)
    closing(venv)
    obs, infos = venv.reset(seed=0)
    assert obs.shape == (3, 2) and len(infos) == 3
    obs, rewards, *_ = venv.step([venv.action_space.sample() for _ in range(3)])
    assert rewards.shape == (3,)


@supersuit_fails("Gymnasium's vector wrappers")
def test_gymnasium_s_normalize_observation_takes_it(impl, closing):
    """SuperSuit's ``test_vec_env_normalize_obs``, on Gymnasium 1.x's vector wrapper (which reads
    ``single_observation_space``)."""
    from gymnasium.wrappers.vector import NormalizeObservation

    venv = impl.concat(impl.to_vec(pistonball_v6.parallel_env(n_pistons=4, max_cycles=5)), 4)
    closing(venv)
    obs, _ = venv.reset(seed=0)
    normalized, _ = NormalizeObservation(venv).reset(seed=0)
    assert normalized.shape == obs.shape and np.ptp(obs) > 1
    assert np.abs(normalized.mean(axis=0)).max() < 1e-2  # each pixel normalized over the rows


def test_bad_base_class_is_a_value_error(impl):
    with pytest.raises(ValueError, match="base_class"):
        impl.concat(impl.to_vec(simple_spread_v3.parallel_env()), 2, base_class="rllib")


@supersuit_fails("flags")
@pytest.mark.parametrize("base_class", ["gymnasium", "stable_baselines3"])
def test_flags_are_bool_arrays(impl, base_class, closing):
    venv = impl.concat(impl.to_vec(simple_spread_v3.parallel_env(max_cycles=5)), 2, base_class=base_class)
    closing(venv)
    venv.reset()
    flags = venv.step(np.stack(random_actions(venv, 0)))[2:-1]
    assert all(flag.dtype == np.bool_ for flag in flags)


# -- base_class="stable_baselines3" ---------------------------------------------------------------


def test_sb3_s_vec_env_steps_rows_and_trains_a_ppo(impl, closing):
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecEnv

    venv = impl.concat(impl.to_vec(simple_spread_v3.parallel_env(max_cycles=10)), 2, base_class="stable_baselines3")
    closing(venv)
    assert isinstance(venv, VecEnv) and venv.num_envs == 6
    obs = venv.reset()
    assert obs.shape == (6, 18) and len(venv.reset_infos) == 6
    obs, rewards, dones, infos = venv.step(np.stack(random_actions(venv, 0)))
    assert dones.shape == (6,) and len(infos) == 6
    PPO("MlpPolicy", venv, n_steps=16, batch_size=48, n_epochs=1, device="cpu").learn(96)


@supersuit_fails("SB3: seed()")
def test_sb3_reset_takes_a_seed_and_ppo_a_seed(impl, closing):
    from stable_baselines3 import PPO

    venv = impl.concat(impl.to_vec(simple_spread_v3.parallel_env(max_cycles=10)), 2, base_class="stable_baselines3")
    closing(venv)
    first = venv.reset(seed=3)
    assert_tree_equal(venv.reset(seed=3), first)
    PPO("MlpPolicy", venv, n_steps=16, batch_size=48, n_epochs=1, seed=0, device="cpu").learn(48)


@supersuit_fails("SB3: TimeLimit.truncated")
def test_sb3_infos_say_whether_an_episode_was_cut_by_its_time_limit(impl, closing):
    venv = impl.concat(impl.to_vec(simple_spread_v3.parallel_env(max_cycles=4)), 2, base_class="stable_baselines3")
    closing(venv)
    venv.reset()
    for t in range(4):
        _, _, dones, infos = venv.step(np.stack(random_actions(venv, t)))
    assert dones.all() and all(info["TimeLimit.truncated"] is True for info in infos)


@vecshm_differs("SB3: reset_infos")
def test_sb3_an_ended_copy_s_step_infos_hold_its_reset_s_info(impl, closing):
    venv = impl.concat(impl.to_vec(DictAgents()), 1, base_class="stable_baselines3")
    closing(venv)
    venv.reset()
    for t in range(8):
        _, _, dones, infos = venv.step(sb3_dict_actions(venv, t))
        if dones.all():
            break
    assert [info["t"] for info in infos] == [0] * 5  # the reset's, over the step's


def test_sb3_an_ended_copy_s_step_infos_are_the_step_s_and_its_reset_s_in_reset_infos(closing):
    venv = vp.concat_vec_envs_v1(vp.pettingzoo_env_to_vec_env_v1(DictAgents()), 1, 1, "stable_baselines3")
    closing(venv)
    venv.reset()
    for t in range(1, 9):
        _, _, dones, infos = venv.step(sb3_dict_actions(venv, t))
        if dones.all():
            break
    assert [info["t"] for info in infos] == [t] * 5 and [info["t"] for info in venv.reset_infos] == [0] * 5


def sb3_dict_actions(venv: Any, seed: int) -> dict[str, np.ndarray]:
    space = venv.action_space
    return gym.vector.utils.concatenate(
        space, random_actions(venv, seed), gym.vector.utils.create_empty_array(space, venv.num_envs)
    )


@supersuit_fails("SB3: calls and indices")
def test_sb3_get_attr_and_env_method_honour_indices(impl, closing):
    venv = impl.concat(impl.to_vec(RandomDeaths(join_late=False, deaths=False)), 2, base_class="stable_baselines3")
    closing(venv)
    venv.reset()
    assert venv.get_attr("max_len", indices=[0, 5]) == [12, 12]
    assert venv.env_method("agent_count", indices=[6]) == [4]


# -- lockstep: vecshm's rows and infos are SuperSuit's -------------------------------------------

LOCKSTEP = {
    "pistonball": lambda: pistonball_v6.parallel_env(n_pistons=6, max_cycles=6),
    "kaz_black_death": lambda: ss.black_death_v3(knights_archers_zombies_v11.parallel_env(max_cycles=8)),
    "simple_spread": lambda: simple_spread_v3.parallel_env(max_cycles=5),
    "simple_world_comm": lambda: ss.pad_action_space_v0(
        ss.pad_observations_v0(simple_world_comm_v3.parallel_env(max_cycles=5))
    ),
    "dict_agents": DictAgents,
    "cartpole": lambda: gym.make("CartPole-v1", max_episode_steps=9),
}


@pytest.mark.parametrize("name", list(LOCKSTEP))
def test_rows_and_infos_are_supersuit_s_in_lockstep(name, closing):
    """Observations, rewards, flags and infos (``terminal_observation``, the reset's info merged in)
    identical to SuperSuit's in-process vec env, step by step over episodes' ends, for 3 copies on
    2 worker processes. A Gymnasium env's reference is SuperSuit's own over it as a one-agent
    ParallelEnv (SuperSuit fails on the env itself, see above)."""
    env = LOCKSTEP[name]()
    theirs = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(GymAgent(env) if name == "cartpole" else env), 3)
    ours = vp.concat_vec_envs_v1(env if name == "cartpole" else vp.pettingzoo_env_to_vec_env_v1(env), 3, 2,
                                 start_method="fork")  # fmt: skip
    closing(ours)
    closing(theirs)
    assert (ours.num_envs, ours.observation_space, ours.action_space) == (
        theirs.num_envs, theirs.observation_space, theirs.action_space,
    )  # fmt: skip
    for mine, reference in zip(ours.reset(seed=7), theirs.reset(seed=7)):
        assert_tree_equal(mine, reference, "reset")
    ended = 0
    for t in range(16):
        actions = (
            sb3_dict_actions(ours, t) if isinstance(ours.action_space, gym.spaces.Dict) else random_actions(ours, t)
        )
        obs, rewards, terminations, truncations, infos = ours.step(actions)
        r_obs, r_rewards, r_terminations, r_truncations, r_infos = theirs.step(actions)
        where = f"{name} step {t}"
        assert_tree_equal(obs, r_obs, where)
        assert_tree_equal(rewards, r_rewards, where)
        assert_tree_equal(terminations, r_terminations.astype(bool), where)  # (its in-process flags: uint8)
        assert_tree_equal(truncations, r_truncations.astype(bool), where)
        assert_tree_equal(infos, r_infos, where)
        ended += sum("terminal_observation" in info for info in infos)
    assert ended  # episodes ended, and their infos matched too


def test_agents_that_die_are_zero_rows_with_their_last_observation_in_their_infos(closing):
    """Where SuperSuit raises: an agent done while its copy goes on has its last observation in its
    info's ``terminal_observation``; from the next step its row is zeros with reward 0, and
    ``present`` False."""
    env = RandomDeaths(join_late=False, max_len=30, info=False)
    venv = vp.concat_vec_envs_v1(vp.pettingzoo_env_to_vec_env_v1(env), 2, 2, start_method="fork")
    closing(venv)
    venv.reset(seed=9)
    died, gone = 0, np.zeros(8, bool)
    for t in range(30):
        obs, rewards, terminations, truncations, infos = venv.step(random_actions(venv, t))
        done = terminations | truncations
        copy_ended = ((done | gone).reshape(2, 4).all(axis=1) & done.reshape(2, 4).any(axis=1)).repeat(4)
        absent = gone & ~copy_ended  # (a copy that ended is reset: its rows are all there again)
        assert not (venv.present & absent).any() and not obs[absent].any() and not rewards[absent].any()
        for r in np.flatnonzero(done & ~copy_ended):
            assert_tree_equal(infos[r]["terminal_observation"], obs[r])
            died += 1
        gone = (gone | (done & ~copy_ended)) & ~copy_ended
    assert died


def test_num_cpus_0_is_vecshm_s_default_plan(closing):
    venv = vp.concat_vec_envs_v1(vp.pettingzoo_env_to_vec_env_v1(simple_spread_v3.parallel_env()), 4, 0)
    closing(venv)
    assert len(venv.processes) == venv.plan.num_processes >= 1  # worker processes, none stepping in here


@supersuit_fails("render_mode with processes")
def test_render_mode_is_the_env_s_with_processes(impl, closing):
    env = pistonball_v6.parallel_env(n_pistons=4, max_cycles=5, render_mode="rgb_array")
    venv = impl.concat(impl.to_vec(env), 2, num_cpus=2)
    closing(venv)
    assert venv.render_mode == "rgb_array"
