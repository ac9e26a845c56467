"""The replay's device face on torch CPU tensors (pearl_core.replay.device).

The same arithmetic as the host (numpy) replay, run as tensor operations: on a fixed seed and the same
uniform draws, the device-face replay samples the same indices, the same batches, weights within one
float32 rounding and priorities within one float64 rounding (numpy's and torch's ``pow`` may differ in
the last bit). The torch tree and storage pass the kit's conformance suites (which check the device
face where an implementation offers one), and a planted bug in each face is caught.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pearl_core.errors import InvalidValueError, SpecError
from pearl_core.replay import DataStorage, PrioritizedReplay, StorageSpec, UniformReplay
from pearl_core.replay.device import DeviceStorage, DeviceSumTree, TorchStorage, TorchSumTree, device_face
from pearl_core.replay.storage import TRANSITION_FIELDS, Batch
from pearl_core.testing import ReferenceSumTree, StorageConformance, SumTreeConformance

SPEC = StorageSpec((4,), np.float32, (), np.int64)


class TestTorchSumTreeConformance(SumTreeConformance):
    def make_tree(self, capacity, fanout):
        return TorchSumTree(capacity, fanout)


class TestTorchStorageConformance(StorageConformance):
    device = "cpu"

    def make_storage(self, spec, capacity):
        return TorchStorage(spec, capacity)


def _rows(rng: np.random.Generator, k: int) -> tuple[np.ndarray, ...]:
    return (rng.normal(size=(k, 4)).astype(np.float32), rng.integers(0, 3, k), rng.normal(size=k).astype(np.float32),
            rng.normal(size=(k, 4)).astype(np.float32), rng.random(k) < 0.1)


def _pair(capacity: int, fanout: int, **kwargs) -> tuple[PrioritizedReplay, PrioritizedReplay]:
    host = PrioritizedReplay(DataStorage(SPEC, capacity), ReferenceSumTree(capacity, fanout), rng=3, **kwargs)
    dev = PrioritizedReplay(TorchStorage(SPEC, capacity), TorchSumTree(capacity, fanout), rng=3, **kwargs)
    # the host face draws its uniforms with numpy; give the device face the very same draws
    draws = np.random.default_rng(3)
    dev._device_uniforms = lambda n: torch.from_numpy(draws.random(n))
    return host, dev


@pytest.mark.parametrize("fanout", [2, 16, 128])
@pytest.mark.parametrize("stratified", [True, False])
def test_device_face_samples_as_the_host_face_does(fanout, stratified):
    host, dev = _pair(1000, fanout, beta_steps=40, stratified=stratified)
    assert dev.device == torch.device("cpu") and host.device is None
    data = np.random.default_rng(0)
    for it in range(60):  # fills, wraps the ring (60 x 37 > 1000), anneals beta past beta_steps
        rows = _rows(data, 37)
        np.testing.assert_array_equal(host.add(*rows), dev.add(*rows))
        want, got = host.sample(64), dev.sample_device(64)
        assert got.indices.dtype == torch.int64 and got.weights.dtype == torch.float32
        np.testing.assert_array_equal(got.indices.numpy(), want.indices, err_msg=f"iteration {it}: indices")
        for name in TRANSITION_FIELDS:
            np.testing.assert_array_equal(getattr(got.batch, name).numpy(), getattr(want.batch, name))
        np.testing.assert_allclose(got.weights.numpy(), want.weights, rtol=2**-23, atol=0,
                                   err_msg=f"iteration {it}: weights beyond one float32 rounding")
        td = data.normal(size=64).astype(np.float32) * 3
        host.update_priorities(want.indices, td)
        dev.update_priorities_device(got.indices, torch.from_numpy(td))
        assert dev.steps == host.steps
    dev.check_device_errors()
    slots = np.arange(1000)
    np.testing.assert_allclose(dev.priorities(slots), host.priorities(slots), rtol=2**-52, atol=0)
    assert dev.max_priority == pytest.approx(host.max_priority, rel=2**-52)
    assert dev.tree.total() == pytest.approx(host.tree.total(), rel=1e-12)


def test_device_face_into_out_tensors_and_host_face_calls_keep_one_max_priority():
    host, dev = _pair(64, 4)
    data = np.random.default_rng(1)
    rows = _rows(data, 40)
    host.add(*rows)
    dev.add(*rows)
    out = {name: torch.empty((8, *shape), dtype=getattr(dev.storage, "_arrays")[name].dtype)
           for name, (shape, _) in SPEC.fields().items()}
    out["weights"] = torch.empty(8, dtype=torch.float32)
    got, want = dev.sample_device(8, out), host.sample(8)
    assert got.weights.data_ptr() == out["weights"].data_ptr()
    assert all(getattr(got.batch, n).data_ptr() == out[n].data_ptr() for n in TRANSITION_FIELDS)
    np.testing.assert_array_equal(got.indices.numpy(), want.indices)
    # a host-face update after the device face is in use raises the device's running max as well
    host.update_priorities(want.indices, np.full(8, 50.0))
    dev.update_priorities(got.indices.numpy(), np.full(8, 50.0))
    assert dev.max_priority == host.max_priority == pytest.approx((50.0 + 1e-6) ** 0.6, rel=1e-12)
    more = _rows(data, 5)
    np.testing.assert_array_equal(dev.priorities(dev.add(*more)), host.priorities(host.add(*more)))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e308])
def test_a_bad_td_error_changes_no_priority_and_is_reported_at_the_check(bad):
    _, dev = _pair(64, 4, alpha=1.0)
    dev.add(*_rows(np.random.default_rng(2), 64))
    before = dev.priorities(np.arange(64))
    top = dev.max_priority
    got = dev.sample_device(16)
    td = torch.ones(16, dtype=torch.float64)  # 1e308 is finite in float64 but its priority is over the limit
    td[5] = bad
    dev.update_priorities_device(got.indices, td)
    np.testing.assert_array_equal(dev.priorities(np.arange(64)), before)
    assert dev.max_priority == top
    with pytest.raises(InvalidValueError, match="NaN/inf or a priority too large"):
        dev.check_device_errors()
    dev.check_device_errors()  # the flag was cleared: nothing more to report
    dev.update_priorities_device(got.indices, torch.ones(16))
    dev.check_device_errors()


def test_uniform_replay_device_face():
    storage = TorchStorage(SPEC, 50)
    replay = UniformReplay(storage, rng=7)
    rows = _rows(np.random.default_rng(3), 30)
    replay.add(*rows)
    got = replay.sample_device(200)
    idx = got.indices.numpy()
    assert idx.min() >= 0 and idx.max() < 30 and len(set(idx)) > 20
    assert torch.equal(got.weights, torch.ones(200))
    want = storage.gather(idx)
    for name in TRANSITION_FIELDS:
        np.testing.assert_array_equal(getattr(got.batch, name).numpy(), getattr(want, name))
    again = UniformReplay(TorchStorage(SPEC, 50), rng=7)
    again.add(*rows)
    assert torch.equal(again.sample_device(200).indices, got.indices), "a seeded replay draws the same slots"
    replay.update_priorities_device(got.indices, torch.full((200,), float("nan")))
    with pytest.raises(InvalidValueError):
        replay.check_device_errors()


def test_device_face_needs_both_faces_on_one_device():
    assert device_face(DataStorage(SPEC, 8)) is None
    assert device_face(TorchStorage(SPEC, 8), ReferenceSumTree(8, 2)) is None
    assert device_face(TorchStorage(SPEC, 8), TorchSumTree(8, 2)) == torch.device("cpu")
    assert device_face(TorchStorage(SPEC, 8), TorchSumTree(8, 2, device="meta")) is None
    assert isinstance(TorchStorage(SPEC, 8), DeviceStorage) and isinstance(TorchSumTree(8, 2), DeviceSumTree)
    host = PrioritizedReplay(DataStorage(SPEC, 8), ReferenceSumTree(8, 2))
    host.add(*_rows(np.random.default_rng(0), 4))
    with pytest.raises(SpecError, match="device face"):
        host.sample_device(2)


def test_torch_tree_skips_and_flags_a_bad_device_priority():
    tree = TorchSumTree(10, 3)
    tree.update_device(torch.tensor([1, 2, 2]), torch.tensor([1.0, 5.0, 2.0]))
    assert not tree.bad_priorities
    tree.update_device(torch.tensor([1, 3]), torch.tensor([float("nan"), -1.0]))
    assert tree.bad_priorities
    np.testing.assert_array_equal(tree.get([1, 2, 3]), [1.0, 2.0, 0.0])
    assert tree.total() == 3.0


# --------------------------------------------------------------------------- planted bugs
class _OffByOneSample(TorchSumTree):
    def sample_device(self, masses):
        return (super().sample_device(masses) + 1).clamp_(max=self.capacity - 1)


class _FirstDuplicateWins(TorchSumTree):
    def update_device(self, indices, priorities):
        super().update_device(indices.flip(0), priorities.flip(0))


class _GatherSkipsDone(TorchStorage):
    def gather_device(self, indices, out=None):
        got = super().gather_device(indices, out)
        return Batch(got.obs, got.action, got.reward, got.next_obs, torch.zeros_like(got.done), got.steps)


@pytest.mark.parametrize("bug", [_OffByOneSample, _FirstDuplicateWins])
def test_the_kit_catches_a_planted_device_face_bug_in_a_tree(bug):
    class Suite(SumTreeConformance):
        def make_tree(self, capacity, fanout):
            return bug(capacity, fanout)

    with pytest.raises(AssertionError):
        Suite().test_device_face_matches_the_reference()


def test_the_kit_catches_a_planted_device_face_bug_in_a_storage():
    class Suite(StorageConformance):
        device = "cpu"

        def make_storage(self, spec, capacity):
            return _GatherSkipsDone(spec, capacity)

    with pytest.raises(AssertionError):
        Suite().test_device_face_gathers_like_the_host("vector-f32-discrete")
