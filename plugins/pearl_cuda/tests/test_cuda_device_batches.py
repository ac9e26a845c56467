"""CudaStorage's device batches (``gather_into`` into ``device_out``'s torch tensors) on the numpy stand-in for cupy.

No GPU here, so two seams are replaced: ``CudaStorage._torch_device`` names the
CPU (the destinations are CPU tensors) and ``CudaStorage._torch_stream`` is a
fake stream. Everything else is the code a GPU runs: the destinations'
dtypes and shapes, their checks, the cupy views of the tensors by DLPack (the
fake's ``from_dlpack`` shares a CPU tensor's memory, as DLPack shares a CUDA
tensor's; it refuses ``bool`` tensors, which the storage views as ``uint8``),
the gathers into them, the event waits that order them against torch's stream,
and the byte and batch counters. What this cannot show: that cupy's DLPack
import of CUDA tensors, ``ExternalStream`` and the gathers behave on a GPU
(``test_cuda_gpu.py::test_setting2_batches_stay_on_the_gpu_and_train_like_the_host_path``).
"""

import copy
import importlib.util
import pathlib
import sys

import gymnasium.spaces as spaces
import numpy as np
import pytest
import torch

from pearl_core.errors import InvalidDTypeError, InvalidValueError
from pearl_core.replay.storage import TRANSITION_FIELDS, DataStorage, StorageSpec

_spec = importlib.util.spec_from_file_location("pearl_cuda_fake_cupy_device_batches",
                                               pathlib.Path(__file__).with_name("fake_cupy.py"))
fake_cupy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_cupy)

TORCH_STREAM = fake_cupy.Stream()  # stands for torch's current stream on the GPU

SPECS = {
    "vector-discrete": StorageSpec((4,), np.float32, (), np.int64),  # row: 16 + 8 + 4 + 16 + 1 + 4 = 49 bytes
    "image-u8-box-action": StorageSpec((3, 5, 5), np.uint8, (2,), np.float32),
    "bool-obs": StorageSpec((3,), np.bool_, (), np.int32),
}


@pytest.fixture(autouse=True)
def _cupy(monkeypatch):
    from pearl_cuda.storage import CudaStorage

    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setattr(CudaStorage, "_torch_device", lambda self: torch.device("cpu"))
    monkeypatch.setattr(CudaStorage, "_torch_stream", lambda self: TORCH_STREAM)
    fake_cupy._PENDING.clear()
    fake_cupy.LOG.clear()
    yield
    fake_cupy._PENDING.clear()


def _make(spec, capacity, **kw):
    from pearl_cuda.storage import CudaStorage

    return CudaStorage(spec, capacity, device="cuda:0", **kw)


def _rows(rng, spec, n):
    def values(shape, dtype):
        if np.dtype(dtype).kind == "b":
            return rng.random((n, *shape)) < 0.5
        if np.dtype(dtype).kind == "f":
            return rng.normal(size=(n, *shape)).astype(dtype)
        return rng.integers(0, 6, (n, *shape)).astype(dtype)

    return (values(spec.obs_shape, spec.obs_dtype), values(spec.action_shape, spec.action_dtype), rng.normal(size=n),
            values(spec.obs_shape, spec.obs_dtype), rng.random(n) < 0.3)


def _filled(spec, capacity=40, n=30, seed=0):
    rng = np.random.default_rng(seed)
    host, dev = DataStorage(spec, capacity), _make(spec, capacity)
    rows = _rows(rng, spec, n)
    host.add(*rows)
    dev.add(*rows)
    return host, dev, rng


@pytest.mark.parametrize("spec_name", sorted(SPECS))
def test_device_out_gives_tensors_of_the_stored_layout(spec_name):
    spec = SPECS[spec_name]
    dev = _make(spec, 16)
    out = dev.device_out(8, torch.device("cpu"))  # the (substituted) device of this storage's GPU
    assert list(out) == list(TRANSITION_FIELDS)
    for name, (shape, dtype) in spec.fields().items():
        t = out[name]
        assert isinstance(t, torch.Tensor) and t.shape == (8, *shape) and t.is_contiguous(), name
        assert t.dtype == torch.from_numpy(np.empty(0, dtype)).dtype, name
    assert out["done"].dtype == torch.bool
    assert dev.device_out(8, "cpu") is not None  # a device string is a torch device too
    assert dev.device_out(8, torch.device("cuda", 1)) is None  # another GPU: host batches
    assert dev.device_out(8, "meta") is None
    with pytest.raises(InvalidValueError, match="not a torch device"):
        dev.device_out(8, "gpu:zero")
    with pytest.raises(InvalidValueError, match="batch_size"):
        dev.device_out(0, "cpu")


