"""vecshm.pettingzoo against SuperSuit's in-process reference, SB3's DummyVecEnv and Gymnasium's
SyncVectorEnv: rows bit-identical where SuperSuit is right, and SB3's and Gymnasium's documented
behaviour where it is not (TimeLimit.truncated, reset_infos, seeding, the autoreset metadata)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from conftest import assert_tree_equal, sample_actions, shm_entries, shm_entries_left, wait_gone

pytest.importorskip("pettingzoo")
ss = pytest.importorskip("supersuit")

from ma_envs import MixedSpaces, RaisesAtStep, RandomDeaths, real_envs  # noqa: E402

from vecshm.pettingzoo import (  # noqa: E402
    AgentVecEnv,
    AgentVectorEnv,
    concat_vec_envs_v1,
    pettingzoo_env_to_vec_env_v1,
)
from vecshm.shared.errors import SpaceMismatchError, WorkerDiedError, WorkerError  # noqa: E402

REAL = real_envs()
COPIES = 2
STEPS = 14  # every real env ends an episode within it


def supersuit_reference(env: Any, copies: int) -> Any:
    """SuperSuit's vectorization in this process (``num_cpus=0``), as its tutorials build it."""
    return ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(env), copies, num_cpus=0, base_class="gymnasium")


def copy_ended(dones: np.ndarray, num_agents: int) -> np.ndarray:
    """Per row: whether its copy ended (all of its agents done: the real envs keep every agent)."""
    return np.repeat(dones.reshape(-1, num_agents).all(axis=1), num_agents)


@pytest.mark.parametrize("name", list(REAL))
def test_sb3_rows_are_supersuit_s_with_sb3_s_infos(name, no_leaks):
    env = REAL[name]()
    reference = supersuit_reference(env, COPIES)
    ours = concat_vec_envs_v1(
        pettingzoo_env_to_vec_env_v1(env), COPIES, num_cpus=2, base_class="stable_baselines3", start_method="fork"
    )
    try:
        a = len(env.possible_agents)
        ref_obs, ref_infos = reference.reset(seed=7)
        ours.seed(7)
        assert_tree_equal(ours.reset(), ref_obs, "reset obs")
        assert_tree_equal(ours.reset_infos, ref_infos, "reset infos")
        rng = np.random.default_rng(0)
        ended_once = False
        for t in range(STEPS):
            actions = sample_actions(ours.action_space, ours.num_envs, rng)
            r_obs, r_rew, r_term, r_trunc, r_infos = reference.step(actions)
            obs, rewards, dones, infos = ours.step(actions)
            where = f"{name} step {t}"
            assert_tree_equal(obs, r_obs, where)
            assert_tree_equal(rewards, r_rew, where)
            assert_tree_equal(dones, (r_term | r_trunc).astype(bool), where)
            ended = copy_ended(dones, a)
            ended_once |= bool(ended.any())
            for r in range(ours.num_envs):
                info = dict(infos[r])
                assert info.pop("TimeLimit.truncated") is bool(r_trunc[r] and not r_term[r]), where
                assert info.pop("present") is True
                if ended[r]:  # SuperSuit merges the reset's info into the step's
                    info.update(ours.reset_infos[r])
                assert_tree_equal(info, r_infos[r], f"{where} row {r}")
        assert ended_once
    finally:
        ours.close()
        reference.close()


