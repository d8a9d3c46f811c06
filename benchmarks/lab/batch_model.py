"""What the batch structure allows, in a model with no overheads: the ceiling each arrangement has.

A discrete-event model of ``W`` workers hosting ``k`` envs each on ``C`` cores (shared fairly when
there are more workers than cores), stepping in batches of ``b`` envs that go back at once (no
learner, no parent cost, no wake-up latency). An env step costs ``step_ms``; the step after an
episode ends is a reset (next-step autoreset) costing ``reset_ms``; episodes last 760-920 steps
(Pong under the bench's random action cycle). The ideal is every core stepping all the time.

Two ways a worker may run its envs:
- ``worker`` (vecshm for whole batches, and where a batch is one process's envs): a worker starts
  once all its envs have their actions and publishes them together when the last is done;
- ``env`` (vecshm's other async batches, see docs/design.md): a worker steps whichever of its envs
  have actions, and publishes each as it is done (EnvPool's threads, confined to one worker's envs).

It shows where a target is out of reach for any engine, and what an engine change could gain::

    python benchmarks/lab/batch_model.py                     # the 16-core and 2-core arrangements
    python benchmarks/lab/batch_model.py -W 16 -k 4 -C 16 -b 32 64 --step-ms 0.37 --reset-ms 8.4

``benchmarks/lab/batch_structure.py`` measures the same shapes with the real engine and sleeping envs.
"""

from __future__ import annotations

import argparse
import random
from collections import deque

EPISODE_STEPS = (760, 920)


class Model:
    """The state of one run: each env's episode, each worker's queue, the envs finished."""

    def __init__(self, workers: int, k: int, policy: str, step_ms: float, reset_ms: float, seed: int) -> None:
        self.rng = random.Random(seed)
        self.k, self.policy, self.step_ms, self.reset_ms = k, policy, step_ms, reset_ms
        n = workers * k
        self.left = [self.rng.randint(1, EPISODE_STEPS[1]) for _ in range(n)]  # steps left in each episode
        self.resetting = [False] * n
        self.waiting = [deque(range(w * k, (w + 1) * k)) for w in range(workers)]  # envs with their action
        self.running: list[list[list[float]] | None] = [None] * workers  # per worker: [env, work left], in order
        self.unpublished: list[list[int]] = [[] for _ in range(workers)]
        self.finished: deque[int] = deque()

    def start(self, w: int) -> None:
        if not self.waiting[w] or (self.policy == "worker" and len(self.waiting[w]) < self.k):
            return
        self.running[w] = [[e, self.reset_ms if self.resetting[e] else self.step_ms] for e in self.waiting[w]]
        self.waiting[w].clear()

    def done(self, w: int, e: int) -> None:
        """Env ``e`` of worker ``w`` has stepped (or reset)."""
        if self.resetting[e]:
            self.resetting[e], self.left[e] = False, self.rng.randint(*EPISODE_STEPS)
        else:
            self.left[e] -= 1
            self.resetting[e] = self.left[e] == 0
        (self.finished if self.policy == "env" else self.unpublished[w]).append(e)
        if not self.running[w]:
            self.running[w] = None
            self.finished.extend(self.unpublished[w])
            self.unpublished[w] = []

    def advance(self, cores: int) -> float:
        """Run until the next env is done; the time that took."""
        busy = [w for w, queue in enumerate(self.running) if queue]
        speed = min(1.0, cores / len(busy))
        dt = min(self.running[w][0][1] for w in busy) / speed
        for w in busy:
            head = self.running[w][0]
            head[1] -= dt * speed
            if head[1] <= 1e-9:
                self.done(w, int(self.running[w].pop(0)[0]))
        return dt

    def hand_back(self, batch: int) -> int:
        """Return every full batch finished to its workers at once (no learner); env-steps returned."""
        steps = 0
        while len(self.finished) >= batch:
            for _ in range(batch):
                e = self.finished.popleft()
                self.waiting[e // self.k].append(e)
            steps += batch
        for w, queue in enumerate(self.running):
            if queue is None:
                self.start(w)
        return steps


def ceiling(
    workers: int,
    k: int,
    cores: int,
    batch: int,
    policy: str,
    step_ms: float,
    reset_ms: float,
    ms: float = 20_000.0,
    seed: int = 0,
) -> float:
    """Env-steps over ``ms`` of model time, as a fraction of the ideal."""
    model = Model(workers, k, policy, step_ms, reset_ms, seed)
    for w in range(workers):
        model.start(w)
    now, steps = 0.0, 0
    while now < ms:
        now += model.advance(cores)
        steps += model.hand_back(batch)
    ideal = cores / (step_ms + reset_ms / sum(EPISODE_STEPS) * 2) * ms
    return steps / ideal


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-W", "--workers", type=int, nargs="+")
    parser.add_argument("-k", "--envs-per-worker", type=int, default=4)
    parser.add_argument("-C", "--cores", type=int, default=16)
    parser.add_argument("-b", "--batch", type=int, nargs="+")
    parser.add_argument("--step-ms", type=float, default=0.37)  # Pong on the 16-core machine
    parser.add_argument("--reset-ms", type=float, default=8.4)
    args = parser.parse_args()
    if args.workers:
        cases = [
            (w, args.envs_per_worker, args.cores, b)
            for w in args.workers
            for b in args.batch or [w * args.envs_per_worker]
        ]
    else:  # 64 envs on 16 cores as the 16-core bench arranges them, the alternatives, and the 2-core bench
        cases = [
            (16, 4, 16, 64),
            (16, 4, 16, 32),
            (16, 4, 16, 16),
            (32, 2, 16, 64),
            (32, 2, 16, 32),
            (64, 1, 16, 32),
            (2, 4, 2, 8),
            (2, 4, 2, 4),
        ]
    print("| envs as | cores | batch | whole workers | env by env |")
    print("|---|---:|---:|---:|---:|")
    for w, k, c, b in cases:
        rates = [ceiling(w, k, c, b, policy, args.step_ms, args.reset_ms) for policy in ("worker", "env")]
        print(
            f"| {w} workers x {k} | {c} | {b}{' (sync)' if b == w * k else ''} | "
            + " | ".join(f"{r:.0%}" for r in rates)
            + " |"
        )


if __name__ == "__main__":
    main()