@pytest.mark.parametrize("spec_name", sorted(SPECS))
def test_gathers_into_the_tensors_with_no_device_to_host_copy(spec_name):
    spec = SPECS[spec_name]
    host, dev, rng = _filled(spec)
    out = dev.device_out(12, "cpu")
    h2d, d2h = dev.bytes_h2d, dev.bytes_d2h
    for k in range(1, 4):
        idx = rng.integers(0, host.size, 12)
        fake_cupy.LOG.clear()
        got = dev.gather_into(idx, out)
        want = host.gather(idx)
        for name in TRANSITION_FIELDS:
            assert getattr(got, name) is out[name], name  # the batch IS the destinations
            np.testing.assert_array_equal(out[name].numpy(), getattr(want, name), err_msg=name)
        assert dev.batches_on_device == k
        assert dev.bytes_d2h == d2h  # no row came back
        assert dev.bytes_h2d == h2d + k * 12 * 8  # only the indices went over
        # order on the device: the storage stream waits for torch's stream (its reads of the last batch),
        # gathers all fields on its own stream, then torch's stream waits for those gathers
        stream = dev._stream
        assert fake_cupy.LOG == ([("wait", stream, TORCH_STREAM)] + [("take", stream)] * len(TRANSITION_FIELDS)
                                 + [("wait", TORCH_STREAM, stream)])


def test_rows_added_just_before_the_sample_are_in_the_batch():
    """The gather is queued behind the storage stream's own (asynchronous) row copies."""
    spec = SPECS["vector-discrete"]
    host, dev = DataStorage(spec, 8), _make(spec, 8, staging_rows=2, staging_slots=2)
    out = dev.device_out(5, "cpu")
    rng = np.random.default_rng(1)
    for _ in range(4):
        rows = _rows(rng, spec, 3)
        host.add(*rows)
        dev.add(*rows)
        idx = np.array([0, dev.cursor - 1, 2, 1, host.size - 1]) % host.size
        dev.gather_into(idx, out)
        np.testing.assert_array_equal(out["obs"].numpy(), host.gather(idx).obs)


def test_the_host_path_is_unchanged_beside_the_device_path():
    spec = SPECS["vector-discrete"]
    host, dev, rng = _filled(spec)
    dev.device_out(4, "cpu")
    idx = rng.integers(0, host.size, 4)
    got = dev.gather_into(idx)
    assert all(type(getattr(got, name)) is np.ndarray for name in TRANSITION_FIELDS)
    np.testing.assert_array_equal(got.obs, host.gather(idx).obs)
    assert dev.bytes_d2h == 4 * 49 and dev.batches_on_device == 0


def test_a_callers_own_tensors_work_and_bad_ones_are_refused_before_any_device_work():
    spec = SPECS["vector-discrete"]
    host, dev, rng = _filled(spec)
    idx = rng.integers(0, host.size, 6)
    own = {name: torch.empty((6, *shape), dtype=torch.from_numpy(np.empty(0, dtype)).dtype)
           for name, (shape, dtype) in spec.fields().items()}
    dev.gather_into(idx, own)  # not from device_out: viewed on the fly
    np.testing.assert_array_equal(own["next_obs"].numpy(), host.gather(idx).next_obs)
    h2d, d2h, on_dev = dev.bytes_h2d, dev.bytes_d2h, dev.batches_on_device

    def with_(name, value):
        return {**dev.device_out(6, "cpu"), name: value}

    bad = [
        (InvalidValueError, "but not for \\['reward'\\]", with_("reward", np.zeros(6, np.float32))),  # mixed
        (InvalidDTypeError, "has dtype torch.float64", with_("obs", torch.zeros((6, 4), dtype=torch.float64))),
        (InvalidDTypeError, "has dtype torch.uint8", with_("done", torch.zeros(6, dtype=torch.uint8))),
        (InvalidValueError, "has shape \\(5, 4\\)", with_("obs", torch.zeros((5, 4)))),
        (InvalidValueError, "not contiguous", with_("next_obs", torch.zeros((4, 6)).t())),
        (InvalidValueError, "tensor on meta", with_("reward", torch.zeros(6, device="meta"))),
    ]
    for err, match, out in bad:
        with pytest.raises(err, match=match):
            dev.gather_into(idx, out)
    assert (dev.bytes_h2d, dev.bytes_d2h, dev.batches_on_device) == (h2d, d2h, on_dev)  # nothing moved


