"""CudaStorage's host logic on the numpy stand-in for cupy (no GPU needed).

The same sequences of adds and gathers run against the core's host
:class:`DataStorage` and against :class:`CudaStorage`; every gathered batch,
every field, ``size`` and ``cursor`` must be equal. The fake's host->device
copies read their (pinned) source only at the next synchronisation point, so a
staging slot refilled before its copy finished stores the wrong rows here as
it would on a GPU (``test_the_fake_catches_a_staging_slot_reused_too_early``
shows the check has teeth). This proves the plumbing (what is copied where, in
which order, how many bytes), not cupy's kernels: those run in
``test_cuda_gpu.py`` on a GPU.
"""

import importlib.util
import pathlib
import sys

import numpy as np
import pytest

from pearl_core.errors import InvalidDTypeError, InvalidIndexError, InvalidOptionError, InvalidValueError, SpecError
from pearl_core.replay.storage import TRANSITION_FIELDS, DataStorage, StorageSpec

_spec = importlib.util.spec_from_file_location("pearl_cuda_fake_cupy_storage",
                                               pathlib.Path(__file__).with_name("fake_cupy.py"))
fake_cupy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_cupy)


@pytest.fixture(autouse=True)
def _cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    fake_cupy._PENDING.clear()
    yield
    fake_cupy._PENDING.clear()


SPECS = {
    "vector-discrete": StorageSpec((4,), np.float32, (), np.int64),
    "image-u8-box-action": StorageSpec((3, 5, 5), np.uint8, (2,), np.float32),
}


def _rows(rng, spec, n):
    obs = rng.integers(0, 255, (n, *spec.obs_shape)).astype(spec.obs_dtype)
    nxt = rng.integers(0, 255, (n, *spec.obs_shape)).astype(spec.obs_dtype)
    if spec.action_dtype.kind == "f":
        act = rng.normal(size=(n, *spec.action_shape)).astype(np.float64)  # cast float64 -> float32 by add
    else:
        act = rng.integers(0, 6, (n, *spec.action_shape))
    return obs, act, rng.normal(size=n), nxt, rng.integers(0, 2, n)  # done as 0/1 ints: cast to bool by add


def _make(spec, capacity, **kw):
    from pearl_cuda.storage import CudaStorage

    return CudaStorage(spec, capacity, device="cuda:0", **kw)


def _assert_same(host, dev):
    assert (dev.size, dev.cursor, len(dev)) == (host.size, host.cursor, len(host))
    for name in TRANSITION_FIELDS:
        np.testing.assert_array_equal(dev.field(name), host.field(name), err_msg=name)


def _assert_batches_equal(a, b):
    for name in TRANSITION_FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert type(x) is np.ndarray and type(y) is np.ndarray, name  # host arrays, not device arrays
        assert x.dtype == y.dtype and x.shape == y.shape, name
        np.testing.assert_array_equal(x, y, err_msg=name)


@pytest.mark.parametrize("spec_name", sorted(SPECS))
@pytest.mark.parametrize("staging_rows,staging_slots", [(None, 4), (3, 2), (1, 1)])
def test_same_contents_and_batches_as_the_host_storage(spec_name, staging_rows, staging_slots):
    spec, capacity = SPECS[spec_name], 23
    rng = np.random.default_rng(0)
    host, dev = DataStorage(spec, capacity), _make(spec, capacity, staging_rows=staging_rows,
                                                   staging_slots=staging_slots)
    # batches smaller than, equal to, wrapping past, and larger than the capacity; zero rows too
    for n in (5, 0, 7, 11, 1, 23, 40, 9, 3):
        rows = _rows(rng, spec, n)
        np.testing.assert_array_equal(dev.add(*rows), host.add(*rows))
        _assert_same(host, dev)
        if host.size:
            idx = rng.integers(0, host.size, 17)  # repeats allowed
            _assert_batches_equal(dev.gather(idx), host.gather(idx))
            _assert_batches_equal(dev.gather_into(idx), host.gather_into(idx))  # the replay managers' path
            _assert_batches_equal(dev.gather(idx[:0]), host.gather(idx[:0]))


def test_take_into_out_arrays_fills_the_callers_arrays():
    spec = SPECS["image-u8-box-action"]
    rng = np.random.default_rng(1)
    host, dev = DataStorage(spec, 50), _make(spec, 50)
    rows = _rows(rng, spec, 30)
    host.add(*rows)
    dev.add(*rows)
    idx = rng.integers(0, 30, 8)
    layout = spec.fields()
    outs = [{n: np.zeros((8, *s), d) for n, (s, d) in layout.items()} for _ in range(2)]
    got, want = dev.gather_into(idx, outs[0]), host.gather_into(idx, outs[1])
    for name in TRANSITION_FIELDS:
        assert getattr(got, name) is outs[0][name]  # written in place, as the host storage does
    _assert_batches_equal(got, want)
    # a caller's non-contiguous out array (a strided view) is filled too
    odd = {n: np.zeros((16, *s), d)[::2] for n, (s, d) in layout.items()}
    _assert_batches_equal(dev.gather_into(idx, odd), want)