@pytest.mark.parametrize("name", [name for name in REAL if name != "dict_agents"])  # (see expected_infos)
def test_gymnasium_rows_are_supersuit_s_with_gymnasium_s_infos(name, no_leaks):
    env = REAL[name]()
    reference = supersuit_reference(env, COPIES)
    ours = AgentVectorEnv(env, COPIES, 2, start_method="fork")
    try:
        assert ours.metadata["autoreset_mode"] is gym.vector.AutoresetMode.SAME_STEP
        a, rows = len(env.possible_agents), ours.num_envs
        ref_obs, ref_infos = reference.reset(seed=3)
        obs, infos = ours.reset(seed=3)
        assert_tree_equal(obs, ref_obs)
        assert_tree_equal(infos, expected_infos(ours, ref_infos, np.zeros(rows, bool)))
        rng = np.random.default_rng(1)
        for t in range(STEPS):
            actions = sample_actions(ours.single_action_space, rows, rng)
            r_obs, r_rew, r_term, r_trunc, r_infos = reference.step(actions)
            obs, rewards, terminations, truncations, infos = ours.step(actions)
            where = f"{name} step {t}"
            assert_tree_equal(obs, r_obs, where)
            assert_tree_equal(rewards.astype(np.float32), r_rew, where)  # Gymnasium's float64; SuperSuit casts
            assert_tree_equal(terminations, r_term.astype(bool), where)
            assert_tree_equal(truncations, r_trunc.astype(bool), where)
            ended = copy_ended(r_term.astype(bool) | r_trunc.astype(bool), a)
            assert_tree_equal(infos, expected_infos(ours, r_infos, ended), where)
    finally:
        ours.close()
        reference.close()


def expected_infos(venv: Any, supersuit_infos: list[dict], ended: np.ndarray) -> dict[str, Any]:
    """SuperSuit's list of infos in Gymnasium's SAME_STEP form, batched by Gymnasium's ``_add_info``:
    a row whose copy ended has its last observation in ``final_obs`` and its step's info in
    ``final_info`` (the real envs' infos hold no keys, so SuperSuit's merged dict is split thus; the
    infos of an env with keys, ``dict_agents``, are checked in SuperSuit's shape and SB3's)."""
    infos: dict[str, Any] = {}
    for r, info in enumerate(supersuit_infos):
        info = dict(info)
        if ended[r]:
            info = {"final_obs": info.pop("terminal_observation"), "final_info": info}
        infos = venv._add_info(infos, info, r)
    infos["present"], infos["_present"] = np.ones(len(supersuit_infos), bool), np.ones(len(supersuit_infos), bool)
    return infos


# -- our env: agents die at random and join late; rows against the env itself ---------------------


def env_rows_reference(env: Any, copies: int, seed: int, actions: list[np.ndarray]) -> list[tuple]:
    """Each step's ``(obs, rewards, terminated, truncated, present, ended)`` rows of ``copies``
    copies of ``env`` stepped here on ``actions``: SuperSuit's rules (rows in ``possible_agents``
    order, a copy ends once every agent the step returned is done, then resets), an absent agent's
    row zeros with reward 0 and no flags."""
    agents = env.possible_agents
    envs = [cloudpickle.loads(cloudpickle.dumps(env)) for _ in range(copies)]
    space = env.observation_space(agents[0])

    def rows(observations: dict) -> tuple[np.ndarray, np.ndarray]:
        present = np.array([agent in observations for agent in agents])
        zero = np.zeros(space.shape, space.dtype)
        return np.stack([observations.get(agent, zero) for agent in agents]), present

    history = []
    firsts = [rows(e.reset(seed=seed + k)[0]) for k, e in enumerate(envs)]
    history.append((np.concatenate([o for o, _ in firsts]), np.concatenate([p for _, p in firsts])))
    for step in actions:
        out = []
        for k, e in enumerate(envs):
            chosen = {agent: step[k * len(agents) + j] for j, agent in enumerate(agents) if agent in e.agents}
            observations, rewards, terms, truncs, _ = e.step(chosen)
            done = bool((np.fromiter(terms.values(), bool) | np.fromiter(truncs.values(), bool)).all())
            reward = np.array([rewards.get(agent, 0) for agent in agents], np.float32)
            term = np.array([bool(terms.get(agent, False)) for agent in agents])
            trunc = np.array([bool(truncs.get(agent, False)) for agent in agents])
            obs, present = rows(e.reset(seed=None)[0] if done else observations)
            out.append((obs, reward, term, trunc, present, np.full(len(agents), done)))
        history.append(tuple(np.concatenate(column) for column in zip(*out)))
    return history