def test_a_bool_field_is_viewed_as_bytes_not_imported_as_bool():
    spec = SPECS["bool-obs"]
    host, dev, rng = _filled(spec)
    out = dev.device_out(10, "cpu")
    idx = rng.integers(0, host.size, 10)
    dev.gather_into(idx, out)
    assert out["obs"].dtype == torch.bool and out["done"].dtype == torch.bool
    np.testing.assert_array_equal(out["obs"].numpy(), host.gather(idx).obs)
    np.testing.assert_array_equal(out["done"].numpy(), host.gather(idx).done)
    with pytest.raises(TypeError, match="bool"):  # the fake refuses what the storage must not rely on
        fake_cupy.from_dlpack(out["done"])


# ---------------------------------------------------------------- setting 2: replay + learner step + DQN
def _available_backend(monkeypatch):
    from pearl_core.backend import Availability
    from pearl_cuda import backend

    monkeypatch.setattr(backend.CudaBackend, "availability", lambda self: Availability.yes())
    monkeypatch.setattr(fake_cupy.cuda.runtime, "getDeviceCount", lambda: 1)
    return backend.CudaBackend()


def test_prioritized_replay_into_the_device_slot_trains_like_the_host_path(monkeypatch):
    """PrioritizedReplay over CudaStorage + CudaSumTree (fake GPU), sampled by the runtime's LearnerStep
    into device destinations, vs the same replay sampled into host arrays (today's path): same indices,
    weights and batches, bit-identical DQN training, and no batch row back to the host.

    The DQN is a CPU one (engine='torch'), so its own ``device_batch_slot`` says None (no behaviour change
    on the CPU); the slot is built here as that method builds it for a GPU DQN: ``device_out`` + host weights.
    """
    from pearl_core.algorithms.dqn import DQN
    from pearl_core.replay import PrioritizedReplay
    from pearl_core.runtime.step import LearnerStep
    from pearl_cuda import kernels

    kernels.load.cache_clear()
    try:
        b = _available_backend(monkeypatch)
        spec, batch = SPECS["vector-discrete"], 32

        def replay():
            return PrioritizedReplay(b.make_storage(spec, 256, "cuda:0"),
                                     b.make_sum_tree(256, 16, device="cuda:0", threads=2), rng=7)

        torch.manual_seed(0)
        dqn = DQN(spaces.Box(-5, 5, (4,), np.float32), spaces.Discrete(3), hidden_sizes=(16, 16), lr=1e-2,
                  target_update_every=3, engine="torch", seed=0)
        on_device = LearnerStep(dqn, replay(), batch)
        on_host = LearnerStep(copy.deepcopy(dqn), replay(), batch)
        assert on_device.device_slot is None  # a CPU DQN keeps host batches ...
        slot = dict(on_device.replay.storage.device_out(batch, dqn.device))
        slot["weights"] = np.empty(batch, np.float32)  # ... so build what DQN.device_batch_slot gives a GPU DQN
        on_device.device_slot = slot
        rng = np.random.default_rng(8)
        updates = 0
        for _ in range(8):
            rows = _rows(rng, spec, 40)
            rows = (rows[0], rng.integers(0, 3, 40), *rows[2:])
            on_device.replay.add(*rows)
            on_host.replay.add(*rows)
            for _ in range(2):
                a, h = on_device.sample(), on_host.sample()
                np.testing.assert_array_equal(a.indices, h.indices)
                np.testing.assert_array_equal(a.weights, h.weights)
                assert a.weights is slot["weights"]
                for name in TRANSITION_FIELDS:
                    assert getattr(a.batch, name) is slot[name]
                    np.testing.assert_array_equal(slot[name].numpy(), getattr(h.batch, name), err_msg=name)
                td_a, td_h = on_device.train(a.batch, a.weights), on_host.train(h.batch, h.weights)
                np.testing.assert_array_equal(td_a, td_h)
                assert on_device.last.metrics == on_host.last.metrics
                on_device.apply(a.indices, td_a)
                on_host.apply(h.indices, td_h)
                updates += 1
        for x, y in zip(on_device.trainer.q_net.parameters(), on_host.trainer.q_net.parameters()):
            assert torch.equal(x, y)
        dev_st, host_st = on_device.replay.storage, on_host.replay.storage
        assert on_device.updates == updates == dev_st.batches_on_device
        assert host_st.batches_on_device == 0
        assert dev_st.bytes_d2h == 0  # no batch row came back
        assert host_st.bytes_d2h == updates * batch * 49  # today's path: every batch came back
        assert dev_st.bytes_h2d == host_st.bytes_h2d == 8 * 40 * 49 + updates * batch * 8  # rows + indices
    finally:
        kernels.load.cache_clear()


