"""The benchmark CLI runs a tiny configuration end to end and writes valid reports (no timing checks)."""

from __future__ import annotations

import json
import multiprocessing
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from vecshm.bench.cli import main
from vecshm.bench.cpu import CpuMeter
from vecshm.bench.systems import get_systems

pytestmark = pytest.mark.slow  # benchmarks run for seconds, some as scripts of their own


def test_tiny_benchmark_writes_markdown_and_json(tmp_path, capsys):
    code = main(
        [
            "-w",
            "vector",
            "-n",
            "2",
            "-r",
            "2",
            "--seconds",
            "0.05",
            "-s",
            "ShmVecEnv",
            "SyncVectorEnv",
            "SB3 SubprocVecEnv",
            "EnvPool",
            "-o",
            str(tmp_path),
            "-q",
        ]
    )
    assert code == 0
    report = json.loads((tmp_path / "results.json").read_text())
    case = report["cases"][0]
    assert case["workload"] == "vector" and case["n_envs"] == 2
    assert len(case["rounds"]["vecshm ShmVecEnv"]) == 2
    assert all(rate > 0 for rates in case["rounds"].values() for rate in rates)
    assert "ideal (independent processes)" not in case["rounds"]  # measured for CPU-bound envs only
    assert "EnvPool" in case["skipped"]
    assert report["machine"]["usable_cores"] >= 1
    assert "semaphore round-trip" in " ".join(report["floor"])
    table = (tmp_path / "results.md").read_text()
    assert "| vecshm ShmVecEnv |" in table and "skipped" in table
    assert "% of ideal" not in table
    assert table in capsys.readouterr().out
    assert (tmp_path / "results.png").stat().st_size > 0


def test_cpu_bound_workloads_report_their_share_of_the_ideal(tmp_path):
    argv = ["-w", "busy200", "-n", "2", "-r", "1", "--seconds", "0.05", "-s", "ShmVecEnv", "SB3 SubprocVecEnv"]
    assert main([*argv, "--no-floor", "-o", str(tmp_path), "-q"]) == 0
    case = json.loads((tmp_path / "results.json").read_text())["cases"][0]
    assert len(case["rounds"]["ideal (independent processes)"]) == 1
    assert "% of ideal" in (tmp_path / "results.md").read_text()


def test_default_run_covers_pixels_and_a_real_env_in_both_modes():
    from vecshm.bench.cli import build_parser

    args = build_parser().parse_args([])
    assert args.workload == ["frames", "pong"]
    names = [s.name for s in get_systems(None)]
    assert "vecshm ShmVectorEnv async (batch n/2)" in names and "SB3 SubprocVecEnv" in names


def test_the_user_s_env_runs_on_every_system_that_can_run_it_and_the_table_says_why_not(tmp_path, capsys):
    """--env alone: the user's env only, every default system and the other peers, EnvPool
    skipped with its reason, a line per measurement where standard error is no terminal."""
    argv = ["--env", "CartPole-v1", "-n", "2", "-r", "1", "--seconds", "0.05", "--no-floor", "-o", str(tmp_path)]
    assert main(argv) == 0
    report = json.loads((tmp_path / "results.json").read_text())
    (case,) = report["cases"]
    assert case["workload"] == "CartPole-v1" and case["n_envs"] == 2
    assert {"vecshm ShmVecEnv", "SB3 SubprocVecEnv", "Gymnasium SyncVectorEnv"} <= set(case["rounds"])
    assert "C++" in case["skipped"]["EnvPool"] and "TorchRL ParallelEnv" in {*case["rounds"], *case["skipped"]}
    assert "ideal (independent processes)" not in case["rounds"] and "no ideal" in case["note"]
    err = capsys.readouterr().err
    counted = re.findall(r"\[(\d+)/(\d+)\]", err)
    assert counted and counted[-1][0] == counted[-1][1]  # the display's count is what the run did