def test_bad_input_changes_nothing_on_the_device():
    spec = SPECS["vector-discrete"]
    rng = np.random.default_rng(2)
    dev = _make(spec, 10)
    dev.add(*_rows(rng, spec, 6))
    before = {n: np.array(dev.field(n)) for n in TRANSITION_FIELDS}
    h2d, copies = dev.bytes_h2d, fake_cupy.STATS["h2d_copies"]
    obs, act, rew, nxt, done = _rows(rng, spec, 4)
    bad = [
        (InvalidValueError, (obs, act, np.array([0.0, np.nan, 1.0, 2.0]), nxt, done)),  # NaN reward
        (InvalidValueError, (obs[:, :3], act, rew, nxt, done)),                           # wrong shape
        (InvalidValueError, (obs, act, rew, nxt, np.array([0, 2, 1, 0]))),               # done not a flag
        (InvalidDTypeError, (obs, act.astype(np.float64) + 0.5, rew, nxt, done)),         # float -> int64
        (InvalidValueError, (obs, act[:3], rew, nxt, done)),                              # lengths differ
    ]
    for err, args in bad:
        with pytest.raises(err):
            dev.add(*args)
    assert (dev.size, dev.cursor) == (6, 6)
    assert (dev.bytes_h2d, fake_cupy.STATS["h2d_copies"]) == (h2d, copies)  # nothing reached the device
    for n in TRANSITION_FIELDS:
        np.testing.assert_array_equal(dev.field(n), before[n])
    with pytest.raises(InvalidIndexError):
        dev.gather([6])  # unfilled slot
    with pytest.raises(InvalidValueError, match="no field"):
        dev.field("priority")


def test_the_fake_catches_a_staging_slot_reused_too_early(monkeypatch):
    """With the slot ring's wait removed, the second chunk overwrites the pinned slot before its copy ran."""
    spec = SPECS["vector-discrete"]
    rng = np.random.default_rng(3)
    rows = _rows(rng, spec, 8)
    host = DataStorage(spec, 8)
    host.add(*rows)
    good = _make(spec, 8, staging_rows=4, staging_slots=1)
    good.add(*rows)
    _assert_same(host, good)
    broken = _make(spec, 8, staging_rows=4, staging_slots=1)
    broken._ring._wait = lambda event: None  # sabotage: reuse the slot without waiting for its copy
    broken.add(*rows)
    assert not np.array_equal(broken.field("obs"), host.field("obs"))


def test_byte_counters_and_device():
    spec = SPECS["vector-discrete"]  # row: obs 16 + action 8 + reward 4 + next_obs 16 + done 1 + steps 4 = 49 bytes
    dev = _make(spec, 100)
    assert dev.device == "cuda:0" and (dev.bytes_h2d, dev.bytes_d2h) == (0, 0)
    rng = np.random.default_rng(4)
    dev.add(*_rows(rng, spec, 10))
    assert dev.bytes_h2d == 10 * 49
    dev.gather(np.arange(4))
    assert dev.bytes_h2d == 10 * 49 + 4 * 8  # the indices went to the device
    assert dev.bytes_d2h == 4 * 49  # the batch came back
    dev.field("reward")
    assert dev.bytes_d2h == 4 * 49 + 100 * 4
    f = dev.field("obs")
    assert not f.flags.writeable and type(f) is np.ndarray
    assert "cuda:0" in repr(dev)


def test_staging_is_pinned_and_sized_from_the_row_bytes():
    from pearl_cuda.storage import DEFAULT_STAGING_BYTES

    spec = SPECS["image-u8-box-action"]  # row: 75 + 8 + 4 + 75 + 1 + 4 = 167 bytes
    before = fake_cupy.STATS["pinned_bytes"]
    dev = _make(spec, 10**5, staging_slots=2)
    assert dev.staging_rows == DEFAULT_STAGING_BYTES // 167
    assert fake_cupy.STATS["pinned_bytes"] - before == 2 * dev.staging_rows * 167
    assert _make(spec, 10).staging_rows == 10  # never more rows than the capacity


def test_consecutive_runs():
    from pearl_cuda.storage import consecutive_runs

    assert consecutive_runs(np.array([], np.int64)) == []
    assert consecutive_runs(np.array([5, 6, 7])) == [(5, 0, 3)]
    assert consecutive_runs(np.array([8, 9, 0, 1, 2])) == [(8, 0, 2), (0, 2, 3)]  # a ring write wraps once
    assert consecutive_runs(np.array([4, 2, 3, 9])) == [(4, 0, 1), (2, 1, 2), (9, 3, 1)]


