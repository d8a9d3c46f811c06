"""PPO on Atari in the style of CleanRL, on async batches, timed on vecshm and on EnvPool.

    python examples/cleanrl_ppo_atari.py --env ALE/Pong-v5 --n-envs 64 --batch 32 --total-timesteps 200000

One file, as CleanRL writes them: the NatureCNN actor-critic, GAE and the clipped PPO loss follow
``cleanrl/ppo_atari_envpool.py``. What differs is the collection: envs come back in async batches
(the first ``--batch`` to finish), each env keeps its own trajectory, and a rollout ends once every
env has ``--num-steps`` transitions. Frames arrive as raw 210x160x3 RGB and are turned into 84x84
gray, stacked by 4, on the device. vecshm returns ``device=`` tensors; EnvPool's arrays are copied
with ``torch.as_tensor(obs).to(device)``. Prints steps per second (learning included) per backend.

Needs torch and the ``atari`` extra; EnvPool where installed (``--backend vecshm`` without it).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from acting_loop import BACKENDS, make_env
from torch import nn

GRAY = torch.tensor([0.299, 0.587, 0.114])


def layer(module: nn.Module, std: float = 2**0.5) -> nn.Module:
    nn.init.orthogonal_(module.weight, std)
    nn.init.constant_(module.bias, 0.0)
    return module


class Agent(nn.Module):
    def __init__(self, n_actions: int) -> None:
        super().__init__()
        self.network = nn.Sequential(
            layer(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            layer(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer(nn.Linear(512, n_actions), 0.01)
        self.critic = layer(nn.Linear(512, 1), 1.0)

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(self.network(x / 255.0)).flatten()

    def act(self, x: torch.Tensor, action: torch.Tensor | None = None):
        hidden = self.network(x / 255.0)
        dist = torch.distributions.Categorical(logits=self.actor(hidden))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(hidden).flatten()


def to_gray84(frames: torch.Tensor) -> torch.Tensor:
    """Raw HWC RGB frames -> 84x84 gray (uint8), on the frames' device."""
    gray = frames.float() @ GRAY.to(frames.device)
    small = nn.functional.interpolate(gray[:, None], size=(84, 84), mode="bilinear", align_corners=False)
    return small[:, 0].clamp_(0, 255).to(torch.uint8)


def train(backend: type, args: argparse.Namespace, n_actions: int) -> float:
    """Steps per second of ``--total-timesteps`` of PPO on ``backend`` (learning included)."""
    device, n, T = torch.device(args.device), args.n_envs, args.num_steps
    torch.manual_seed(args.seed)
    agent = Agent(n_actions).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    obs_buf = torch.zeros((T, n, 4, 84, 84), dtype=torch.uint8, device=device)
    actions_buf = torch.zeros((T, n), dtype=torch.long, device=device)
    logprobs_buf, values_buf, rewards_buf, dones_buf = (torch.zeros((T, n), device=device) for _ in range(4))
    stacks = torch.zeros((n, 4, 84, 84), dtype=torch.uint8, device=device)  # each env's latest 4 frames
    pending = torch.zeros(n, dtype=torch.bool, device=device)  # envs with an action in flight
    last_action = torch.zeros(n, dtype=torch.long, device=device)
    last_logprob, last_value = torch.zeros(n, device=device), torch.zeros(n, device=device)
    last_stack = torch.zeros_like(stacks)
    count = torch.zeros(n, dtype=torch.long, device=device)  # transitions recorded per env this rollout

    envs = backend(args)
    steps, start = 0, time.perf_counter()
    try:
        while steps < args.total_timesteps:
            count.zero_()
            while int(count.min()) < T:  # collect until every env has its T transitions
                obs, env_ids = envs.recv()
                ids = torch.as_tensor(env_ids, device=device)
                rewards, dones = last_rewards_dones(envs, device)
                steps += len(env_ids)
                record = pending[ids] & (count[ids] < T)
                if record.any():
                    r_ids, pos = ids[record], count[ids[record]]
                    obs_buf[pos, r_ids] = last_stack[r_ids]
                    actions_buf[pos, r_ids] = last_action[r_ids]
                    logprobs_buf[pos, r_ids] = last_logprob[r_ids]
                    values_buf[pos, r_ids] = last_value[r_ids]
                    rewards_buf[pos, r_ids] = rewards[record]
                    dones_buf[pos, r_ids] = dones[record]
                    count[r_ids] += 1
                frame = to_gray84(obs)
                stacks[ids] = torch.where(
                    dones[:, None, None, None].bool(), frame[:, None].expand(-1, 4, -1, -1),
                    torch.cat([stacks[ids, 1:], frame[:, None]], dim=1),
                )  # fmt: skip
                with torch.no_grad():
                    action, logprob, _, value = agent.act(stacks[ids].float())
                last_stack[ids], last_action[ids] = stacks[ids], action
                last_logprob[ids], last_value[ids], pending[ids] = logprob, value, True
                envs.send(action.cpu().numpy(), env_ids)
            update(agent, optimizer, args, obs_buf, actions_buf, logprobs_buf, values_buf, rewards_buf, dones_buf,
                   stacks)  # fmt: skip
    finally:
        envs.close()
    return steps / (time.perf_counter() - start)