def test_the_user_s_env_by_module_and_keywords_with_an_ideal_when_its_step_does_work(tmp_path):
    argv = ["--env", "vecshm.envs:BusyEnv", "--env-kwargs", '{"step_us": 200}', "-n", "2", "-r", "1"]
    argv += ["--seconds", "0.05", "--no-floor", "-s", "vecshm ShmVecEnv", "SB3 SubprocVecEnv", "-o", str(tmp_path)]
    assert main([*argv, "-q"]) == 0
    (case,) = json.loads((tmp_path / "results.json").read_text())["cases"]
    assert len(case["rounds"]["ideal (independent processes)"]) == 1
    assert "the ideal is measured" in case["note"]


def test_the_user_s_pettingzoo_env_runs_on_the_multi_agent_systems(tmp_path):
    pytest.importorskip("mpe2")
    argv = ["--env", "mpe2.simple_spread_v3:parallel_env", "-n", "2", "-r", "1", "--seconds", "0.05", "--no-floor"]
    assert main([*argv, "--no-ideal", "-o", str(tmp_path), "-q"]) == 0
    (case,) = json.loads((tmp_path / "results.json").read_text())["cases"]
    assert "vecshm AgentVecEnv" in case["rounds"] and "3 agents" in case["note"]


def test_tune_s_choice_is_measured_against_every_plan_it_could_have_chosen(tmp_path, capsys):
    from vecshm.bench import tuned

    argv = ["-w", "mix", "-n", "2", "--seconds", "1.5", "-r", "1", "--sweep-seconds", "0.05", "-o", str(tmp_path)]
    assert tuned.main(argv) == 0
    (found,) = json.loads((tmp_path / "tuned.json").read_text())["workloads"]
    assert found["workload"] == "mix" and len(found["sweep"]) >= 2
    chosen = [line for line in (tmp_path / "tuned.md").read_text().splitlines() if "(tune's choice)" in line]
    assert len(chosen) == 1 and chosen[0] in capsys.readouterr().out


def test_unknown_names_are_clear_errors():
    with pytest.raises(ValueError, match="unknown system"):
        get_systems(["NoSuchVecEnv"])
    with pytest.raises(SystemExit):
        main(["-w", "no-such-workload"])


@pytest.mark.timeout(300)
def test_training_benchmark_times_learn_and_the_vec_env_inside_it(tmp_path, capsys):
    from vecshm.bench import train

    argv = ["--env", "CartPole-v1", "-n", "2", "-t", "256", "-r", "1", "-s", "vecshm ShmVecEnv", "SB3 SubprocVecEnv"]
    assert train.main([*argv, "--device", "cpu", "-o", str(tmp_path)]) == 0
    runs = json.loads((tmp_path / "train.json").read_text())["runs"]
    for name in ("vecshm ShmVecEnv", "SB3 SubprocVecEnv"):
        (run,) = runs[name]
        assert run["env_steps_per_s"] > 0 and 0 < run["vec_env_share"] < 1
    table = (tmp_path / "train.md").read_text()
    assert "| vecshm ShmVecEnv |" in table and "time inside the vec env" in table
    assert table in capsys.readouterr().out


LAB_RUNS = [
    ["batch_model.py", "-W", "2", "-k", "2", "-C", "2", "-b", "2"],
    ["batch_structure.py", "-n", "4", "-w", "2", "-b", "2", "-r", "1", "--seconds", "0.2", "--step-us", "100"],
    ["command_granularity.py", "-n", "4", "-k", "2", "-b", "4", "-r", "1", "--seconds", "0.2"],
    ["info_columns.py", "--envs", "2", "--rounds", "1"],
    ["manycore_probe.py", "4", "-w", "frames", "--rounds", "1", "--seconds", "0.2", "--only", "shm sync"],
    ["parent_core.py", "-w", "vector", "-n", "4", "-r", "1", "--seconds", "0.2"],
    ["parent_cost.py", "gym", "async", "--repeats", "1", "--cycles", "50"],
    ["parent_wakeups.py", "frames", "4", "--batch", "2", "--seconds", "0.2"],
    ["reset_ahead.py", "--learner-ms", "1", "--envs", "2", "--seconds", "0.3", "--rounds", "1"],
    ["step_halves.py", "50"],
    ["sync_placements.py", "frames", "1", "0.05"],
    ["trace_step_path.py"],
    ["wrapper_overhead.py", "--rounds", "1", "--steps", "20"],
]  # every script in benchmarks/lab/, with arguments for a tiny run