def test_arbitrary_slots_through_store():
    """``store`` takes any slots (the storage contract's write); non-consecutive ones go as one copy per run."""
    spec = SPECS["vector-discrete"]
    rng = np.random.default_rng(6)
    host, dev = DataStorage(spec, 12), _make(spec, 12, staging_rows=4)
    slots = np.array([7, 1, 2, 3, 11, 0])
    rows = dict(zip(TRANSITION_FIELDS, (np.asarray(r).astype(d) for r, (_, d) in
                                        zip(_rows(rng, spec, 6), spec.fields().values()))))
    host.store(slots, rows)
    dev.store(slots, rows)
    for name in TRANSITION_FIELDS:
        np.testing.assert_array_equal(dev.field(name), host.field(name))


@pytest.mark.parametrize("device,err,match", [
    ("cpu", InvalidValueError, "not a GPU"), ("cuda:-1", InvalidValueError, "not a CUDA device string"),
    ("cuda:x", InvalidValueError, "ordinal after the colon"), ("gpu:0", InvalidValueError, "not a GPU"),
    ("cuda:0:1", InvalidValueError, "not a CUDA device string"), (1.0, InvalidDTypeError, "float"),
    (True, InvalidDTypeError, "bool"), (-2, InvalidValueError, "negative"),
])
def test_malformed_devices_are_refused(device, err, match):
    from pearl_cuda.storage import CudaStorage

    with pytest.raises(err, match=match):
        CudaStorage(SPECS["vector-discrete"], 4, device=device)


def test_storage_options_are_checked():
    from pearl_cuda.storage import CudaStorage

    with pytest.raises(InvalidValueError, match="staging_slots"):
        CudaStorage(SPECS["vector-discrete"], 4, staging_slots=0)
    with pytest.raises(InvalidDTypeError, match="staging_rows"):
        CudaStorage(SPECS["vector-discrete"], 4, staging_rows=2.5)
    with pytest.raises(SpecError):
        CudaStorage("not a spec", 4)
    with pytest.raises(InvalidValueError):
        CudaStorage(SPECS["vector-discrete"], 0)


# ---------------------------------------------------------------- through the backend and a replay manager
def _available_backend(monkeypatch, gpus=1):
    from pearl_core.backend import Availability
    from pearl_cuda import backend

    monkeypatch.setattr(backend.CudaBackend, "availability", lambda self: Availability.yes())
    monkeypatch.setattr(fake_cupy.cuda.runtime, "getDeviceCount", lambda: gpus)
    return backend.CudaBackend()


def test_backend_make_storage(monkeypatch):
    from pearl_core.errors import PlacementError
    from pearl_cuda.storage import CudaStorage

    b = _available_backend(monkeypatch, gpus=2)
    st = b.make_storage(SPECS["vector-discrete"], 64, "cuda:1", staging_rows=8)
    assert isinstance(st, CudaStorage) and isinstance(st, DataStorage)
    assert st.device == "cuda:1" and st.capacity == 64 and st.staging_rows == 8
    with pytest.raises(PlacementError, match="sees 2 GPUs"):
        b.make_storage(SPECS["vector-discrete"], 64, "cuda:2")
    with pytest.raises(InvalidValueError, match="not a GPU"):
        b.make_storage(SPECS["vector-discrete"], 64, "cpu")
    with pytest.raises(InvalidOptionError, match="pinned"):
        b.make_storage(SPECS["vector-discrete"], 64, "cuda:0", pinned=True)


def test_prioritized_replay_over_gpu_storage_and_gpu_tree_matches_the_host(monkeypatch):
    """The core's setting-2 composition, PrioritizedReplay(storage, tree), with both on the (fake) GPU."""
    from pearl_core.replay import PrioritizedReplay
    from pearl_core.testing import ReferenceSumTree
    from pearl_cuda import kernels

    kernels.load.cache_clear()
    try:
        b = _available_backend(monkeypatch)
        spec = SPECS["vector-discrete"]
        gpu = PrioritizedReplay(b.make_storage(spec, 256, "cuda:0"), b.make_sum_tree(256, 16, device="cuda:0",
                                                                                      threads=4), rng=7)
        ref = PrioritizedReplay(DataStorage(spec, 256), ReferenceSumTree(256, 16), rng=7)
        rng = np.random.default_rng(8)
        for _ in range(6):
            rows = _rows(rng, spec, 50)
            gpu.add(*rows)
            ref.add(*rows)
            a, r = gpu.sample(32), ref.sample(32)
            np.testing.assert_array_equal(a.indices, r.indices)
            np.testing.assert_allclose(a.weights, r.weights, rtol=1e-6)
            _assert_batches_equal(a.batch, r.batch)
            td = rng.normal(size=32)
            gpu.update_priorities(a.indices, td)
            ref.update_priorities(r.indices, td)
        st = gpu.storage
        # sampled into host arrays (no device slot, see test_cuda_device_batches.py for the slot): every
        # batch came back to the host, the round trip the README states for that path
        assert st.bytes_d2h == 6 * 32 * 49 and st.bytes_h2d == 300 * 49 + 6 * 32 * 8
    finally:
        kernels.load.cache_clear()
