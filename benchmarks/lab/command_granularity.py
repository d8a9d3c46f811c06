"""What commands env by env cost against whole-process commands, on the same async loop.

Where an async batch is not exactly one process's envs, each env takes commands of its own
(docs/design.md, "Commands env by env"): a process runs one command per env that has its action
and publishes each env as soon as it is done. That is what lets batches fill env by env on many
cores, and it costs fixed work per env (a command, a status, a ring unit, a bell) where a whole
process's envs used to share it. This measures that cost where it shows most, on envs that do
nothing, by running the same ``recv``/``send`` loop with the engine's choice forced either way,
interleaved::

    python benchmarks/lab/command_granularity.py                       # frames, 8 envs as 2 x 4, batch 8
    python benchmarks/lab/command_granularity.py -w pong -b 4 -r 3

Batch 8 of 8 envs is the fairest comparison: every env is sent back at once, so both modes run the
same work and only the per-command costs differ. With smaller batches commands env by env also
change the batches' shape, which is what ``benchmarks/lab/batch_structure.py`` measures.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager

from vecshm import ShmVectorEnv
from vecshm.bench.workloads import get_workload
from vecshm.parent.plan import VecEnvPlan

MODES = ("whole process", "env by env")


@contextmanager
def commands(mode: str) -> Iterator[None]:
    """Vec envs built inside take commands in ``mode``, whatever the batch (``VecEnvPlan.build``'s
    ``commands``, which vecshm otherwise sets to ``"auto"``)."""
    build = VecEnvPlan.build.__func__  # type: ignore[attr-defined]
    forced = "per_env" if mode == "env by env" else "per_process"
    VecEnvPlan.build = classmethod(lambda cls, *args, commands="auto", **kw: build(cls, *args, commands=forced, **kw))
    try:
        yield
    finally:
        VecEnvPlan.build = classmethod(build)  # type: ignore[method-assign]


def rate(envs: ShmVectorEnv, actions: list, batch: int, seconds: float) -> float:
    """Env-steps per second of ``recv()`` then ``send()`` to the envs it returned."""
    steps, k, started = 0, 0, time.perf_counter()
    while True:
        *_, env_ids = envs.recv()
        envs.send(actions[k % len(actions)][: len(env_ids)], env_ids)
        steps, k = steps + len(env_ids), k + 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-w", "--workload", default="frames")
    parser.add_argument("-n", "--envs", type=int, default=8)
    parser.add_argument("-k", "--envs-per-worker", type=int, default=4)
    parser.add_argument("-b", "--batch", type=int, default=8)
    parser.add_argument("-r", "--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    workload = get_workload(args.workload)
    actions = workload.actions(args.envs)
    built = {}
    for mode in MODES:
        with commands(mode):
            built[mode] = ShmVectorEnv(
                workload.factories(args.envs), batch_size=args.batch, envs_per_worker=args.envs_per_worker
            )
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    try:
        for envs in built.values():
            envs.async_reset(seed=0)
        for r in range(args.rounds):
            for mode, envs in built.items():
                rates[mode].append(rate(envs, actions, args.batch, args.seconds))
                print(f"round {r + 1}  {mode:<14} {rates[mode][-1]:>10,.0f} env-steps/s", flush=True)
    finally:
        for envs in built.values():
            envs.close()
    whole, per_env = (statistics.median(rates[mode]) for mode in MODES)
    print(
        f"{args.workload}, {args.envs} envs as {args.envs // args.envs_per_worker} x {args.envs_per_worker}, "
        f"batch {args.batch}: env by env {per_env:,.0f} vs whole process {whole:,.0f} env-steps/s "
        f"({per_env / whole:.2f}x, medians of {args.rounds} rounds)"
    )


if __name__ == "__main__":
    main()
