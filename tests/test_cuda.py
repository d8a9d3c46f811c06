"""The GPU hand-off on a real GPU: registration, device tensors, the guard with a slow CUDA stream,
workers killed or restarted with copies in flight, and a parent killed with SIGKILL.

Every test skips without CUDA. ``benchmarks/gpu_check.sh`` runs these and the GPU benchmark rows
within one device lease; the CPU half is ``tests/test_device.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

from tests.conftest import assert_tree_equal, make_space_env, shm_entries, shm_entries_left, wait_gone
from tests.test_device import actions_for, numpy_tree

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.timeout(300),
]

from vecshm import ShmVecEnv, ShmVectorEnv  # noqa: E402
from vecshm.parent.handback import cuda  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTEXT = "forkserver"  # never fork from a process using CUDA (vecshm refuses it)


def frames(n: int, **kw):
    return [make_space_env("frame_u8", filled=True, **kw) for _ in range(n)]


def test_pin_memory_registers_the_segment_in_place_and_close_unregisters_it() -> None:
    envs = ShmVectorEnv(frames(4), copy=False, pin_memory=True, context=CONTEXT)
    assert envs.pin_memory
    obs, _ = envs.reset(seed=0)
    assert torch.from_numpy(obs).is_pinned()  # the segment's own pages: no staging copy
    on_gpu = torch.from_numpy(obs).to("cuda")
    np.testing.assert_array_equal(on_gpu.cpu().numpy(), obs)
    envs.close()
    assert not torch.from_numpy(obs).is_pinned()  # unregistered, while a view still maps it
    plain = ShmVectorEnv(frames(2), context=CONTEXT)
    assert not plain.pin_memory and not torch.from_numpy(plain.reset(seed=0)[0]).is_pinned()
    plain.close()


def test_sb3_facade_with_pin_memory_hands_its_numpy_outputs_to_obs_as_tensor() -> None:
    venv = ShmVecEnv(frames(4), pin_memory=True, start_method=CONTEXT)
    try:
        obs = venv.reset()
        assert isinstance(obs, np.ndarray) and torch.from_numpy(obs).is_pinned()
        obs, *_ = venv.step(np.zeros(4, dtype=np.int64))
        assert torch.from_numpy(obs).is_pinned()
    finally:
        venv.close()


def test_a_failed_registration_says_why_clears_cudas_error_and_leaves_nothing(monkeypatch) -> None:
    def refused(address: int, nbytes: int) -> int:  # flags CUDA refuses: a real error, invalid argument
        return int(torch.cuda.cudart().cudaHostRegister(address, nbytes, 0x7FFF))

    monkeypatch.setattr(cuda, "host_register", refused)
    import multiprocessing

    before = shm_entries()
    with pytest.raises(cuda.RegistrationError, match="could not register"):
        ShmVectorEnv(frames(2), pin_memory=True, context=CONTEXT)
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("vecshm")]
    assert shm_entries_left(before) == set()
    x = torch.ones(1000, device="cuda")  # a kernel launch: no stale error reported here
    assert float((x * 2).sum()) == 2000.0


def test_fork_with_restarts_is_refused_with_cuda() -> None:
    with pytest.raises(ValueError, match="forkserver"):
        ShmVectorEnv(frames(2), device="cuda", context="fork", on_worker_failure="restart")


@pytest.mark.parametrize("key", ["frame_u8", "box_f32", "dict_img", "dyn_mixed"])
def test_cuda_tensors_match_sync_vector_env(key: str) -> None:
    from tests.conftest import shared_memory_for

    fns = [make_space_env(key, filled=key == "frame_u8") for _ in range(3)]
    reference = SyncVectorEnv(fns)
    envs = ShmVectorEnv(fns, device="cuda", context=CONTEXT, shared_memory=shared_memory_for(key))
    try:
        obs, _ = envs.reset(seed=3)
        assert_tree_equal(numpy_tree(obs), reference.reset(seed=3)[0])
        for step in range(16):
            actions = actions_for(envs.single_action_space, 3, step)
            out = envs.step(torch.from_numpy(actions).cuda())
            ref = reference.step(actions)
            assert_tree_equal(numpy_tree(out[0]), ref[0], f"{key} {step}")
            for got, want in zip(out[1:4], ref[1:4]):
                assert got.is_cuda
                np.testing.assert_array_equal(got.cpu().numpy(), want)
    finally:
        envs.close()
        reference.close()


def _slow_stream(envs) -> None:
    """Queue a long kernel on vecshm's copy stream: the next copies start only after it."""
    with torch.cuda.stream(envs.run.outputs.stream.stream):
        torch.cuda._sleep(20_000_000)  # ~10 ms on a recent GPU


