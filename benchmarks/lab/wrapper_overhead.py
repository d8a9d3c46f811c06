"""Per-step cost of each vecshm wrapper against SB3's, on the same 8-env pixel workload.

    python benchmarks/lab/wrapper_overhead.py [--rounds 5] [--steps 300]

The wrapped vec env is an in-process stub that hands out precomputed 84x84x3 frames (with an
episode end every 50 steps), so the numbers are the wrappers' own cost. Rounds are interleaved
(ours, SB3's, ours, ...) and the ratio is taken per round; speed is reported, never asserted.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from gymnasium import spaces

import vecshm

N_ENVS = 8
SHAPE = (84, 84, 3)


def stub_class(base: type) -> type:
    """A vec env that returns fixed frames: isolates the wrapper's cost."""

    class FrameStub(base):
        def __init__(self) -> None:
            self.frames = np.random.default_rng(0).integers(0, 256, (N_ENVS, *SHAPE), dtype=np.uint8)
            self.t = 0
            self.render_mode = None
            base.__init__(self, N_ENVS, spaces.Box(0, 255, SHAPE, np.uint8), spaces.Discrete(4))

        def reset(self):
            return self.frames.copy()

        def step_async(self, actions):
            pass

        def step_wait(self):
            self.t += 1
            dones = np.zeros(N_ENVS, bool)
            infos = [{} for _ in range(N_ENVS)]
            if self.t % 50 == 0:
                dones[0] = True
                infos[0]["terminal_observation"] = self.frames[0].copy()
            return self.frames.copy(), np.ones(N_ENVS, np.float32), dones, infos

        def close(self):
            pass

        def get_attr(self, name, indices=None):
            return [getattr(self, name)] * N_ENVS

        def set_attr(self, *args, **kwargs):
            pass

        def env_method(self, *args, **kwargs):
            return [None] * N_ENVS

        def env_is_wrapped(self, wrapper_class, indices=None):
            return [False] * N_ENVS

    return FrameStub


WRAPPERS = {
    "VecFrameStack(4)": lambda m, v: m.VecFrameStack(v, 4),
    "VecNormalize": lambda m, v: m.VecNormalize(v),
    "VecTransposeImage": lambda m, v: m.VecTransposeImage(v),
    "VecMonitor": lambda m, v: m.VecMonitor(v),
    "VecCheckNan": lambda m, v: m.VecCheckNan(v),
}


def seconds_per_step(venv, steps: int) -> float:
    venv.reset()
    actions = np.zeros(N_ENVS, np.int64)
    start = time.perf_counter()
    for _ in range(steps):
        venv.step(actions)
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    import stable_baselines3.common.vec_env as sb3

    stubs = {"vecshm": stub_class(vecshm.VecEnv), "SB3": stub_class(sb3.VecEnv)}
    modules = {"vecshm": vecshm, "SB3": sb3}
    print(f"| wrapper ({N_ENVS} envs, {SHAPE} uint8) | vecshm us/step | SB3 us/step | SB3 / vecshm |")
    print("|---|---:|---:|---:|")
    for name, wrap in WRAPPERS.items():
        times: dict[str, list[float]] = {"vecshm": [], "SB3": []}
        envs = {key: wrap(modules[key], stubs[key]()) for key in times}
        for _ in range(args.rounds):
            for key, venv in envs.items():
                times[key].append(seconds_per_step(venv, args.steps))
        base = {key: stubs[key]() for key in times}
        stub_cost = {key: seconds_per_step(base[key], args.steps) for key in times}
        ours = np.median(times["vecshm"]) - stub_cost["vecshm"]
        theirs = np.median(times["SB3"]) - stub_cost["SB3"]
        ratio = np.median([b / a for a, b in zip(times["vecshm"], times["SB3"])])
        print(f"| {name} | {ours * 1e6:.1f} | {theirs * 1e6:.1f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
