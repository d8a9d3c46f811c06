"""End-to-end: the same SB3 PPO script, with only ``vec_env_cls`` swapped, timed inside ``learn()``.

``python -m vecshm.bench.train`` runs SB3's usual Atari recipe (``make_atari_env``: 84x84 gray
frames, frame skip 4; ``VecFrameStack`` of 4; ``PPO("CnnPolicy")``) once per vectorizer, in
interleaved rounds, and reports for each:

- env-steps/s of ``learn()`` (total timesteps / wall time of ``learn``);
- the share of that time spent inside the vec env (``reset``, ``step_async``, ``step_wait``), timed
  by a wrapper between the vectorizer and SB3;
- the share spent copying observations to the learner's device (SB3's ``obs_as_tensor`` in its
  rollouts, timed around the call).

The rest is the learner (policy forward passes, PPO updates): a faster vectorizer only shrinks the
first share, and ``pin_memory=True`` the second (the row ``vecshm ShmVecEnv pin_memory`` stacks and
transposes with vecshm's wrappers, which write page-locked arrays above a pinned vec env).
``--raw-frames`` trains on raw 210x160x3 frames instead of the 84x84 gray recipe. ``--env
CartPole-v1`` (an MLP policy) makes a quick run without Atari.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from vecshm.vec_env.base import VecEnv, VecEnvObs, VecEnvStepReturn, VecEnvWrapper

__all__ = ["TimedVecEnv", "VECTORIZERS", "main"]


class TimedVecEnv(VecEnvWrapper):
    """Adds up the wall time spent in the wrapped vec env's ``reset``, ``step_async`` and ``step_wait``."""

    def __init__(self, venv: VecEnv) -> None:
        super().__init__(venv)
        self.seconds = 0.0

    @contextlib.contextmanager
    def _clock(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - start

    def reset(self) -> VecEnvObs:
        with self._clock():
            return self.venv.reset()

    def step_async(self, actions: np.ndarray) -> None:
        with self._clock():
            self.venv.step_async(actions)

    def step_wait(self) -> VecEnvStepReturn:
        with self._clock():
            return self.venv.step_wait()


def _shm_vec_env() -> type:
    from vecshm import ShmVecEnv

    return ShmVecEnv


def _subproc_vec_env() -> type:
    from stable_baselines3.common.vec_env import SubprocVecEnv

    return SubprocVecEnv


def _pinned_shm_vec_env() -> Callable[..., Any]:
    from vecshm import ShmVecEnv

    return functools.partial(ShmVecEnv, pin_memory=True)


def _dummy_vec_env() -> type:
    from stable_baselines3.common.vec_env import DummyVecEnv

    return DummyVecEnv


VECTORIZERS: dict[str, Callable[[], Any]] = {
    "vecshm ShmVecEnv": _shm_vec_env,
    "vecshm ShmVecEnv pin_memory": _pinned_shm_vec_env,
    "SB3 SubprocVecEnv": _subproc_vec_env,
    "SB3 DummyVecEnv": _dummy_vec_env,
}


def _is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/") or "NoFrameskip" in env_id


def _make_atari(env_id: str, **kwargs: Any) -> Any:
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    return gym.make(env_id, **kwargs)


def build(
    env_id: str, n_envs: int, vec_env_cls: Any, seed: int, raw_frames: bool = False, vecshm_wrappers: bool = False
) -> TimedVecEnv:
    """SB3's usual pipeline for ``env_id`` on ``vec_env_cls``, wrapped in the timer (frame stack above it;
    ``raw_frames``: no Atari preprocessing or stack; ``vecshm_wrappers``: vecshm's frame stack and
    transpose, which keep a pinned vec env's batches page-locked, instead of SB3's)."""
    from stable_baselines3.common.env_util import make_atari_env, make_vec_env
    from stable_baselines3.common.vec_env import VecFrameStack, VecTransposeImage

    if vecshm_wrappers:
        from vecshm import VecFrameStack, VecTransposeImage  # noqa: F811
    if _is_atari(env_id):
        # A factory that registers the Atari ids itself: SubprocVecEnv's forkserver workers do not
        # know ids the parent registered (vecshm's do), and the comparison must run on both.
        factory = functools.partial(_make_atari, env_id)
        if raw_frames:
            return VecTransposeImage(TimedVecEnv(make_vec_env(factory, n_envs, seed, vec_env_cls=vec_env_cls)))
        timed = TimedVecEnv(make_atari_env(factory, n_envs=n_envs, seed=seed, vec_env_cls=vec_env_cls))
        return VecTransposeImage(VecFrameStack(timed, n_stack=4))  # type: ignore[return-value]
    return TimedVecEnv(make_vec_env(env_id, n_envs=n_envs, seed=seed, vec_env_cls=vec_env_cls))


@contextlib.contextmanager
def timed_obs_as_tensor() -> Iterator[list[float]]:
    """Seconds inside SB3's ``obs_as_tensor`` during rollouts (the observations' copy to the device),
    added up in the list yielded. A copy from ordinary memory returns once done; one from page-locked
    memory too (SB3 copies without ``non_blocking``), so the clock sees the whole copy."""
    from stable_baselines3.common import on_policy_algorithm

    original = on_policy_algorithm.obs_as_tensor
    spent = [0.0]

    def timed(obs: Any, device: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(obs, device)
        finally:
            spent[0] += time.perf_counter() - start

    on_policy_algorithm.obs_as_tensor = timed
    try:
        yield spent
    finally:
        on_policy_algorithm.obs_as_tensor = original


def run_once(
    env_id: str, n_envs: int, vec_env_cls: Any, timesteps: int, device: str, seed: int, **build_options: Any
) -> dict[str, float]:
    """One ``learn()``: its env-steps/s and the shares of it spent inside the vec env and in copying
    observations to ``device``."""
    from stable_baselines3 import PPO

    venv = build(env_id, n_envs, vec_env_cls, seed, **build_options)
    timed = venv
    while not isinstance(timed, TimedVecEnv):
        timed = timed.venv
    try:
        atari = _is_atari(env_id)
        model = PPO(
            "CnnPolicy" if atari else "MlpPolicy",
            venv,
            n_steps=128,
            batch_size=256,
            n_epochs=4,
            learning_rate=2.5e-4,
            clip_range=0.1,
            ent_coef=0.01,
            device=device,
            seed=seed,
            verbose=0,
        )
        timed.seconds = 0.0
        with timed_obs_as_tensor() as to_device:
            start = time.perf_counter()
            model.learn(total_timesteps=timesteps)
            seconds = time.perf_counter() - start
        steps = model.num_timesteps
    finally:
        venv.close()
    return {
        "env_steps_per_s": steps / seconds,
        "vec_env_share": timed.seconds / seconds,
        "to_device_share": to_device[0] / seconds,
        "seconds": seconds,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m vecshm.bench.train",
        description="SB3 PPO end to end with vec_env_cls swapped: env-steps/s of learn() and its share in the vec env.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--env", default="PongNoFrameskip-v4", help="an Atari id (CnnPolicy) or any other (MlpPolicy)")
    parser.add_argument("-n", "--n-envs", type=int, default=16)
    parser.add_argument("-t", "--timesteps", type=int, default=16384, help="per learn() call")
    parser.add_argument("-r", "--rounds", type=int, default=2, help="interleaved rounds")
    parser.add_argument(
        "-s", "--systems", nargs="+", choices=list(VECTORIZERS), help="default: all (pin_memory with a CUDA learner)"
    )
    parser.add_argument("--raw-frames", action="store_true", help="raw 210x160x3 frames (no Atari wrapper, no stack)")
    parser.add_argument("--device", default="auto", help="torch device for the learner (auto: cuda if available)")
    parser.add_argument("-o", "--output", default="bench-results")
    return parser


def markdown(env_id: str, n_envs: int, timesteps: int, device: str, results: dict[str, list[dict[str, float]]]) -> str:
    baseline = results.get("SB3 SubprocVecEnv")
    lines = [
        f"### SB3 PPO on {env_id}, {n_envs} envs, {timesteps} timesteps per learn(), learner on {device}",
        "",
        "| vec_env_cls | env-steps/s of learn() (median) | x SB3 SubprocVecEnv | time inside the vec env "
        "| observations to the device |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, runs in results.items():
        rate = float(np.median([r["env_steps_per_s"] for r in runs]))
        share = float(np.median([r["vec_env_share"] for r in runs]))
        to_device = float(np.median([r["to_device_share"] for r in runs]))
        ratio = "-"
        if baseline:
            ratio = f"{np.median([r['env_steps_per_s'] / b['env_steps_per_s'] for r, b in zip(runs, baseline)]):.2f}x"
        lines.append(f"| {name} | {rate:,.0f} | {ratio} | {100 * share:.0f}% | {100 * to_device:.1f}% |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if args.systems is None:  # page-locking needs CUDA
        args.systems = [name for name in VECTORIZERS if "pin_memory" not in name or device.startswith("cuda")]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in args.systems}
    for _ in range(args.rounds):
        for name in args.systems:
            options = {"raw_frames": args.raw_frames, "vecshm_wrappers": "pin_memory" in name}
            results[name].append(
                run_once(args.env, args.n_envs, VECTORIZERS[name](), args.timesteps, device, seed=0, **options)
            )
    text = markdown(args.env, args.n_envs, args.timesteps, device, results)
    print(text)
    os.makedirs(args.output, exist_ok=True)
    with open(os.path.join(args.output, "train.md"), "w") as handle:
        handle.write(text)
    with open(os.path.join(args.output, "train.json"), "w") as handle:
        json.dump({"args": vars(args), "device": device, "runs": results}, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
