"""PettingZoo's SB3 Pistonball tutorial (``tutorials/SB3/pistonball/sb3_pistonball_vector.py``), its
calls as PettingZoo publishes them, with its two vectorizing calls taken from vecshm.pettingzoo
instead of SuperSuit, and its sizes shrunk for a test (the tutorial's in the comments):

    python sb3_pistonball_vector.py [STEPS]
"""

from __future__ import annotations

import glob
import os
import sys
import time

import supersuit as ss
from pettingzoo.butterfly import pistonball_v6
from stable_baselines3 import PPO
from stable_baselines3.ppo import CnnPolicy

import vecshm.pettingzoo as vectorize  # the tutorial: ss.pettingzoo_env_to_vec_env_v1, ss.concat_vec_envs_v1


def train_butterfly_supersuit(env_fn, steps: int = 10_000, seed: int | None = 0, **env_kwargs):
    env = env_fn.parallel_env(**env_kwargs)
    env = ss.color_reduction_v0(env, mode="B")
    env = ss.resize_v1(env, x_size=84, y_size=84)
    env = ss.frame_stack_v1(env, 3)
    env.reset(seed=seed)
    print(f"Starting training on {str(env.metadata['name'])}.")

    env = vectorize.pettingzoo_env_to_vec_env_v1(env)
    env = vectorize.concat_vec_envs_v1(env, 4, num_cpus=2, base_class="stable_baselines3")

    model = PPO(
        CnnPolicy,
        env,
        verbose=3,
        gamma=0.95,
        n_steps=8,  # 256
        ent_coef=0.0905168,
        learning_rate=0.00062211,
        vf_coef=0.042202,
        max_grad_norm=0.9,
        gae_lambda=0.99,
        n_epochs=2,  # 5
        clip_range=0.3,
        batch_size=256,
    )
    model.learn(total_timesteps=steps)
    model.save(f"{env.unwrapped.metadata.get('name')}_{time.strftime('%Y%m%d-%H%M%S')}")
    print("Model has been saved.")
    print(f"Finished training on {str(env.unwrapped.metadata['name'])}.")
    # (the tutorial leaves env.close() out: a SuperSuit bug; the process's end must clean up)


def eval(env_fn, num_games: int = 100, render_mode: str | None = None, **env_kwargs):
    env = env_fn.env(render_mode=render_mode, **env_kwargs)
    env = ss.color_reduction_v0(env, mode="B")
    env = ss.resize_v1(env, x_size=84, y_size=84)
    env = ss.frame_stack_v1(env, 3)
    print(f"\nStarting evaluation on {str(env.metadata['name'])} (num_games={num_games}, render_mode={render_mode})")
    latest_policy = max(glob.glob(f"{env.metadata['name']}*.zip"), key=os.path.getctime)
    model = PPO.load(latest_policy)
    rewards = {agent: 0 for agent in env.possible_agents}
    for i in range(num_games):
        env.reset(seed=i)
        for agent in env.agent_iter():
            obs, reward, termination, truncation, info = env.last()
            if termination or truncation:
                for agent in env.agents:
                    rewards[agent] += env.rewards[agent]
                break
            act = model.predict(obs, deterministic=True)[0]
            env.step(act)
    env.close()
    avg_reward = sum(rewards.values()) / len(rewards.values())
    print(f"Avg reward: {avg_reward}")
    return avg_reward


if __name__ == "__main__":
    env_fn = pistonball_v6
    env_kwargs = dict(
        n_pistons=20,
        time_penalty=-0.1,
        continuous=True,
        random_drop=True,
        random_rotate=True,
        ball_mass=0.75,
        ball_friction=0.3,
        ball_elasticity=1.5,
        max_cycles=25,
    )
    train_butterfly_supersuit(
        env_fn, steps=int(sys.argv[1]) if len(sys.argv) > 1 else 640, seed=0, **env_kwargs
    )  # 40_960
    eval(env_fn, num_games=1, render_mode=None, **env_kwargs)  # 10 games, then 2 rendered for a person
