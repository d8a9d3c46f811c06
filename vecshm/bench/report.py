"""Results as a Markdown table, a JSON record with the raw rounds, and a PNG plot."""

from __future__ import annotations

import json
import os
import platform
import sys
from typing import Any

import numpy as np

from vecshm.about import OPTIONAL_PACKAGES, REQUIRED_PACKAGES, installed_versions
from vecshm.bench.runner import IDEAL, Case
from vecshm.shared.affinity import usable_cores

__all__ = ["machine_info", "markdown", "to_json", "plot"]


def machine_info() -> dict[str, Any]:
    """The machine and the installed versions of vecshm and every peer, recorded with the results."""
    packages = ("vecshm", *REQUIRED_PACKAGES, *OPTIONAL_PACKAGES)
    versions = {name: version for name, version in installed_versions(packages).items() if version}
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(usable_cores()),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "versions": versions,
    }


def _fmt(value: float) -> str:
    return f"{value:,.0f}"


def markdown(cases: list[Case], info: dict[str, Any], floor: dict[str, Any] | None = None) -> str:
    lines = [
        f"Machine: {info['usable_cores']} usable cores ({info['machine']}), load average "
        f"{', '.join(f'{x:.2f}' for x in info['load_average'] or [])}, Python {info['python']}",
        "",
    ]
    for case in cases:
        ideal = float(np.median(case.rounds[IDEAL])) if case.rounds.get(IDEAL) else None
        rounds = len(next(iter(case.rounds.values()), []))
        share_header, share_rule = (" % of ideal |", "---:|") if ideal else ("", "")
        lines += [
            f"### {case.workload}, {case.n_envs} {case.unit} ({rounds} interleaved rounds)",
            "",
            *([case.note, ""] if case.note else []),
            f"| system | env-steps/s (median) | min | max | CPU ms / 1k steps | x {case.baseline} |{share_header}",
            f"|---|---:|---:|---:|---:|---:|{share_rule}",
        ]
        for name, values in case.rounds.items():
            ratios = case.ratios(name)
            ratio = f"{np.median(ratios):.2f}x" if ratios else "-"
            spread = f"{_fmt(np.median(values))} | {_fmt(min(values))} | {_fmt(max(values))}"
            cpu = case.cpu.get(name)
            spread += f" | {np.median(cpu):,.1f}" if cpu else " | -"
            share = ""
            if ideal:
                share = f" {100 * np.median(values) / ideal:.0f}% |" if name != IDEAL else " 100% |"
            lines.append(f"| {name} | {spread} | {ratio} |{share}")
        for name, reason in case.skipped.items():
            lines.append(f"| {name} | skipped: {reason} | | | | |{' |' if ideal else ''}")
        lines += ["", RATIO_NOTE.format(baseline=case.baseline), ""]
    if floor:
        lines += ["### Floor on this machine", ""]
        lines += [f"- {key}: {value}" for key, value in floor.items()]
        lines.append("")
    return "\n".join(lines)


# Under every table: the ratio column cannot be recomputed from the medians beside it, on purpose.
RATIO_NOTE = (
    "x {baseline} is the median of each round's ratio (both measured back to back in that round), "
    "not the ratio of the medians above: it cancels the host's drift between rounds, so it can differ "
    "from dividing one median by another."
)


def to_json(cases: list[Case], info: dict[str, Any], floor: dict[str, Any] | None, argv: list[str]) -> str:
    return json.dumps(
        {
            "command": argv,
            "machine": info,
            "floor": floor,
            "cases": [
                {
                    "workload": c.workload,
                    "n_envs": c.n_envs,
                    "note": c.note,
                    "rounds": c.rounds,
                    "cpu_ms_per_1000_env_steps": c.cpu,
                    "ratios_to_baseline": {name: c.ratios(name) for name in c.rounds},
                    "skipped": c.skipped,
                }
                for c in cases
            ],
        },
        indent=2,
    )


