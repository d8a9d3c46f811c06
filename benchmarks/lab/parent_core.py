"""The parent's core during async batches (:mod:`vecshm.parent.core.balance`): unpinned, balanced, reserved.

For each workload, the bench's async system (batches of half the envs, ``recv`` then ``send``)
with the workers on every core (``cpu_affinity=[usable_cores()]``, which turns the balance off),
with the default balance, and with the workers always off the first core
(``cpu_affinity=[cores[1:]]``), and the bench's synchronous ``ShmVectorEnv`` beside them, measured
by the bench's own interleaved rounds (``vecshm.bench.runner.run_case``). The last column is the
ratio the balance measured last (the workers' busy time per remaining core over the parent's; it
gives the parent a core below ``RESERVE_BELOW``)::

    python benchmarks/lab/parent_core.py                      # frames, dict, vector, busy 5/15/40 us
    python benchmarks/lab/parent_core.py -w pong busy200 -r 3
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

from vecshm.bench.runner import run_case
from vecshm.bench.systems import Stepper, System, shm_async, shm_vector
from vecshm.bench.workloads import Workload, get_workload
from vecshm.shared.affinity import usable_cores

BUSY = {f"busy{us}": us for us in (5, 15, 40, 200)}  # vecshm/Busy-v0 at this many us per step
SYNC, UNPINNED, BALANCED, RESERVED = (
    "sync",
    "async unpinned",
    "async balanced (default)",
    "async parent's core reserved",
)


def workload_of(name: str) -> Workload:
    if name in BUSY:
        return Workload(name, f"{BUSY[name]} us per step", "vecshm/Busy-v0", (("step_us", float(BUSY[name])),))
    return get_workload(name)


def recording_ratio(
    build: Callable[[Workload, int], Stepper], ratios: dict[str, float | None], utilizations: dict[str, float | None]
) -> Callable:
    """``build``, whose vec env leaves its balance's last ratio and utilization in ``ratios[workload]``
    and ``utilizations[workload]`` when closed."""

    def build_and_record(workload: Workload, n_envs: int) -> Stepper:
        stepper = build(workload, n_envs)
        close = stepper.close

        def record_and_close() -> None:
            balance = stepper.env.core_balance
            ratios[workload.name] = balance.ratio
            utilizations[workload.name] = balance.utilization
            close()

        stepper.close = record_and_close  # type: ignore[method-assign]
        return stepper

    return build_and_record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "-w", "--workloads", nargs="+", default=["frames", "dict", "vector", "busy5", "busy15", "busy40"]
    )
    parser.add_argument("-n", "--envs", type=int, default=8)
    parser.add_argument("-r", "--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    cores = usable_cores()
    ratios: dict[str, float | None] = {}
    utilizations: dict[str, float | None] = {}
    systems = [
        System(SYNC, shm_vector()),
        System(UNPINNED, shm_async(cpu_affinity=[cores])),
        System(BALANCED, recording_ratio(shm_async(), ratios, utilizations)),
        System(RESERVED, shm_async(cpu_affinity=[cores[1:]])),
    ]
    print(f"{len(cores)} usable cores, {args.envs} envs, async batches of {args.envs // 2}\n")
    print(
        "| workload | "
        + " | ".join(s.name for s in systems)
        + " | balanced / unpinned | ratio measured | utilization |"
    )
    print("|---|" + "---:|" * (len(systems) + 3))
    for name in args.workloads:
        case = run_case(workload_of(name), args.envs, systems, args.rounds, args.seconds, ideal=False)
        medians = {system: statistics.median(rates) for system, rates in case.rounds.items()}
        cells = [f"{medians[s.name]:,.0f}" for s in systems[:1]]
        cells += [f"{medians[s.name]:,.0f} ({medians[s.name] / medians[SYNC]:.2f}x sync)" for s in systems[1:]]
        ratio = ratios.get(name)
        shown = "-" if ratio is None else f"{ratio:.1f}"
        used = utilizations.get(name)
        used_shown = "-" if used is None else f"{used:.2f}"
        gain = medians[BALANCED] / medians[UNPINNED]
        print(f"| {name} | " + " | ".join(cells) + f" | {gain:.2f}x | {shown} | {used_shown} |")


if __name__ == "__main__":
    main()
