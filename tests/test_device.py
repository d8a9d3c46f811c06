"""Outputs as torch tensors (``device=``) and the GPU hand-off's guard, on CPU.

References are Gymnasium's ``SyncVectorEnv`` and SB3's ``DummyVecEnv``-shaped numpy outputs of the
same vec env; the guard is driven by a slow fake stream whose copies read host memory only when
their event is waited for, as a DMA reads it after the call returned. The CUDA half is
``tests/test_cuda.py`` (it skips without a GPU).
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

from tests.conftest import SPACES, assert_tree_equal, make_space_env, shared_memory_for
from vecshm import ShmVecEnv, ShmVectorEnv
from vecshm.parent.handback.delivery import CopyGuard, DeviceOutputs

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(120)

CUDA = torch.cuda.is_available()


def numpy_tree(value: Any) -> Any:
    """``value`` with every tensor (or fake device tensor) as a numpy array."""
    if isinstance(value, dict):
        return {k: numpy_tree(v) for k, v in value.items()}
    if isinstance(value, tuple) and not hasattr(value, "numpy"):
        return tuple(numpy_tree(v) for v in value)
    if isinstance(value, torch.Tensor):
        return value.cpu().numpy()
    if hasattr(value, "numpy"):
        return value.numpy()
    return value


def tensor_leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensor_leaves(v)]
    if isinstance(value, tuple):
        return [t for v in value for t in tensor_leaves(v)]
    return [value] if isinstance(value, torch.Tensor) else []


def inside(tensor: Any, envs: Any) -> bool:
    mapping = envs.segment.mapping
    start, size = mapping.ctypes.data, mapping.nbytes
    return start <= tensor.data_ptr() and tensor.data_ptr() + tensor.nbytes <= start + size


def actions_for(space: gym.Space, n: int, step: int) -> np.ndarray:
    space.seed(step)
    return np.stack([space.sample() for _ in range(n)])


# -- device="cpu": the same memory numpy outputs would be -----------------------------------------


@pytest.mark.parametrize("key", sorted(SPACES))
def test_cpu_tensors_match_sync_vector_env_bit_for_bit_on_every_space(key: str) -> None:
    fns = [make_space_env(key, filled=key == "frame_u8") for _ in range(3)]
    reference = SyncVectorEnv(fns)
    envs = ShmVectorEnv(fns, device="cpu", shared_memory=shared_memory_for(key))
    try:
        obs, _ = envs.reset(seed=5)
        ref_obs, _ = reference.reset(seed=5)
        assert_tree_equal(numpy_tree(obs), ref_obs, key)
        for step in range(14):
            actions = actions_for(envs.single_action_space, 3, step)
            out = envs.step(torch.from_numpy(actions) if step % 2 else actions)  # torch actions too
            ref = reference.step(actions)
            assert_tree_equal(numpy_tree(out[0]), ref[0], f"{key} step {step}")
            for got, want in zip(out[1:4], ref[1:4]):
                assert isinstance(got, torch.Tensor)
                np.testing.assert_array_equal(got.numpy(), want)
                assert got.numpy().dtype == want.dtype
            assert_tree_equal(out[4], ref[4], f"{key} infos {step}")  # infos stay numpy
    finally:
        envs.close()
        reference.close()


def test_cpu_tensors_share_the_segment_and_keep_their_slot_as_numpy_arrays_do() -> None:
    fns = [make_space_env("frame_u8", filled=True) for _ in range(2)]
    with ShmVectorEnv(fns, device="cpu") as envs:  # copy=True: each batch owns a lent slot
        envs.reset(seed=0)
        first = envs.step(np.zeros(2, dtype=np.int64))[0]
        assert inside(first, envs)  # no copy: the tensor is over the slot the workers wrote
        kept = first.clone()
        for _ in range(8):  # more steps than slots: the held slot is never reused
            later = envs.step(np.zeros(2, dtype=np.int64))[0]
            assert inside(later, envs)
        assert torch.equal(first, kept)
        assert not torch.equal(later, kept)
    fns = [make_space_env("frame_u8", filled=True) for _ in range(2)]
    with ShmVectorEnv(fns, device="cpu", copy=False) as envs:  # views the next command overwrites
        envs.reset(seed=0)
        a = envs.step(np.zeros(2, dtype=np.int64))[0]
        b = envs.step(np.zeros(2, dtype=np.int64))[0]
        assert a.data_ptr() == b.data_ptr() and inside(a, envs)


def test_cpu_tensors_of_async_batches_match_the_numpy_batches_and_are_lent_from_the_ring() -> None:
    fns = [make_space_env("frame_u8", filled=True, max_steps=5) for _ in range(4)]
    kw = dict(batch_size=2, envs_per_worker=1, context="fork")
    with ShmVectorEnv(fns, device="cpu", **kw) as envs, ShmVectorEnv(fns, **kw) as plain:
        assert envs.runtime.ring
        envs.async_reset(seed=1)
        plain.async_reset(seed=1)
        got = {}
        want = {}
        for _ in range(12):
            obs, rew, term, trunc, _info, ids = envs.recv()
            assert inside(obs, envs)
            for k, i in enumerate(ids.tolist()):
                got.setdefault(i, []).append((obs[k].numpy().copy(), float(rew[k]), bool(term[k]), bool(trunc[k])))
            envs.send(torch.zeros(len(ids), dtype=torch.int64))
            p_obs, p_rew, p_term, p_trunc, _pinfo, p_ids = plain.recv()
            for k, i in enumerate(p_ids.tolist()):
                want.setdefault(i, []).append((p_obs[k].copy(), float(p_rew[k]), bool(p_term[k]), bool(p_trunc[k])))
            plain.send(np.zeros(len(p_ids), dtype=np.int64))
        for i in set(got) & set(want):  # per env, its history is the same whichever order envs finished
            n = min(len(got[i]), len(want[i]))
            for (o1, *r1), (o2, *r2) in zip(got[i][:n], want[i][:n]):
                np.testing.assert_array_equal(o1, o2)
                assert r1 == r2


def test_sb3_facade_recv_gives_tensors_and_its_step_stays_numpy() -> None:
    fns = [make_space_env("box_f32") for _ in range(4)]
    with_device = ShmVecEnv(fns, device="cpu", batch_size=2, start_method="fork")
    plain = ShmVecEnv(fns, batch_size=2, start_method="fork")
    try:
        with_device.seed(3)
        plain.seed(3)
        obs = with_device.reset()
        assert isinstance(obs, np.ndarray)
        np.testing.assert_array_equal(obs, plain.reset())
        step = with_device.step(np.zeros(4, dtype=np.int64))
        ref = plain.step(np.zeros(4, dtype=np.int64))
        assert isinstance(step[0], np.ndarray) and isinstance(step[1], np.ndarray)
        np.testing.assert_array_equal(step[1], ref[1])
        with_device.send(np.zeros(4, dtype=np.int64), np.arange(4))
        plain.send(np.zeros(4, dtype=np.int64), np.arange(4))
        got = [with_device.recv() for _ in range(2)]
        want = [plain.recv() for _ in range(2)]
        by_env = {i: (o, r) for g in got for i, o, r in zip(g[5].tolist(), g[0], g[1])}
        for w in want:
            for i, o, r in zip(w[5].tolist(), w[0], w[1]):
                assert isinstance(by_env[i][0], torch.Tensor)
                np.testing.assert_array_equal(by_env[i][0].numpy(), o)
                assert by_env[i][1].item() == r and by_env[i][1].dtype == torch.float64
    finally:
        with_device.close()
        plain.close()


# -- the options without CUDA ---------------------------------------------------------------------


@pytest.mark.skipif(CUDA, reason="needs a machine without CUDA")
@pytest.mark.parametrize(
    ("facade", "option", "named"),
    [
        (ShmVectorEnv, {"device": "cuda"}, "device='cuda'"),
        (ShmVectorEnv, {"pin_memory": True}, "pin_memory=True"),
        (ShmVecEnv, {"device": "cuda:0"}, "device='cuda:0'"),
        (ShmVecEnv, {"pin_memory": True, "device": "cpu"}, "pin_memory=True"),
    ],
)
def test_cuda_options_without_cuda_name_the_option_and_start_no_worker(facade, option, named) -> None:
    import multiprocessing

    before = len(multiprocessing.active_children())
    with pytest.raises(ValueError, match=f"{named}.*needs CUDA"):
        facade([make_space_env("box_f32") for _ in range(2)], **option)
    assert len(multiprocessing.active_children()) == before


def test_a_device_that_is_neither_cpu_nor_cuda_is_refused() -> None:
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        ShmVectorEnv([make_space_env("box_f32")], device="meta")


def test_torch_is_imported_only_when_asked_for() -> None:
    code = (
        "import sys, gymnasium as gym, numpy as np\n"
        "from vecshm import ShmVecEnv, ShmVectorEnv\n"
        "e = ShmVectorEnv([lambda: gym.make('CartPole-v1')] * 2); e.reset(seed=0); e.step(np.zeros(2, int))\n"
        "e.close()\n"
        "v = ShmVecEnv([lambda: gym.make('CartPole-v1')] * 2); v.reset(); v.close()\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# -- the guard, driven by a slow fake stream ------------------------------------------------------


class FakeCopy:
    """A copy to a fake device: it reads its host source only when its event is waited for, and
    by address, as a DMA does: it keeps nothing alive (the guard must)."""

    def __init__(self, source: np.ndarray) -> None:
        self.address, self.nbytes = source.ctypes.data, source.nbytes
        self.dtype, self.shape = source.dtype, source.shape
        self.data = None

    def run(self) -> None:
        raw = (ctypes.c_uint8 * self.nbytes).from_address(self.address)
        self.data = np.frombuffer(raw, np.uint8).copy().view(self.dtype).reshape(self.shape)

    def numpy(self) -> np.ndarray:
        assert self.data is not None, "read before the copy's event passed"
        return self.data


class FakePiece:
    def __init__(self, whole: FakeCopy, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        self.whole, self.offset, self.dtype, self.shape = whole, offset, dtype, shape

    def numpy(self) -> np.ndarray:
        nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        return self.whole.numpy()[self.offset : self.offset + nbytes].view(self.dtype).reshape(self.shape)


class FakeEvent:
    def __init__(self, copies: list[FakeCopy], stream: SlowStream) -> None:
        self.copies, self.stream, self.done = copies, stream, False

    def query(self) -> bool:  # slow: never done before someone waits for it
        return self.done

    def synchronize(self) -> None:
        if not self.done:
            for c in self.copies:
                c.run()
            self.done = True
            self.stream.waited += 1


class SlowStream:
    """A stream whose copies run only when their event is waited for (the slowest a GPU can be)."""

    def __init__(self) -> None:
        self.unrecorded: list[FakeCopy] = []
        self.events: list[FakeEvent] = []
        self.buffers: list[np.ndarray] = []  # all kept: a copy reads them by address
        self.waited = 0

    def host_buffer(self, nbytes: int) -> np.ndarray:
        self.buffers.append(np.empty(nbytes, np.uint8))
        return self.buffers[-1]

    def copy(self, sources: list[np.ndarray]) -> list[FakeCopy]:
        copies = [FakeCopy(source) for source in sources]
        self.unrecorded.extend(copies)
        return copies

    def split(self, whole: FakeCopy, layout: list) -> list[FakePiece]:
        return [FakePiece(whole, *piece) for piece in layout]

    def record(self) -> FakeEvent:
        event = FakeEvent(self.unrecorded, self)
        self.unrecorded = []
        self.events.append(event)
        return event

    def hand_over(self, event: FakeEvent, tensors: list) -> None:
        pass  # the caller's stream would wait on the event: here, finish() below

    def finish(self) -> None:
        for event in self.events:
            event.synchronize()


def _on_slow_stream(envs: Any, keep_in_flight: int = 1) -> SlowStream:
    stream = SlowStream()
    envs.run.outputs = DeviceOutputs(stream, keep_in_flight)  # (whose whole batches come lent: ``lends``)
    return stream


@pytest.mark.parametrize("key", ["frame_u8", "box_f32", "dict_img", "dyn_mixed"])
def test_slots_and_staging_are_not_rewritten_while_a_slow_stream_still_copies_them(key: str) -> None:
    """Large frames come lent from slots (held until the copy), small ones through staging buffers
    (held likewise): with copies that read memory only when waited for, every delivered batch
    still equals SyncVectorEnv's. Without the guard's hold, the copies read later steps' data."""
    fns = [make_space_env(key, filled=key == "frame_u8") for _ in range(3)]
    reference = SyncVectorEnv(fns)
    envs = ShmVectorEnv(fns, shared_memory=shared_memory_for(key))
    stream = _on_slow_stream(envs)
    delivered, expected = [], []
    try:
        obs, _ = envs.reset(seed=2)
        delivered.append((obs,))
        expected.append((reference.reset(seed=2)[0],))
        for step in range(20):
            actions = actions_for(envs.single_action_space, 3, step)
            out = envs.step(actions)
            delivered.append(out[:4])
            expected.append(reference.step(actions)[:4])
            assert envs.run.outputs.guard.in_flight <= 2
        stream.finish()
        for k, (got, want) in enumerate(zip(delivered, expected)):
            for g, w in zip(got, want):
                assert_tree_equal(numpy_tree(g), w, f"{key} batch {k}")
        assert stream.waited >= 19  # the guard waited for all but the latest copy as it went
        if key != "frame_u8":  # staging buffers are reused, not allocated per batch
            assert len(stream.buffers) <= 3
    finally:
        envs.close()
        reference.close()