@pytest.mark.parametrize("script", LAB_RUNS, ids=lambda script: script[0])
def test_benchmark_scripts_run_against_the_current_code(script):
    """Every script in benchmarks/lab/, at a tiny size: they call vecshm's internals, which move
    (info_columns.py once broke on a changed signature). A script no test runs is one nobody
    notices break: the lab keeps none (``test_every_lab_script_is_run_and_listed``)."""
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "lab" / script[0]), *script[1:]],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_every_lab_script_is_run_and_listed():
    """Each script in benchmarks/lab/ is run above and listed in the lab's README; none is left
    that no test runs, and the README names none that is gone."""
    lab = Path(__file__).resolve().parents[1] / "benchmarks" / "lab"
    scripts = {path.name for path in lab.glob("*.py")}
    run = {script[0] for script in LAB_RUNS}
    readme = (lab / "README.md").read_text()
    listed = set(re.findall(r"^\| `([a-z_]+\.py)` \|", readme, flags=re.M))
    assert scripts == run, f"not run by a test: {sorted(scripts - run)}; run but gone: {sorted(run - scripts)}"
    assert scripts == listed, (
        f"not in the README: {sorted(scripts - listed)}; listed but gone: {sorted(listed - scripts)}"
    )


def test_the_paired_a_b_runs_two_trees_in_turn_and_reports_the_ratio():
    """benchmarks/ab_paired.py on this tree twice, with stats=True on the after side (the check of an option's cost)."""
    root = Path(__file__).resolve().parents[1]
    command = [sys.executable, str(root / "benchmarks" / "ab_paired.py"), str(root), str(root), "CartPole-v1", "gym"]
    result = subprocess.run(
        [*command, "--after-facade", "gym+stats", "--rounds", "2", "--seconds", "0.05", "--envs", "2"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "CartPole-v1 gym -> gym+stats: before " in result.stdout and "(quartiles " in result.stdout


def test_the_device_s_opencv_stand_in_warps_atari_frames_as_opencv_does():
    """benchmarks/device_cv2 replaces OpenCV in the device's training stage: the same frames out of SB3's WarpFrame."""
    cv2 = pytest.importorskip("cv2")
    gym = pytest.importorskip("gymnasium")
    ale_py = pytest.importorskip("ale_py")
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "device_cv2" / "cv2.py"
    spec = importlib.util.spec_from_file_location("device_cv2", path)
    stand_in = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stand_in)
    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5")
    frame, _ = env.reset(seed=0)
    for _ in range(20):
        frame = env.step(env.action_space.sample())[0]
    env.close()
    stand_in.ocl.setUseOpenCL(False)
    gray = stand_in.cvtColor(frame, stand_in.COLOR_RGB2GRAY)
    assert np.array_equal(gray, cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY))
    warped = stand_in.resize(gray, (84, 84), interpolation=stand_in.INTER_AREA)
    reference = cv2.resize(gray, (84, 84), interpolation=cv2.INTER_AREA)
    assert warped.shape == reference.shape and warped.dtype == reference.dtype
    assert np.mean(np.abs(warped.astype(int) - reference)) < 2.0


