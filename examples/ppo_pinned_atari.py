"""PPO on an Atari game, learner pinned to one core and env workers to the others.

    python examples/ppo_pinned_atari.py --env ALE/Pong-v5 --n-envs 8 --timesteps 20000

Needs the ``sb3`` and ``atari`` extras (``pip install 'vecshm[sb3,atari]'``).
"""

from __future__ import annotations

import argparse
import os

import gymnasium as gym

from vecshm import ShmVecEnv


def make_env(env_id: str):
    def _init() -> gym.Env:
        import ale_py
        from stable_baselines3.common.atari_wrappers import AtariWrapper

        gym.register_envs(ale_py)
        return AtariWrapper(gym.make(env_id))

    return _init


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--timesteps", type=int, default=20_000)
    args = parser.parse_args()

    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecFrameStack

    cores = sorted(os.sched_getaffinity(0))
    learner, workers = cores[:1], (cores[1:] or cores)
    # pin_parent pins this process once the workers have started (so that none inherits it), and
    # caps PyTorch's pool, loaded above, at one thread per learner core: its default, one per core
    # of the machine, would oversubscribe the learner's core (tens of times slower on 2 cores)
    envs = ShmVecEnv([make_env(args.env) for _ in range(args.n_envs)], cpu_affinity=workers, pin_parent=learner)
    venv = VecFrameStack(envs, 4)
    print(f"learner on cores {learner}, workers on {workers}: {venv.unwrapped}")
    model = PPO("CnnPolicy", venv, n_steps=128, batch_size=256, n_epochs=1, verbose=1)
    model.learn(args.timesteps)
    venv.close()


if __name__ == "__main__":
    main()