@pytest.mark.parametrize("facade", ["sb3", "gymnasium"])
def test_agents_that_die_or_join_are_zero_rows_with_a_mask(facade, no_leaks):
    env = RandomDeaths(info=False)
    rng = np.random.default_rng(5)
    rows = 3 * len(env.possible_agents)
    actions = [rng.integers(0, 3, rows) for _ in range(40)]
    reference = env_rows_reference(env, 3, 11, actions)
    if facade == "sb3":
        venv: Any = AgentVecEnv(env, 3, 2, start_method="fork")
        venv.seed(11)
        obs, present = venv.reset(), venv.present
    else:
        venv = AgentVectorEnv(env, 3, 2, start_method="fork")
        obs, infos = venv.reset(seed=11)
        present = infos["present"]
    try:
        assert_tree_equal(obs, reference[0][0])
        assert_tree_equal(present, reference[0][1])
        for t, step in enumerate(actions):
            r_obs, r_rew, r_term, r_trunc, r_present, _ = reference[t + 1]
            if facade == "sb3":
                obs, rewards, dones, infos = venv.step(step)
                assert_tree_equal(dones, r_term | r_trunc, f"step {t}")
                present = venv.present
                assert [info["present"] for info in infos] == r_present.tolist()
            else:
                obs, rewards, terms, truncs, infos = venv.step(step)
                assert_tree_equal(terms, r_term, f"step {t}")
                assert_tree_equal(truncs, r_trunc, f"step {t}")
                present = infos["present"]
            assert_tree_equal(obs, r_obs, f"step {t}")
            assert_tree_equal(rewards.astype(np.float32), r_rew, f"step {t}")
            assert_tree_equal(present, r_present, f"step {t}")
    finally:
        venv.close()


# -- SuperSuit's semantics fixed: against SB3's DummyVecEnv and Gymnasium's SyncVectorEnv ---------


class OneAgent(gym.Env):
    """A one-agent ParallelEnv as a Gymnasium env: what SB3's and Gymnasium's vectorizers take, so
    that rows of one agent can be checked against them."""

    def __init__(self, parallel_env: Any) -> None:
        self.env = parallel_env
        (self.agent,) = parallel_env.possible_agents
        self.observation_space = parallel_env.observation_space(self.agent)
        self.action_space = parallel_env.action_space(self.agent)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        obs, infos = self.env.reset(seed=seed, options=options)
        return obs[self.agent], infos[self.agent]

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, rewards, terms, truncs, infos = self.env.step({self.agent: action})
        a = self.agent
        return obs[a], rewards[a], terms[a], truncs[a], infos[a]


def one_agent_factories(env: Any, n: int) -> list[Any]:
    """``n`` factories, each of its own copy of ``env`` as a Gymnasium env (as vecshm copies it)."""
    copies = [cloudpickle.loads(cloudpickle.dumps(env)) for _ in range(n)]
    return [lambda copy=copy: OneAgent(copy) for copy in copies]


def one_agent_env() -> RandomDeaths:
    return RandomDeaths(num_agents=1, max_len=6, join_late=False)