# --------------------------------------------------------------------------- the device face (gather_device)
@pytest.mark.parametrize("spec_name", sorted(SPECS))
def test_gather_device_takes_torch_indices_and_keeps_the_batch_in_tensors(spec_name):
    """The device face the core's replay samples through: torch indices in, a Batch of torch tensors on the
    storage's torch device out (its own per batch size, or the caller's), ordered against torch's stream,
    with no byte to or from the host (not even the indices: they are on the device already)."""
    from pearl_core.replay.device import DeviceStorage

    spec = SPECS[spec_name]
    host, dev, rng = _filled(spec)
    assert isinstance(dev, DeviceStorage) and dev.torch_device == torch.device("cpu")
    h2d, d2h = dev.bytes_h2d, dev.bytes_d2h
    kept = None
    for k, out in enumerate((None, None, dev.device_out(9, "cpu"))):
        idx = rng.integers(0, host.size, 9)
        fake_cupy.LOG.clear()
        got = dev.gather_device(torch.from_numpy(idx), out)
        want = host.gather(idx)
        for name in TRANSITION_FIELDS:
            t = getattr(got, name)
            assert isinstance(t, torch.Tensor), name
            np.testing.assert_array_equal(t.numpy(), getattr(want, name), err_msg=name)
            if out is not None:
                assert t is out[name]
        if k == 0:
            kept = got
        elif k == 1:  # no out: the storage's own tensors for this batch size, reused
            assert all(getattr(got, n) is getattr(kept, n) for n in TRANSITION_FIELDS)
        stream = dev._stream
        assert fake_cupy.LOG == ([("wait", stream, TORCH_STREAM)] + [("take", stream)] * len(TRANSITION_FIELDS)
                                 + [("wait", TORCH_STREAM, stream)])
    assert (dev.bytes_h2d, dev.bytes_d2h) == (h2d, d2h)
    assert dev.batches_on_device == 3


def test_the_core_replay_samples_through_the_cuda_storage_device_face():
    """PrioritizedReplay over CudaStorage and the core's TorchSumTree on the same torch device (the CPU here):
    the device face samples what the host replay samples, on the same uniforms."""
    from pearl_core.replay import PrioritizedReplay
    from pearl_core.replay.device import TorchSumTree
    from pearl_core.testing import ReferenceSumTree

    spec = SPECS["vector-discrete"]
    host_s, dev_s, rng = _filled(spec, capacity=40, n=35)
    host = PrioritizedReplay(host_s, ReferenceSumTree(40, 4), rng=1)
    dev = PrioritizedReplay(dev_s, TorchSumTree(40, 4), rng=1)
    assert dev.device == torch.device("cpu")
    draws = np.random.default_rng(1)
    dev._device_uniforms = lambda n: torch.from_numpy(draws.random(n))
    for _ in range(4):
        want, got = host.sample(8), dev.sample_device(8)
        np.testing.assert_array_equal(got.indices.numpy(), want.indices)
        np.testing.assert_array_equal(got.batch.obs.numpy(), want.batch.obs)
        td = rng.normal(size=8)
        host.update_priorities(want.indices, td)
        dev.update_priorities_device(got.indices, torch.from_numpy(td))
    dev.check_device_errors()
    np.testing.assert_allclose(dev.priorities(np.arange(35)), host.priorities(np.arange(35)), rtol=2**-52)
