"""An acting loop: async batches of raw frames to a policy on the GPU, timed on vecshm and EnvPool.

    python examples/acting_loop.py --env ALE/Pong-v5 --n-envs 64 --batch 32 --seconds 10 --device cuda

Each round takes the first ``--batch`` envs to finish, runs a NatureCNN on their 210x160x3 frames,
samples actions and sends them back: what an IMPALA- or APPO-style actor does. vecshm returns
``device=`` tensors (copied without blocking from its page-locked segment); EnvPool's arrays are
copied as its users do, ``torch.as_tensor(obs).to(device)``. ``--pipeline`` receives the next batch
while the GPU computes this one's actions (worth it with three or more batches out: with two, as at
batch n/2, a receive must then wait for every env in flight). Prints env-steps/s per backend,
alternating them.

Needs torch and the ``atari`` extra; EnvPool where installed (``--backend vecshm`` without it).
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn


class NatureCNN(nn.Module):
    """The DQN paper's network, on raw RGB frames downsampled on the device."""

    def __init__(self, n_actions: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.LazyLinear(512),
            nn.ReLU(),
            nn.Linear(512, n_actions),
        )

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        x = frames.permute(0, 3, 1, 2).float() / 255.0
        return self.net(nn.functional.interpolate(x, size=(84, 84), mode="bilinear", align_corners=False))


def make_env(env_id: str):
    def factory() -> gym.Env:
        if env_id.startswith("ALE/"):
            import ale_py

            gym.register_envs(ale_py)
        else:
            import vecshm.envs  # noqa: F401  (registers vecshm/Frames-v0)
        return gym.make(env_id)

    return factory


class VecshmBatches:
    """``ShmVectorEnv`` async batches with ``device=``: observations arrive as device tensors."""

    def __init__(self, args: argparse.Namespace) -> None:
        from vecshm import ShmVectorEnv

        self.envs = ShmVectorEnv(
            [make_env(args.env) for _ in range(args.n_envs)],
            batch_size=args.batch,
            device=args.device,
            envs_per_worker=args.envs_per_worker,
        )
        self.envs.async_reset(seed=0)

    def recv(self) -> tuple[torch.Tensor, np.ndarray]:
        obs, rewards, terminations, truncations, _infos, env_ids = self.envs.recv()
        self.last = (rewards, terminations, truncations)  # for a learner (examples/cleanrl_ppo_atari.py)
        return obs, env_ids

    def send(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        self.envs.send(actions, env_ids)

    def close(self) -> None:
        self.envs.close()


class EnvPoolBatches:
    """EnvPool's async mode, configured as Gymnasium's ``ALE/*-v5`` (raw RGB frames, frame skip 4)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from vecshm.bench.systems import envpool_like_ale_v5

        self.device = args.device
        self.envs = envpool_like_ale_v5(args.env, args.n_envs, args.batch)
        self.envs.async_reset()

    def recv(self) -> tuple[torch.Tensor, np.ndarray]:
        obs, rewards, terminations, truncations, info = self.envs.recv()
        self.last = (rewards, terminations, truncations)
        # EnvPool's frames are channel-first: a view as Gymnasium's HWC (the policy takes it back, no copy)
        return torch.as_tensor(obs).to(self.device).permute(0, 2, 3, 1), info["env_id"]

    def send(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        self.envs.send(actions, env_ids)

    def close(self) -> None:
        self.envs.close()


BACKENDS = {"vecshm": VecshmBatches, "envpool": EnvPoolBatches}


def act(policy: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.distributions.Categorical(logits=policy(obs)).sample()


def run(backend: str, policy: nn.Module, args: argparse.Namespace) -> float:
    """Env-steps per second of ``backend``'s acting loop over ``args.seconds``, after a warm-up."""
    envs = BACKENDS[backend](args)
    try:
        steps, start = 0, None
        warmup = max(4, 2 * args.n_envs // args.batch)
        obs, ids = envs.recv()
        actions = act(policy, obs)
        batches = 0
        spent = np.zeros(4)  # seconds per batch: actions to the host (waits for the GPU), send, receive, policy
        while True:
            t0 = time.perf_counter()
            if args.pipeline:  # the next batch arrives while the GPU works on this one's actions
                next_obs, next_ids = envs.recv()
                t1 = time.perf_counter()
                host = actions.cpu().numpy()
                t2 = time.perf_counter()
                envs.send(host, ids)
                obs, ids = next_obs, next_ids
                t3 = time.perf_counter()
                parts = (t2 - t1, t3 - t2, t1 - t0)
            else:
                host = actions.cpu().numpy()
                t1 = time.perf_counter()
                envs.send(host, ids)
                t2 = time.perf_counter()
                obs, ids = envs.recv()
                t3 = time.perf_counter()
                parts = (t1 - t0, t2 - t1, t3 - t2)
            actions = act(policy, obs)
            batches += 1
            if batches == warmup:
                start = time.perf_counter()
            elif start is not None:
                spent += (*parts, time.perf_counter() - t3)
                steps += len(ids)
                if time.perf_counter() - start >= args.seconds:
                    elapsed = time.perf_counter() - start
                    if args.profile:
                        us = spent / (batches - warmup) * 1e6
                        print(f"  {backend}, us per batch: actions to host {us[0]:.0f}, send {us[1]:.0f}, "
                              f"receive {us[2]:.0f}, policy launch {us[3]:.0f}, "
                              f"in all {elapsed / (batches - warmup) * 1e6:.0f}")  # fmt: skip
                    return steps / elapsed
    finally:
        envs.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--n-envs", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2, help="alternated rounds per backend")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--backend", nargs="+", default=["vecshm", "envpool"], choices=list(BACKENDS))
    parser.add_argument("--pipeline", action="store_true", help="receive the next batch before sending actions")
    parser.add_argument("--profile", action="store_true", help="print where each batch's time goes")
    parser.add_argument(
        "--envs-per-worker",
        type=int,
        default=None,
        help="vecshm's envs per worker process (default: its own choice). A worker steps its envs one "
        "after the other, so while the policy holds half the envs, fewer envs per worker spread a "
        "batch over more cores",
    )
    args = parser.parse_args()
    if args.batch * 2 > args.n_envs and args.pipeline:
        parser.error("a pipelined loop needs --batch <= --n-envs / 2 (two batches are out at once)")

    n_actions = gym.make(args.env).action_space.n if args.env.startswith("vecshm/") else None
    if n_actions is None:
        make_env(args.env)()  # registers ALE
        n_actions = gym.make(args.env).action_space.n
    policy = NatureCNN(n_actions).to(args.device)
    act(policy, torch.zeros(1, 210, 160, 3, dtype=torch.uint8, device=args.device))  # builds the lazy layer
    rates: dict[str, list[float]] = {b: [] for b in args.backend}
    for _ in range(args.rounds):
        for backend in args.backend:
            rates[backend].append(run(backend, policy, args))
            print(f"{backend}: {rates[backend][-1]:,.0f} env-steps/s", flush=True)
    medians = {b: float(np.median(r)) for b, r in rates.items()}
    summary = ", ".join(f"{b} {m:,.0f}" for b, m in medians.items())
    print(f"median env-steps/s ({args.env}, {args.n_envs} envs, batch {args.batch}, {args.device}): {summary}")
    if len(medians) == 2 and min(medians.values()) > 0:
        print(f"vecshm / envpool: {medians['vecshm'] / medians['envpool']:.2f}x")


if __name__ == "__main__":
    main()
