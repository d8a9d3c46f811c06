"""PettingZoo's SB3 Knights-Archers-Zombies tutorial (``tutorials/SB3/kaz/sb3_kaz_vector.py``), its
calls as PettingZoo publishes them, with its two vectorizing calls taken from vecshm.pettingzoo
instead of SuperSuit, and its sizes shrunk for a test (the tutorial's in the comments):

    python sb3_kaz_vector.py [STEPS]
"""

from __future__ import annotations

import glob
import os
import sys
import time

import supersuit as ss
from pettingzoo.butterfly import knights_archers_zombies_v11
from stable_baselines3 import PPO
from stable_baselines3.ppo import CnnPolicy, MlpPolicy

import vecshm.pettingzoo as vectorize  # the tutorial: ss.pettingzoo_env_to_vec_env_v1, ss.concat_vec_envs_v1


def train(env_fn, steps: int = 10_000, seed: int | None = 0, **env_kwargs):
    env = env_fn.parallel_env(**env_kwargs)
    env = ss.black_death_v3(env)
    visual_observation = not env.unwrapped.vector_state
    if visual_observation:
        env = ss.color_reduction_v0(env, mode="B")
        env = ss.resize_v1(env, x_size=84, y_size=84)
        env = ss.frame_stack_v1(env, 3)
    env.reset(seed=seed)
    print(f"Starting training on {str(env.metadata['name'])}.")

    env = vectorize.pettingzoo_env_to_vec_env_v1(env)
    env = vectorize.concat_vec_envs_v1(env, 8, num_cpus=1, base_class="stable_baselines3")

    model = PPO(
        CnnPolicy if visual_observation else MlpPolicy,
        env,
        verbose=3,
        batch_size=256,
        n_steps=32,  # SB3's default, 2048
    )
    model.learn(total_timesteps=steps)
    model.save(f"{env.unwrapped.metadata.get('name')}_{time.strftime('%Y%m%d-%H%M%S')}")
    print("Model has been saved.")
    print(f"Finished training on {str(env.unwrapped.metadata['name'])}.")
    env.close()


def eval(env_fn, num_games: int = 100, render_mode: str | None = None, **env_kwargs):
    env = env_fn.env(render_mode=render_mode, **env_kwargs)
    visual_observation = not env.unwrapped.vector_state
    if visual_observation:
        env = ss.color_reduction_v0(env, mode="B")
        env = ss.resize_v1(env, x_size=84, y_size=84)
        env = ss.frame_stack_v1(env, 3)
    print(f"\nStarting evaluation on {str(env.metadata['name'])} (num_games={num_games}, render_mode={render_mode})")
    latest_policy = max(glob.glob(f"{env.metadata['name']}*.zip"), key=os.path.getctime)
    model = PPO.load(latest_policy)
    rewards = {agent: 0 for agent in env.possible_agents}
    for i in range(num_games):
        env.reset(seed=i)
        env.action_space(env.possible_agents[0]).seed(i)
        for agent in env.agent_iter():
            obs, reward, termination, truncation, info = env.last()
            for a in env.agents:
                rewards[a] += env.rewards[a]
            if termination or truncation:
                break
            if agent == env.possible_agents[0]:
                act = env.action_space(agent).sample()
            else:
                act = model.predict(obs, deterministic=True)[0]
            env.step(act)
    env.close()
    avg_reward = sum(rewards.values()) / len(rewards.values())
    print(f"Avg reward: {avg_reward}")
    return avg_reward


if __name__ == "__main__":
    env_fn = knights_archers_zombies_v11
    env_kwargs = dict(max_cycles=100, max_zombies=4, obs_method="vector")
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1024  # 81_920
    train(env_fn, steps=steps, seed=0, **env_kwargs)
    eval(env_fn, num_games=1, render_mode=None, **env_kwargs)  # 10 games, then 2 rendered for a person