def update(agent, optimizer, args, obs, actions, logprobs, values, rewards, dones, last_stacks) -> None:
    """CleanRL's GAE and clipped PPO update over one rollout of ``[num_steps, n_envs]``."""
    T = obs.shape[0]
    with torch.no_grad():
        next_value = agent.value(last_stacks.float())
        advantages = torch.zeros_like(rewards)
        gae = torch.zeros_like(next_value)
        for t in reversed(range(T)):
            nonterminal = 1.0 - dones[t]
            following = next_value if t == T - 1 else values[t + 1]
            delta = rewards[t] + args.gamma * following * nonterminal - values[t]
            gae = delta + args.gamma * args.gae_lambda * nonterminal * gae
            advantages[t] = gae
        returns = advantages + values
    b_obs, b_actions, b_logprobs = obs.reshape(-1, 4, 84, 84), actions.reshape(-1), logprobs.reshape(-1)
    b_advantages, b_returns = advantages.reshape(-1), returns.reshape(-1)
    size = b_obs.shape[0]
    minibatch = max(1, size // args.num_minibatches)
    for _ in range(args.update_epochs):
        order = torch.randperm(size, device=b_obs.device)
        for start in range(0, size, minibatch):
            mb = order[start : start + minibatch]
            _, newlogprob, entropy, newvalue = agent.act(b_obs[mb].float(), b_actions[mb])
            ratio = (newlogprob - b_logprobs[mb]).exp()
            adv = b_advantages[mb]
            adv = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)
            pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
            v_loss = 0.5 * ((newvalue - b_returns[mb]) ** 2).mean()
            loss = pg_loss - args.ent_coef * entropy.mean() + args.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()


def last_rewards_dones(envs: Any, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The rewards and episode ends of the batch ``envs`` (an acting-loop backend) returned last."""
    rewards, terminations, truncations = (torch.as_tensor(x).to(device) for x in envs.last)
    return rewards.float(), (terminations | truncations).float()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--n-envs", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--num-steps", type=int, default=128, help="transitions per env per rollout")
    parser.add_argument("--total-timesteps", type=int, default=200_000)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--backend", nargs="+", default=["vecshm", "envpool"], choices=list(BACKENDS))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--envs-per-worker", type=int, default=None, help="vecshm's (default: its own choice)")
    parser.add_argument("--learning-rate", type=float, default=2.5e-4)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--gae-lambda", type=float, default=0.95)
    parser.add_argument("--num-minibatches", type=int, default=4)
    parser.add_argument("--update-epochs", type=int, default=4)
    parser.add_argument("--clip-coef", type=float, default=0.1)
    parser.add_argument("--ent-coef", type=float, default=0.01)
    parser.add_argument("--vf-coef", type=float, default=0.5)
    parser.add_argument("--max-grad-norm", type=float, default=0.5)
    args = parser.parse_args()

    make_env(args.env)()  # registers the env's ids here
    import gymnasium as gym

    n_actions = gym.make(args.env).action_space.n
    rates = {}
    for backend in args.backend:
        rates[backend] = train(BACKENDS[backend], args, n_actions)
        print(f"{backend}: {rates[backend]:,.0f} steps/s (learning included)", flush=True)
    if len(rates) == 2:
        print(f"vecshm / envpool: {rates['vecshm'] / rates['envpool']:.2f}x")


if __name__ == "__main__":
    main()