def plot(cases: list[Case], path: str) -> str | None:
    """The PNG: ratios to the baseline as bars per workload (one env count each), or throughput
    against num_envs per system for a sweep. None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    if not cases:
        return None
    sweep = len({c.n_envs for c in cases}) > 1
    fig = _sweep_figure(plt, cases) if sweep else _ratio_figure(plt, cases)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")  # (the sweep's legend stands outside its panels)
    plt.close(fig)
    return path


def _ratio_figure(plt: Any, cases: list[Case]) -> Any:
    """One panel per workload (each on its own scale): every system's median ratio to the baseline,
    one colour per system across the panels (20 before one repeats), and the ideal, where it was
    measured, as a dashed line."""
    baselines = {IDEAL, *(c.baseline for c in cases)}
    names = [name for name in dict.fromkeys(n for c in cases for n in c.rounds) if name not in baselines]
    colors = {name: plt.get_cmap("tab20")(k % 20) for k, name in enumerate(names)}
    fig, axes = plt.subplots(len(cases), 1, figsize=(9, 1.6 + 0.42 * (len(names) + 1) * len(cases)), squeeze=False)
    for ax, case in zip(axes[:, 0], cases):
        shown = [(name, float(np.median(case.ratios(name)))) for name in names if case.ratios(name)]
        for y, (name, value) in enumerate(shown):
            ax.barh(y, value, 0.8, color=colors[name])
            ax.text(value, y, f" {value:.2f}x", va="center", fontsize=8)
        ideal = float(np.median(case.ratios(IDEAL))) if case.ratios(IDEAL) else None
        if ideal is not None:
            ax.axvline(ideal, color="dimgray", linestyle="--", linewidth=1)
            # (x where the line is, y at the panel's top whatever its bars)
            ax.text(
                ideal,
                0.99,
                f" ideal {ideal:.2f}x",
                fontsize=8,
                color="dimgray",
                va="top",
                transform=ax.get_xaxis_transform(),
            )
        ax.set_yticks(range(len(shown)))
        ax.set_yticklabels([name for name, _ in shown], fontsize=8)
        ax.invert_yaxis()
        ax.axvline(1.0, color="black", linewidth=1)
        ax.set_xlim(0, max([value for _, value in shown] + [1.0, ideal or 0.0]) * 1.15)
        ax.set_title(f"{case.workload}, {case.n_envs} {case.unit} (x {case.baseline})", fontsize=10)
        ax.grid(True, axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("env-steps/s relative to each panel's baseline (1.0 = the same; higher is faster)")
    fig.suptitle("How much faster than what users run now, for envs like these")
    return fig


def _sweep_figure(plt: Any, cases: list[Case]) -> Any:
    """Per workload (a column), against n_envs per system: throughput above, and below the CPU it
    cost per 1,000 env-steps (the parent and every process the system started)."""
    workloads = sorted({c.workload for c in cases})
    fig, axes = plt.subplots(2, len(workloads), figsize=(6 * len(workloads), 8.5), squeeze=False)
    # one look per system in every panel, distinct for 80 systems (20 colours, then other markers)
    every = sorted({name for c in cases for name in c.rounds})
    looks = {name: (plt.get_cmap("tab20")(k % 20), "osD^"[k // 20 % 4]) for k, name in enumerate(every)}
    for column, workload in enumerate(workloads):
        chosen = sorted((c for c in cases if c.workload == workload), key=lambda c: c.n_envs)
        names = sorted({name for c in chosen for name in c.rounds})
        for row, (of, label) in enumerate([("rounds", "env-steps/s (median)"), ("cpu", "CPU ms per 1,000 env-steps")]):
            ax = axes[row][column]
            for name in names:
                points = [(c.n_envs, np.median(getattr(c, of)[name])) for c in chosen if getattr(c, of).get(name)]
                if points:
                    xs, ys = zip(*points)
                    color, marker = looks[name]
                    ax.plot(xs, ys, marker=marker, color=color, label=name, linestyle="--" if name == IDEAL else "-")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("num_envs")
            ax.set_ylabel(label)
            ax.set_title(workload if row == 0 else f"{workload}: CPU per env-step (lower costs less)")
            ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return fig