def test_device_rows_copy_to_the_device_and_a_missing_cuda_prints_a_skip_line(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        assert main(["--device", "cuda", "-o", str(tmp_path / "cuda"), "-q"]) == 0
        assert capsys.readouterr().out.startswith("skipping --device cuda: torch.cuda.is_available() is False")
        assert not (tmp_path / "cuda").exists()
    argv = ["--device", "cpu", "-w", "vector", "-n", "2", "-r", "1", "--seconds", "0.05", "--no-floor"]
    assert main([*argv, "-s", "SubprocVecEnv", "vecshm ShmVectorEnv device=cpu", "-o", str(tmp_path), "-q"]) == 0
    case = json.loads((tmp_path / "results.json").read_text())["cases"][0]
    assert set(case["rounds"]) == {"SB3 SubprocVecEnv", "vecshm ShmVectorEnv device=cpu"}


def test_a_system_that_fails_to_start_is_reported_and_the_others_are_measured(tmp_path, monkeypatch):
    from vecshm.bench import systems

    def broken(workload, n_envs):
        raise RuntimeError("this system cannot start here")

    monkeypatch.setitem(systems.SYSTEMS, "broken system", systems.System("broken system", broken))
    argv = ["-w", "vector", "-n", "2", "-r", "1", "--seconds", "0.05", "--no-floor", "-q", "-o", str(tmp_path)]
    assert main([*argv, "-s", "broken system", "vecshm ShmVecEnv"]) == 0
    case = json.loads((tmp_path / "results.json").read_text())["cases"][0]
    assert case["skipped"]["broken system"] == "failed: RuntimeError: this system cannot start here"
    assert len(case["rounds"]["vecshm ShmVecEnv"]) == 1


PEERS = ["PufferLib", "Tianshou", "TorchRL"]


def test_every_peer_runs_on_tiny_sizes_or_says_why_not_with_a_cpu_figure_per_row(tmp_path):
    """PufferLib (sync, one worker and one per core, and async), Tianshou (sync and wait_num) and
    TorchRL each step the frames env, or are listed skipped with the reason (a package missing);
    every measured row has its CPU per 1,000 env-steps."""
    from vecshm.bench.peers import PEER_SYSTEMS

    # 0.3 s a row: CPU times tick every 10 ms
    argv = ["-w", "frames", "-n", "2", "-r", "1", "--seconds", "0.3", "--no-floor", "--no-ideal", "-q"]
    assert main([*argv, "-o", str(tmp_path), "-s", *PEERS, "vecshm ShmVecEnv"]) == 0
    case = json.loads((tmp_path / "results.json").read_text())["cases"][0]
    for system in PEER_SYSTEMS:
        if system.name in case["skipped"]:
            assert "is not installed" in case["skipped"][system.name], case["skipped"][system.name]
        else:
            assert case["rounds"][system.name][0] > 0
    for name, rates in case["rounds"].items():
        assert len(case["cpu_ms_per_1000_env_steps"][name]) == len(rates)
        assert case["cpu_ms_per_1000_env_steps"][name][0] > 0, name
    assert "CPU ms / 1k steps" in (tmp_path / "results.md").read_text()


def _spin_then_block(spins: int, done: Any) -> None:
    """Burn CPU for ``spins`` loop turns, say so, then block for good (as a spinner that stopped)."""
    total = 0
    for k in range(spins):
        total += k
    done.send(total)
    done.recv()  # never comes: the test ends the process


def test_the_bench_waits_for_a_system_s_spinners_before_measuring_the_next():
    """PufferLib's workers spin for half a second after their last step; measured next, vecshm's
    first row lost a third of its rate. ``CpuMeter.settle`` returns once the system's processes are
    idle, and only then (the process here is idle once it has said it stopped spinning)."""
    ours, theirs = multiprocessing.Pipe()
    spinner = multiprocessing.get_context("fork").Process(target=_spin_then_block, args=(30_000_000, theirs))
    spinner.start()
    try:
        meter = CpuMeter({spinner.pid})
        waited = meter.settle(limit=60.0)
        assert ours.poll(0), f"settle() returned after {waited:.2f} s, while the process still spun"
        assert waited < 60.0
        spun = psutil.Process(spinner.pid).cpu_times()
        assert spun.user + spun.system > 0.1  # (it did spin for a while: this test checks something)
    finally:
        spinner.kill()
        spinner.join()


@pytest.mark.timeout(280)
def test_shared_data_reports_memory_and_start_up_for_every_system(tmp_path, capsys):
    from vecshm.bench import shared_data
    from vecshm.bench.cli import main

    assert shared_data.main(["--table-mib", "4", "-r", "1", "-n", "2", "-o", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert all(f"| {name} |" in text for name in shared_data.SYSTEMS)
    assert (tmp_path / "shared-data.md").exists() and (tmp_path / "shared-data.json").exists()
    assert main(["-w", "shared-data", "-r", "1", "-n", "2", "-s", "1 MiB", "-o", str(tmp_path)]) == 0  # the bench's -w
    assert "| vecshm ShmVecEnv + vecshm.share, 1 MiB table |" in capsys.readouterr().out
