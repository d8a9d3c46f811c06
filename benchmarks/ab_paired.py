"""A paired A/B of two checkouts: each keeps one warm vec env, and they take turns stepping.

This is the A/B check for hot-path changes. On a shared VM the host's speed drifts by 20-50%
within minutes (2026-12-07: one configuration read 39-92K env-steps/s over six runs), so medians
of separate runs need many rounds to tell 5% apart. Here both trees run at once, one process each
(this script again, with ``--serve``), each with its vec env opened and warmed up once. The driver
asks them in turn, A B B A A B ..., to step for ``--seconds`` while the other waits (its workers
fall asleep within their spin budget, a few milliseconds, and cost nothing after), and takes the
ratio of each adjacent pair. A drift slower than a round affects both sides alike, so the median
of the pairs' ratios is steady where the rates are not::

    git worktree add ../old <commit>
    python benchmarks/ab_paired.py ../old . vecshm/Frames-v0 sb3 --rounds 20

prints each side's median rate and the median of the after/before ratios, with their spread.
``--after-facade`` gives the after side another facade: the same tree twice, ``sb3`` against
``sb3+stats``, measures what an option costs.

Each side imports the tree given (``PYTHONPATH`` is set to it: the editable install would otherwise
win) and forks its workers, so they run the tree their parent imported: under forkserver they
would import vecshm afresh, the editable tree whatever ``PYTHONPATH`` says. The facades: ``sb3``
steps a ``ShmVecEnv``, ``gym`` a ``ShmVectorEnv``; ``sb3-async`` and ``gym-async`` run them in
async batches of half the envs (``send``/``recv``), ``sb3-async-all``/``gym-async-all`` in async
batches of every env (what a synchronous step costs through the async path); ``subproc`` steps
SB3's ``SubprocVecEnv`` (forked, as vecshm here). A facade ending in ``+restart`` runs under
``on_worker_failure="restart"``, one ending in ``+stats`` with ``stats=True`` (both:
``sb3+restart+stats``). The id ``ale-infos`` is a zero-compute env defined here (so any checkout
runs it) whose infos are ALE's: ``lives``, ``episode_frame_number`` and ``frame_number`` on every step.
The multi-agent facades ``agent-sb3`` (``AgentVecEnv``) and ``agent-gym`` (``AgentVectorEnv``) take a
PettingZoo module for the id (``pettingzoo.butterfly.pistonball_v6``): ``--envs`` copies of its
``parallel_env()``, every agent a row, the rate in agent-steps/s::

    python benchmarks/ab_paired.py ../old . pettingzoo.butterfly.pistonball_v6 agent-sb3 --envs 4
(``ab_step_rate.py``, which older notes in docs/ name, alternated whole processes of this step loop;
it was folded in here on 2026-12-07.)
"""

from __future__ import annotations

import argparse
import importlib
import os
import pathlib
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
N_ENVS = 8