@pytest.mark.parametrize("late", [1, 3])
def test_ring_units_are_held_until_their_copy_passed_in_async_batches(late: int) -> None:
    """``late``: batches a copy may still be in flight; beyond the ring's lendable units (2 batches
    here), later batches are copied out into staging, and every one is still right."""
    fns = [make_space_env("frame_u8", filled=True, max_steps=7) for _ in range(4)]
    kw = dict(batch_size=2, envs_per_worker=1, context="fork")
    envs = ShmVectorEnv(fns, **kw)
    stream = _on_slow_stream(envs, late)
    plain = ShmVectorEnv(fns, **kw)
    try:
        envs.async_reset(seed=4)
        plain.async_reset(seed=4)
        got: dict[int, list] = {}
        want: dict[int, list] = {}
        for _ in range(16):
            obs, rew, _t, _tr, _i, ids = envs.recv()
            for k, i in enumerate(ids.tolist()):
                got.setdefault(i, []).append((obs, k, rew, k))
            envs.send(np.ones(len(ids), dtype=np.int64))
            p_obs, p_rew, _pt, _ptr, _pi, p_ids = plain.recv()
            for k, i in enumerate(p_ids.tolist()):
                want.setdefault(i, []).append((p_obs[k].copy(), p_rew[k]))
            plain.send(np.ones(len(p_ids), dtype=np.int64))
        stream.finish()
        for i in got:
            for (obs, k, rew, _), (w_obs, w_rew) in zip(got[i], want[i]):
                np.testing.assert_array_equal(obs.numpy()[k], w_obs)
                assert rew.numpy()[k] == w_rew
    finally:
        envs.close()
        plain.close()


def test_closing_waits_for_every_copy_in_flight() -> None:
    guard = CopyGuard()
    stream = SlowStream()
    source = np.arange(3)
    copies = stream.copy([source, source])
    guard.hold(stream.record(), [], None)
    guard.close()
    assert all(c.data is not None for c in copies) and guard.in_flight == 0