@pytest.mark.parametrize("async_batches", [False, True])
def test_slots_and_ring_units_wait_for_a_slow_stream(async_batches: bool) -> None:
    n = 4
    kw = dict(context=CONTEXT, envs_per_worker=1, batch_size=2 if async_batches else None)
    envs = ShmVectorEnv(frames(n, max_steps=9), device="cuda", **kw)
    plain = ShmVectorEnv(frames(n, max_steps=9), **kw)
    held, want = [], []
    try:
        if async_batches:
            envs.async_reset(seed=1)
            plain.async_reset(seed=1)
            for _ in range(20):
                _slow_stream(envs)
                obs, _r, _t, _tr, _i, ids = envs.recv()
                held.append(dict(zip(ids.tolist(), obs)))
                envs.send(torch.zeros(len(ids), dtype=torch.int64, device="cuda"))
                p_obs, *_rest, p_ids = plain.recv()
                want.append(dict(zip(p_ids.tolist(), p_obs.copy())))
                plain.send(np.zeros(len(p_ids), dtype=np.int64))
            # per env, the same history whichever order the envs came back in
            for i in range(n):
                got_i = [b[i].cpu().numpy() for b in held if i in b]
                want_i = [b[i] for b in want if i in b]
                for g, w in zip(got_i, want_i):
                    np.testing.assert_array_equal(g, w)
        else:
            held.append(envs.reset(seed=1)[0])
            want.append(plain.reset(seed=1)[0])
            for _ in range(20):
                _slow_stream(envs)
                held.append(envs.step(np.zeros(n, dtype=np.int64))[0])
                want.append(plain.step(np.zeros(n, dtype=np.int64))[0])
            for g, w in zip(held, want):
                np.testing.assert_array_equal(g.cpu().numpy(), w)
    finally:
        envs.close()
        plain.close()


def test_a_worker_killed_or_restarted_while_copies_are_in_flight() -> None:
    kw = dict(context=CONTEXT, envs_per_worker=1, on_worker_failure="restart")
    envs = ShmVectorEnv(frames(4, max_steps=50), device="cuda", **kw)
    plain = ShmVectorEnv(frames(4, max_steps=50), **kw)
    try:
        envs.reset(seed=0)
        plain.reset(seed=0)
        for _ in range(3):
            _slow_stream(envs)
            obs = envs.step(np.zeros(4, dtype=np.int64))[0]
            want = plain.step(np.zeros(4, dtype=np.int64))[0]
        os.kill(envs.processes[1].pid, signal.SIGKILL)  # while the last copy waits behind the kernel
        np.testing.assert_array_equal(obs.cpu().numpy(), want)  # the copy in flight read the slot the guard held
        with pytest.warns(RuntimeWarning):
            obs, _r, _term, trunc, infos = envs.step(np.zeros(4, dtype=np.int64))
            while not infos.get("worker_restarted", np.zeros(4, bool)).any():
                obs, _r, _term, trunc, infos = envs.step(np.zeros(4, dtype=np.int64))
        assert bool(trunc[1]) and infos["_worker_restarted"][1]
        for _ in range(3):
            _slow_stream(envs)
            obs, *_ = envs.step(np.zeros(4, dtype=np.int64))
        torch.cuda.synchronize()
        assert obs.is_cuda and obs.shape == (4, 210, 160, 3)
    finally:
        envs.close()
        plain.close()


PARENT = textwrap.dedent(
    """
    import sys, numpy as np, torch
    sys.path.insert(0, {root!r})
    from tests.conftest import make_space_env
    from vecshm import ShmVectorEnv

    if __name__ == "__main__":
        envs = ShmVectorEnv([make_space_env("frame_u8", filled=True) for _ in range(4)], device="cuda",
                            context="forkserver", batch_size=2)
        envs.async_reset(seed=0)
        for _ in range(10):
            obs, *_, ids = envs.recv()
            envs.send(torch.zeros(len(ids), dtype=torch.int64), ids)
        print(" ".join(str(p.pid) for p in envs.processes), flush=True)
        with torch.cuda.stream(envs.run.outputs.stream.stream):
            torch.cuda._sleep(2_000_000_000)  # copies in flight when the parent dies
        envs.recv()
        sys.stdin.read()
    """
)


def test_workers_and_the_segment_are_gone_when_a_parent_using_cuda_is_killed() -> None:
    before = shm_entries()
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT.format(root=ROOT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = parent.stdout.readline()
    assert line.strip(), parent.stderr.read()
    workers = [int(p) for p in line.split()]
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert wait_gone(workers, 20) == []
    assert shm_entries_left(before) == set()


def test_sb3_s_pixel_wrappers_above_a_pinned_vec_env_hand_out_page_locked_batches() -> None:
    from vecshm import VecFrameStack, VecTransposeImage

    venv = VecFrameStack(VecTransposeImage(ShmVecEnv(frames(2), pin_memory=True, start_method=CONTEXT)), 4)
    try:
        obs = venv.reset()
        for _ in range(3):
            obs, *_ = venv.step(np.zeros(2, dtype=np.int64))
        assert obs.shape == (2, 12, 210, 160) and torch.from_numpy(obs).is_pinned()
    finally:
        venv.close()