class AleInfoEnv(gym.Env):
    """No compute, a 4-float observation, and the three scalar infos ALE returns on every step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.t = self.frames = 0
        self.obs = np.zeros(4, np.float32)

    def _info(self) -> dict:
        return {"lives": 3, "episode_frame_number": 4 * self.t, "frame_number": self.frames}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.obs, self._info()

    def step(self, action):
        self.t += 1
        self.frames += 4
        return self.obs, 0.0, False, self.t >= 1000, self._info()


def open_stepper(env_id: str, facade: str, n_envs: int = N_ENVS) -> tuple[Any, Callable[[], None], int]:
    """The vec env for ``facade`` on ``n_envs`` of ``env_id``, warmed up; a function that takes one
    step (or one async batch, received and sent back); and the env-steps that step is."""
    import vecshm.envs  # noqa: F401  (registers the vecshm/... ids; imported here: the driver needs no vecshm)
    from vecshm import ShmVecEnv, ShmVectorEnv

    if env_id.startswith("ALE/"):
        import ale_py

        gym.register_envs(ale_py)
    facade, *policies = facade.split("+")
    failure = "restart" if "restart" in policies else "raise"
    # (a checkout from before stats=True takes no such keyword)
    counting = {"stats": True} if "stats" in policies else {}
    make = AleInfoEnv if env_id == "ale-infos" else (lambda: gym.make(env_id))
    fns = [make for _ in range(n_envs)]
    mode = facade.partition("-")[2]  # "", "async" or "async-all"
    batch = {"async": n_envs // 2, "async-all": n_envs}.get(mode)
    if facade.startswith("agent-"):  # a PettingZoo module: n_envs copies of its parallel_env()
        from vecshm.pettingzoo import AgentVecEnv, AgentVectorEnv

        parallel_env = importlib.import_module(env_id).parallel_env()
        agents = AgentVecEnv if facade == "agent-sb3" else AgentVectorEnv
        venv = agents(parallel_env, n_envs, start_method="fork", on_worker_failure=failure, **counting)
    elif facade == "subproc":
        from stable_baselines3.common.vec_env import SubprocVecEnv

        venv = SubprocVecEnv(fns, start_method="fork")
    elif facade.startswith("sb3"):
        venv = ShmVecEnv(fns, batch_size=batch, start_method="fork", on_worker_failure=failure, **counting)
    else:
        venv = ShmVectorEnv(fns, batch_size=batch, context="fork", on_worker_failure=failure, **counting)
    try:
        space = venv.action_space if facade.startswith(("sb3", "subproc", "agent-sb3")) else venv.single_action_space
        space.seed(0)
        rows = venv.num_envs if facade.startswith("agent-") else batch or n_envs
        actions = np.stack([space.sample() for _ in range(rows)])
        if batch is None:
            venv.reset()
            step = lambda: venv.step(actions)  # noqa: E731
        else:
            venv.async_reset()

            def step() -> None:
                venv.send(actions, venv.recv()[-1])

            step()  # the first batch of resets back, and its envs sent
        for _ in range(2000):  # warm-up: caches, spinners, allocator
            step()
    except BaseException:
        venv.close()
        raise
    return venv, step, rows


def rate(step: Callable[[], None], per_step: int, seconds: float) -> float:
    """Env-steps/s of ``step`` (``per_step`` env-steps each) over about ``seconds``."""
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(200):
            step()
        steps += 200
    return steps * per_step / (time.perf_counter() - start)


def serve(env_id: str, facade: str, n_envs: int = N_ENVS) -> None:
    """One side of the pair (``--serve``): the vec env opened once, then a line ``ready``, and for each line
    a number of seconds read from stdin the rate over that long, until stdin closes."""
    venv, step, per_step = open_stepper(env_id, facade, n_envs)
    try:
        print("ready", flush=True)
        for line in sys.stdin:
            print(f"{rate(step, per_step, float(line)):.0f}", flush=True)
    finally:
        venv.close()


def start(tree: str, env_id: str, facade: str, n_envs: int) -> subprocess.Popen[str]:
    """This script serving (``--serve``) on ``tree``, once its vec env is ready."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    command = [sys.executable, str(HERE / "ab_paired.py"), "--serve", env_id, facade, str(n_envs)]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    line = process.stdout.readline()
    if line.strip() != "ready":
        process.kill()
        raise RuntimeError(f"{tree}: the vec env did not start ({line!r}); its error is above")
    return process


def ask(process: subprocess.Popen[str], seconds: float) -> float:
    """The serving process's rate over ``seconds``."""
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(f"{seconds}\n")
    process.stdin.flush()
    return float(process.stdout.readline())


def paired(
    before: str, after: str, env_id: str, facades: tuple[str, str], rounds: int, seconds: float, n_envs: int
) -> dict[str, Any]:
    """Each side's rates and the after/before ratio of each round (the order swapped every round);
    ``facades``: the before side's and the after side's."""
    sides = {"before": start(before, env_id, facades[0], n_envs)}
    try:
        sides["after"] = start(after, env_id, facades[1], n_envs)
        rates: dict[str, list[float]] = {"before": [], "after": []}
        for r in range(rounds):
            for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
                rates[name].append(ask(sides[name], seconds))
        ratios = [a / b for a, b in zip(rates["after"], rates["before"])]
        return {"rates": rates, "ratios": ratios}
    finally:
        for process in sides.values():
            if process.stdin is not None:
                process.stdin.close()
            process.wait(timeout=60)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", help="the checkout to compare against (its root: the folder holding vecshm/)")
    parser.add_argument("after", help="the checkout measured")
    parser.add_argument("env_id", help="a Gymnasium id, or ale-infos (an env defined here)")
    parser.add_argument("facade", help="sb3, gym, sb3-async, gym-async, subproc, ... (the module's doc)")
    parser.add_argument("--after-facade", help="the after side's facade, if not the same (e.g. sb3+stats)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=0.5, help="each side's turn")
    parser.add_argument("--envs", type=int, default=8)
    args = parser.parse_args(argv)
    facades = (args.facade, args.after_facade or args.facade)
    result = paired(args.before, args.after, args.env_id, facades, args.rounds, args.seconds, args.envs)
    rates, ratios = result["rates"], sorted(result["ratios"])
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    print(
        f"{args.env_id} {' -> '.join(dict.fromkeys(facades))}: before {statistics.median(rates['before']):,.0f}/s, "
        f"after {statistics.median(rates['after']):,.0f}/s; after/before {statistics.median(ratios):.3f} "
        f"(quartiles {quartiles[0]:.3f}-{quartiles[-1]:.3f}, {len(ratios)} pairs)"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2], sys.argv[3], *map(int, sys.argv[4:5]))
    else:
        main()
