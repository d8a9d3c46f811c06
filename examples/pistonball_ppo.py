"""PettingZoo's Pistonball tutorial (SB3's PPO on SuperSuit-wrapped frames), with vecshm as the vectorizer.

    python examples/pistonball_ppo.py --copies 8 --num-cpus 4 --timesteps 2000000

The tutorial as PettingZoo publishes it (https://pettingzoo.farama.org/tutorials/sb3/), with one
change: ``pettingzoo_env_to_vec_env_v1`` and ``concat_vec_envs_v1`` come from ``vecshm.pettingzoo``
instead of ``supersuit``. SuperSuit's per-env wrappers (color reduction, resize, frame stack) stay as
they are. Every agent of every copy is a row: 8 copies of Pistonball's 20 pistons are 160 rows.

Needs ``pip install 'vecshm[pettingzoo,sb3]' 'pettingzoo[butterfly]' supersuit``.
"""

from __future__ import annotations

import argparse

import supersuit as ss
from pettingzoo.butterfly import pistonball_v6
from stable_baselines3 import PPO
from stable_baselines3.ppo import CnnPolicy

from vecshm.pettingzoo import concat_vec_envs_v1, pettingzoo_env_to_vec_env_v1  # was: from supersuit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=8, help="copies of the env (each 20 rows)")
    parser.add_argument("--num-cpus", type=int, default=4, help="worker processes (0: one per core)")
    parser.add_argument("--timesteps", type=int, default=2_000_000)
    parser.add_argument("--n-steps", type=int, default=256, help="PPO steps per row per rollout")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()

    env = pistonball_v6.parallel_env(n_pistons=20, time_penalty=-0.1, continuous=True, random_drop=True,
                                     random_rotate=True, ball_mass=0.75, ball_friction=0.3, ball_elasticity=1.5,
                                     max_cycles=125)  # fmt: skip
    env = ss.color_reduction_v0(env, mode="B")
    env = ss.resize_v1(env, x_size=84, y_size=84)
    env = ss.frame_stack_v1(env, 3)
    env = pettingzoo_env_to_vec_env_v1(env)
    env = concat_vec_envs_v1(env, args.copies, num_cpus=args.num_cpus, base_class="stable_baselines3")

    model = PPO(
        CnnPolicy, env, verbose=1, gamma=0.95, n_steps=args.n_steps, ent_coef=0.0905168, learning_rate=0.00062211,
        vf_coef=0.042202, max_grad_norm=0.9, gae_lambda=0.99, n_epochs=5 if args.n_steps >= 64 else 1,
        clip_range=0.3, batch_size=args.batch_size,
    )  # fmt: skip
    model.learn(total_timesteps=args.timesteps)
    model.save("policy")
    env.close()


if __name__ == "__main__":
    main()