def test_sb3_conventions_are_dummy_vec_env_s_on_one_agent_rows(no_leaks):
    """TimeLimit.truncated on every step, terminal_observation, reset_infos at each automatic reset,
    and ``seed()`` seeding env ``k`` with ``seed + k``: as SB3's DummyVecEnv does for envs that are the rows."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    env = one_agent_env()
    dummy = DummyVecEnv(one_agent_factories(env, 4))
    ours = AgentVecEnv(env, 4, 2, start_method="fork")
    try:
        dummy.seed(21)
        ours.seed(21)
        assert_tree_equal(ours.reset(), dummy.reset())
        assert ours.reset_infos == dummy.reset_infos
        rng = np.random.default_rng(2)
        for t in range(30):
            actions = rng.integers(0, 3, 4)
            obs, rewards, dones, infos = ours.step(actions)
            d_obs, d_rewards, d_dones, d_infos = dummy.step(actions)
            assert_tree_equal(obs, d_obs, f"step {t}")
            assert_tree_equal(rewards, d_rewards, f"step {t}")
            assert_tree_equal(dones, d_dones, f"step {t}")
            assert_tree_equal([{k: v for k, v in i.items() if k != "present"} for i in infos], d_infos, f"step {t}")
            assert_tree_equal(ours.reset_infos, dummy.reset_infos, f"step {t}")
    finally:
        ours.close()
        dummy.close()


@pytest.mark.parametrize("mode", [gym.vector.AutoresetMode.SAME_STEP, gym.vector.AutoresetMode.NEXT_STEP])
def test_gymnasium_conventions_are_sync_vector_env_s_on_one_agent_rows(mode, no_leaks):
    """Dict infos with masks, final_obs and final_info (SAME_STEP) or the reset a step later
    (NEXT_STEP), the mode in the metadata, and ``reset(seed=s)`` seeding env ``k`` with ``s + k``."""
    env = one_agent_env()
    sync = gym.vector.SyncVectorEnv(one_agent_factories(env, 4), autoreset_mode=mode)
    ours = AgentVectorEnv(env, 4, 2, autoreset_mode=mode, start_method="fork")
    try:
        assert ours.metadata["autoreset_mode"] is sync.metadata["autoreset_mode"]
        obs, infos = ours.reset(seed=5)
        s_obs, s_infos = sync.reset(seed=5)
        assert_tree_equal(obs, s_obs)
        assert_tree_equal(without_present(infos), s_infos)
        rng = np.random.default_rng(3)
        for t in range(30):
            actions = rng.integers(0, 3, 4)
            got, expected = ours.step(actions), sync.step(actions)
            for k, (mine, theirs) in enumerate(zip(got[:4], expected[:4])):
                assert_tree_equal(mine, theirs, f"step {t} item {k}")
            assert_tree_equal(without_present(got[4]), expected[4], f"step {t} infos")
    finally:
        ours.close()
        sync.close()


def without_present(infos: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in infos.items() if k not in ("present", "_present")}


def test_copy_k_is_seeded_with_seed_plus_k_whatever_the_number_of_processes(no_leaks):
    env = RandomDeaths()
    firsts = []
    for num_cpus in (1, 2, 3):
        with AgentVecEnv(env, 3, num_cpus, start_method="fork") as venv:
            assert venv.plan.num_processes == num_cpus
            venv.seed(40)
            firsts.append(venv.reset())
    for other in firsts[1:]:
        assert_tree_equal(other, firsts[0])
    expected = np.concatenate([env_rows_reference(env, 1, 40 + k, [])[0][0] for k in range(3)])
    assert_tree_equal(firsts[0], expected)


def test_supersuit_s_sb3_wrapper_cannot_seed_where_ours_can(no_leaks):
    """The fix's reason: SuperSuit's SB3 wrapper calls ``venv.seed``, which Gymnasium 1.x vector envs lack."""
    env = RandomDeaths()
    rows = ss.pettingzoo_env_to_vec_env_v1(ss.black_death_v3(env))
    theirs = ss.concat_vec_envs_v1(rows, 2, base_class="stable_baselines3")
    with pytest.raises(AttributeError):
        theirs.reset(seed=1)
    with concat_vec_envs_v1(env, 2, base_class="stable_baselines3", start_method="fork") as ours:
        assert_tree_equal(ours.reset(seed=1), env_rows_reference(env, 2, 1, [])[0][0])


def test_calls_honour_indices_on_the_rows_copies(no_leaks):
    with AgentVecEnv(RandomDeaths(), 3, 2, start_method="fork") as venv:
        venv.set_attr("max_len", 7, indices=[5])  # row 5: copy 1
        assert venv.get_attr("max_len", indices=[0, 4, 5, 11]) == [12, 7, 7, 12]
        assert venv.get_attr("max_len") == [12] * 4 + [7] * 4 + [12] * 4
        venv.reset()
        assert venv.env_method("agent_count", indices=[2, 3, 4]) == [3, 3, 3]  # (the last agent joins later)
        assert venv.env_is_wrapped(gym.Wrapper, indices=[1, 9]) == [False, False]


# -- what SB3 trains on, async batches, errors ----------------------------------------------------


def test_ppo_trains_on_it_unchanged(no_leaks):
    from stable_baselines3 import PPO

    venv = concat_vec_envs_v1(
        pettingzoo_env_to_vec_env_v1(RandomDeaths(join_late=False)), 2, num_cpus=2, base_class="stable_baselines3",
        start_method="fork",
    )  # fmt: skip
    try:
        model = PPO("MlpPolicy", venv, n_steps=16, batch_size=32, n_epochs=1, seed=0, device="cpu")
        model.learn(64)
        assert model.num_timesteps >= 64
    finally:
        venv.close()


@pytest.mark.parametrize("cls", [AgentVecEnv, AgentVectorEnv])
def test_async_batches_are_whole_copies_with_each_copy_s_own_stream(cls, no_leaks):
    env = RandomDeaths(info=False)
    a = len(env.possible_agents)
    rng = np.random.default_rng(9)
    actions = [rng.integers(0, 3, a) for _ in range(12)]  # copy k's j-th step: actions[j]
    reference = {k: env_rows_reference(env, 1, 60 + k, [actions[j] for j in range(12)]) for k in range(4)}
    venv = cls(env, 4, 2, batch_size=2, start_method="fork")
    try:
        venv.async_reset(60) if cls is AgentVectorEnv else (venv.seed(60), venv.async_reset())
        steps = dict.fromkeys(range(4), 0)  # results of copy k seen so far (the first: its reset)
        while min(steps.values()) < len(reference[0]):
            obs, rewards, *_, copy_ids = venv.recv()
            assert len(copy_ids) == 2 and obs.shape[0] == 2 * a
            for n, k in enumerate(copy_ids.tolist()):
                if steps[k] < len(reference[k]):
                    expected, where = reference[k][steps[k]], f"copy {k} result {steps[k]}"
                    assert_tree_equal(obs[n * a : (n + 1) * a], expected[0], where)
                    if steps[k]:
                        assert_tree_equal(rewards[n * a : (n + 1) * a].astype(np.float32), expected[1], where)
                steps[k] += 1
            venv.send(np.concatenate([actions[min(steps[k] - 1, 11)] for k in copy_ids.tolist()]), copy_ids)
    finally:
        venv.close()


def test_agents_whose_spaces_differ_are_an_error_naming_two_before_any_process(no_leaks):
    named = r"agents 'agent_0' and 'agent_3' have different observation spaces.*pad_observations_v0"
    with pytest.raises(SpaceMismatchError, match=named):
        pettingzoo_env_to_vec_env_v1(MixedSpaces())
    with pytest.raises(SpaceMismatchError, match="pad_observations_v0"):
        AgentVecEnv(MixedSpaces(), 2, 2)


@pytest.mark.parametrize("cls", [AgentVecEnv, AgentVectorEnv])
def test_an_env_that_raises_is_an_error_naming_its_copy(cls, no_leaks):
    venv = cls(RaisesAtStep(at=3), 2, 2, start_method="fork")
    try:
        venv.reset()
        with pytest.raises(WorkerError, match=r"copy [01] .*ValueError.*fails on purpose"):
            for _ in range(3):
                venv.step(np.zeros(8, np.int64))
    finally:
        venv.close()


@pytest.mark.parametrize("cls", [AgentVecEnv, AgentVectorEnv])
def test_bad_actions_are_an_error_naming_rows_and_copies(cls, no_leaks):
    with cls(RandomDeaths(), 2, 2, start_method="fork") as venv:
        venv.reset()
        with pytest.raises(ValueError, match=r"one row per agent of each copy \(2 copies x 4 agents = 8 rows\)"):
            venv.step(np.zeros(6, np.int64))
        with pytest.raises((TypeError, ValueError)):
            venv.step(np.full(8, 0.5))  # fractions for Discrete agents
    with cls(RandomDeaths(join_late=False), 2, 2, start_method="fork") as venv:
        venv.reset()
        actions = np.zeros(8, np.int64)
        actions[5] = 7  # copy 1's agent_1: Discrete(3)
        with pytest.raises(WorkerError, match=r"copy 1 raised .*agent 'agent_1': np.int64\(7\).*invalid action"):
            venv.step(actions)


def test_a_dead_worker_names_its_copies_and_restart_truncates_all_their_agents(no_leaks):
    with AgentVecEnv(RandomDeaths(max_len=50, info=False), 4, 2, start_method="fork") as venv:
        venv.reset()
        os.kill(venv.processes[1].pid, signal.SIGKILL)
        venv.processes[1].join()
        with pytest.raises(WorkerDiedError, match=r"worker 1 \(copies 2-3\) was killed by SIGKILL"):
            venv.step(np.zeros(16, np.int64))
    with pytest.warns(RuntimeWarning, match="restarting"):
        with AgentVecEnv(RandomDeaths(max_len=50, info=False, join_late=False), 4, 2, start_method="fork",
                         on_worker_failure="restart") as venv:  # fmt: skip
            venv.reset()
            os.kill(venv.processes[1].pid, signal.SIGKILL)
            venv.processes[1].join()
            obs, rewards, dones, infos = venv.step(np.zeros(16, np.int64))
            restarted = [r for r, info in enumerate(infos) if info.get("worker_restarted")]
            assert restarted == list(range(8, 16))
            assert all(dones[8:]) and all(infos[r]["TimeLimit.truncated"] for r in restarted)
            assert not rewards[8:].any()
            obs, rewards, dones, infos = venv.step(np.zeros(16, np.int64))  # and it goes on


def test_device_is_refused_with_the_way_to_a_gpu_named(no_leaks):
    with pytest.raises(ValueError, match="pin_memory=True"):
        AgentVecEnv(RandomDeaths(), 2, 2, device="cpu")


@pytest.mark.parametrize("cls", [AgentVecEnv, AgentVectorEnv])
def test_on_the_portable_transport_and_pinned_cores(cls, monkeypatch, no_leaks):
    """The portable transport (macOS, Windows) and pinned workers run the rows as the native one does."""
    monkeypatch.setenv("VECSHM_TRANSPORT", "portable")
    env = RandomDeaths(info=False)
    reference = env_rows_reference(env, 2, 4, [np.ones(8, np.int64)] * 6)
    with cls(env, 2, 2, start_method="fork", cpu_affinity="auto") as venv:
        assert venv.runtime.transport == "portable"
        obs = venv.reset(seed=4) if cls is AgentVecEnv else venv.reset(seed=4)[0]
        assert_tree_equal(obs, reference[0][0])
        for t in range(6):
            assert_tree_equal(venv.step(np.ones(8, np.int64))[0], reference[t + 1][0], f"step {t}")


KILLED_PARENT_SCRIPT = """
import sys, time
sys.path.insert(0, {tests!r})
from ma_envs import RandomDeaths
from vecshm.pettingzoo import concat_vec_envs_v1

if __name__ == "__main__":
    venv = concat_vec_envs_v1(RandomDeaths(), 4, num_cpus=2, base_class="stable_baselines3")
    venv.reset()
    print(" ".join(str(p.pid) for p in venv.processes), flush=True)
    time.sleep(600)  # killed here
"""


@pytest.mark.timeout(180)
def test_nothing_outlives_a_killed_parent():
    before = shm_entries()
    script = KILLED_PARENT_SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__)))
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = parent.stdout.readline()
    assert line.strip(), parent.stderr.read()
    parent.kill()
    parent.wait()
    assert wait_gone([int(p) for p in line.split()], 20) == []
    assert shm_entries_left(before) == set()
