"""Tests that launch the CUDA kernels. Marked ``gpu``; skipped with the probe's reason when no GPU is here.

They never pass vacuously: on a machine with a GPU, a kernel that fails to
compile or load fails them (only the *absence* of a device skips).
"""

import numpy as np
import pytest

from pearl_core.errors import EmptyTreeError, InvalidIndexError, InvalidValueError
from pearl_core.testing import ReferenceSumTree, SumTreeConformance
from pearl_cuda.detect import probe
from pearl_cuda.emulation import EmulatedSumTree

_NO_GPU = probe()
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(_NO_GPU is not None, reason=f"needs an NVIDIA GPU (not run here): {_NO_GPU}")]


def _tree(capacity, fanout, strategy="auto"):
    import pearl_core

    return pearl_core.get_backend("cuda").make_sum_tree(capacity, fanout, update_strategy=strategy, threads=2)


class _CudaTreeConformance(SumTreeConformance):
    """The conformance suite on the CUDA tree with one update strategy (not collected itself)."""

    strategy = "auto"

    def make_tree(self, capacity, fanout):
        return _tree(capacity, fanout, self.strategy)


class TestCudaTreeAuto(_CudaTreeConformance):
    strategy = "auto"


class TestCudaTreeLevels(_CudaTreeConformance):
    strategy = "levels"


class TestCudaTreeBlock(_CudaTreeConformance):
    strategy = "block"


class TestCudaTreeGrid(_CudaTreeConformance):
    strategy = "grid"


@pytest.mark.parametrize("strategy", ["levels", "block", "grid"])
@pytest.mark.parametrize("capacity,fanout", [(2**20, 16), (30_001, 7), (5, 2)])
def test_bit_identical_to_the_emulation(strategy, capacity, fanout):
    """The device tree equals the numpy emulation slot for slot, after heavy duplicate updates."""
    rng = np.random.default_rng(0)
    gpu, emu = _tree(capacity, fanout, strategy), EmulatedSumTree(capacity, fanout)
    for n in (1, 33, 1024, 4096, 20_000):
        idx = rng.integers(0, min(capacity, max(1, n // 3)), n)  # many duplicates, shared ancestors
        prio = rng.uniform(0, 10, n) * (rng.random(n) > 0.1)
        gpu.update(idx, prio)
        emu.update(idx, prio)
    np.testing.assert_array_equal(gpu.tree.get(), emu.tree)
    x = rng.uniform(0, emu.total(), 4096)
    np.testing.assert_array_equal(gpu.sample(x), emu.sample(x))


def test_device_face_with_cupy_and_torch():
    import cupy as cp
    import torch

    tree, ref = _tree(100_000, 16), ReferenceSumTree(100_000, 16)
    idx = np.arange(0, 100_000, 7)
    prio = np.random.default_rng(1).uniform(0.1, 5, idx.size)
    tree.update_device(cp.asarray(idx), cp.asarray(prio))
    ref.update(idx, prio)
    got = tree.get_device(torch.as_tensor(idx, device="cuda"))
    assert isinstance(got, torch.Tensor) and got.is_cuda and got.dtype == torch.float64
    np.testing.assert_array_equal(got.cpu().numpy(), prio)
    masses = torch.rand(4096, dtype=torch.float64, device="cuda") * ref.total()
    out = tree.sample_device(masses)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.int64
    np.testing.assert_array_equal(np.sort(np.unique(out.cpu().numpy())) % 7, 0)
    tree.check_errors()  # nothing bad happened
    assert abs(float(tree.total_device()[0]) - ref.total()) <= 1e-9 * ref.total()


def test_device_face_flags_bad_input_without_corrupting_memory():
    import cupy as cp

    tree = _tree(1000, 16)
    tree.update_device(cp.asarray([5, 1000, -1]), cp.asarray([1.0, 2.0, 3.0]))
    with pytest.raises(InvalidIndexError):
        tree.check_errors()
    assert tree.get([5])[0] == 1.0 and tree.total() == 1.0
    tree.update_device(cp.asarray([6]), cp.asarray([float("nan")]))
    with pytest.raises(InvalidValueError):
        tree.check_errors()
    assert tree.total() == 1.0
    out = tree.sample_device(cp.asarray([-1.0, 0.5, 2.0]))
    assert out.get().tolist() == [-1, 5, -1]
    with pytest.raises(InvalidValueError):
        tree.check_errors()
    empty = _tree(10, 2)
    empty.sample_device(cp.asarray([0.0]))
    with pytest.raises(EmptyTreeError):
        empty.check_errors()


def test_load_rebuilds_every_level():
    p = np.random.default_rng(3).uniform(0, 3, 70_000)
    tree, emu = _tree(70_000, 16), EmulatedSumTree(70_000, 16)
    tree.load(p)
    emu.update(np.arange(70_000), p)
    np.testing.assert_array_equal(tree.tree.get(), emu.tree)


def test_the_core_replay_runs_its_device_face_on_the_gpu_with_no_host_sync():
    """PrioritizedReplay over CudaStorage + CudaSumTree: the device face samples, gathers, weights and writes
    priorities back on the GPU (torch's sync debug mode raises on any host synchronisation) and agrees with
    the host face's arithmetic on the same uniforms."""
    import torch

    import pearl_core
    from pearl_core.replay import DataStorage, PrioritizedReplay, StorageSpec

    backend = pearl_core.get_backend("cuda")
    spec = StorageSpec((4,), np.float32, (), np.int64)
    dev = PrioritizedReplay(backend.make_storage(spec, 1000, "cuda:0"), _tree(1000, 16), rng=3)
    host = PrioritizedReplay(DataStorage(spec, 1000), ReferenceSumTree(1000, 16), rng=3)
    assert dev.device == torch.device("cuda", 0)
    draws = np.random.default_rng(3)  # the host replay's draws, handed to the device face below
    n = 300
    obs = np.random.default_rng(0).standard_normal((n, 4)).astype(np.float32)
    for r in (dev, host):
        r.add(obs, np.arange(n) % 3, np.ones(n, np.float32), obs + 1, np.zeros(n, bool))
    for _ in range(5):
        want = host.sample(128)
        u = torch.from_numpy(draws.random(128)).cuda()  # drawn before the sync-free window
        dev._device_uniforms = lambda k, u=u: u
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            got = dev.sample_device(128)
            td = torch.rand(128, device="cuda")
            dev.update_priorities_device(got.indices, td)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert got.batch.obs.is_cuda and got.weights.dtype == torch.float32
        np.testing.assert_array_equal(got.indices.cpu().numpy(), want.indices)
        np.testing.assert_array_equal(got.batch.obs.cpu().numpy(), obs[want.indices])
        host.update_priorities(want.indices, td.cpu().numpy())
    dev.check_device_errors()
    dev.tree.check_errors()
    np.testing.assert_allclose(dev.priorities(np.arange(n)), host.priorities(np.arange(n)), rtol=1e-15)


def test_measure_primitive_gives_the_gpu_row():
    import pearl_core
    from pearl_core.composer.deviceprofile import profile_device
    from pearl_core.composer.workload import Workload
    from pearl_core.sdk import MeasureRequest, PrimitiveCost

    from types import SimpleNamespace as NS

    wl = Workload(batch_size=64, obs_bytes=16, action_bytes=8, capacity=2**16, fanout=16, insert_batch=32)
    gpu, backend = NS(name="cuda:0", kind="cuda", index=0, active_power_w=300.0), pearl_core.get_backend("cuda")
    loop = backend.measure_primitive(gpu, wl, MeasureRequest("worker_loop", 1, 20, 5))  # any order: learner first
    assert isinstance(loop, PrimitiveCost) and loop.learner_s > 0 and "co_learner_contention" in loop.details
    row = profile_device("cuda", backend, gpu, wl, iterations=20, warmup=5)
    assert row.device == "cuda:0" and row.can_rm and row.can_learn and row.can_colocate
    assert all(c.source == "profiled" for _, c in row.cells() if c is not None)
    assert row.config["learner_streams"] >= 1


def test_detection_lists_the_gpu():
    import pearl_core

    (dev, *_) = pearl_core.get_backend("cuda").devices()
    assert dev.name == "cuda:0" and dev.details["memory_bytes"] > 0 and "." in dev.details["compute_capability"]


@pytest.mark.filterwarnings("ignore:hardware detection leaves out")
def test_composer_profiles_the_present_gpu(tmp_path):
    """Detection puts the GPU in the spec; the composer's profiler measures it through measure_primitive."""
    from pearl_core.composer import workload_for_env
    from pearl_core.composer.detect import detect_hardware
    from pearl_core.composer.costs import fill_matrix
    from pearl_core.composer.profiling import profiler_for

    spec = detect_hardware()
    gpus = [d for d in spec.devices if d.kind == "cuda"]
    assert gpus, f"detection found no GPU in {[d.name for d in spec.devices]}"
    wl = workload_for_env("CartPole-v1", 64, capacity=2**16)
    only_gpu = lambda dev, w, _p=profiler_for(spec, iterations=20, warmup=5, cache_dir=tmp_path): (  # noqa: E731
        _p(dev, w) if dev.kind == "cuda" else None)
    row = fill_matrix(spec, wl, profiler=only_gpu).row(gpus[0].name)
    assert {c.source for _, c in row.cells() if c is not None} == {"profiled"}
    assert row.config["learner_cell_from"] == "trainer"  # the runtime's DQN was timed on the GPU


def test_transports_round_trip():
    import torch

    from pearl_cuda.transport import DeviceLocal, DeviceToHost, HostToDevice

    h2d = HostToDevice({"obs": ((3,), np.float32), "done": ((), np.bool_)}, rows=8, slots=2)
    rows = [np.arange(i, i + 15, dtype=np.float32).reshape(5, 3) for i in range(4)]
    for r in rows:  # more sends than slots: reuse waits for the earlier copies
        views, event = h2d.send({"obs": r, "done": np.ones(5, bool)})
        torch.cuda.current_stream().wait_event(event)
        np.testing.assert_array_equal(views["obs"].cpu().numpy(), r)
    d2h = DeviceToHost(rows=16)
    d2h.send(torch.arange(10, dtype=torch.float32, device="cuda"))
    np.testing.assert_array_equal(d2h.wait(), np.arange(10, dtype=np.float32))
    ch = DeviceLocal()
    t = torch.ones(4, device="cuda")
    ch.send(t)
    assert ch.receive() is t


def test_gpu_storage_matches_the_host_storage_and_lives_on_the_gpu():
    """make_storage on the real GPU: rows in cupy arrays there; adds/gathers equal to the host DataStorage."""
    import cupy as cp

    import pearl_core
    from pearl_core.replay.storage import TRANSITION_FIELDS, DataStorage, StorageSpec

    spec = StorageSpec((3, 4), np.uint8, (2,), np.float32)
    dev = pearl_core.get_backend("cuda").make_storage(spec, 1000, "cuda:0", staging_rows=64, staging_slots=2)
    host = DataStorage(spec, 1000)
    assert dev.device == "cuda:0"
    assert all(isinstance(a, cp.ndarray) and a.device.id == 0 for a in dev._arrays.values())
    rng = np.random.default_rng(0)
    for n in (100, 700, 450, 1500, 3):
        rows = (rng.integers(0, 255, (n, 3, 4), dtype=np.uint8), rng.normal(size=(n, 2)), rng.normal(size=n),
                rng.integers(0, 255, (n, 3, 4), dtype=np.uint8), rng.random(n) < 0.1)  # uint8 as stored
        np.testing.assert_array_equal(dev.add(*rows), host.add(*rows))
        idx = rng.integers(0, host.size, 256)
        got, want = dev.gather(idx), host.gather(idx)
        for name in TRANSITION_FIELDS:
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
            np.testing.assert_array_equal(dev.field(name), host.field(name))
    assert dev.bytes_h2d > 0 and dev.bytes_d2h > 0


def test_sum_tree_on_the_plans_device_string():
    import pearl_core

    tree = pearl_core.get_backend("cuda").make_sum_tree(1024, 16, device="cuda:0", threads=3)
    assert tree.device == "cuda:0" and tree.tree.device.id == 0


def test_setting2_batches_stay_on_the_gpu_and_train_like_the_host_path():
    """Setting 2 (RM, Data Storage and learner on cuda:0): the runtime's LearnerStep samples a
    PrioritizedReplay over CudaStorage + CudaSumTree into DQN.device_batch_slot (CudaStorage.device_out);
    every batch stays on the GPU and the DQN trains exactly as one fed the same batches through the host."""
    import copy

    import gymnasium.spaces as spaces
    import torch

    import pearl_core
    from pearl_core.algorithms.dqn import DQN
    from pearl_core.replay import PrioritizedReplay
    from pearl_core.replay.storage import TRANSITION_FIELDS, DataStorage, StorageSpec
    from pearl_core.runtime.step import LearnerStep

    backend = pearl_core.get_backend("cuda")
    spec, batch = StorageSpec((4,), np.float32, (), np.int64), 64  # row: 16 + 8 + 4 + 16 + 1 + steps 4 = 49 bytes

    def replay():
        return PrioritizedReplay(backend.make_storage(spec, 4096, "cuda:0"),
                                 backend.make_sum_tree(4096, 16, device="cuda:0"), rng=3)

    torch.manual_seed(0)
    dqn = DQN(spaces.Box(-5, 5, (4,), np.float32), spaces.Discrete(3), hidden_sizes=(64, 64),
              target_update_every=4, device="cuda:0", seed=0)
    twin = copy.deepcopy(dqn)
    on_device, on_host = LearnerStep(dqn, replay(), batch), LearnerStep(twin, replay(), batch)
    slot = on_device.device_slot
    assert slot is not None, "DQN on cuda:0 over a CudaStorage on cuda:0 got no device slot"
    assert all(slot[f].is_cuda and slot[f].device.index == 0 for f in TRANSITION_FIELDS)
    assert slot["done"].dtype == torch.bool and slot["weights"].dtype == np.float32
    on_host.device_slot = None  # today's path: the batch goes to the host and back
    cpu_dqn = DQN(spaces.Box(-5, 5, (4,), np.float32), spaces.Discrete(3), hidden_sizes=(8,))
    assert cpu_dqn.device_batch_slot(on_device.replay.storage, batch) is None
    assert dqn.device_batch_slot(DataStorage(spec, 16), batch) is None
    bare = DQN(spaces.Box(-5, 5, (4,), np.float32), spaces.Discrete(3), hidden_sizes=(8,), device="cuda")
    assert bare.device_batch_slot(on_device.replay.storage, 8) is not None  # "cuda": torch's current GPU (0)

    rng = np.random.default_rng(4)
    updates = 0
    for _ in range(10):
        n = 300
        rows = (rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 3, n), rng.normal(size=n),
                rng.normal(size=(n, 4)).astype(np.float32), rng.random(n) < 0.1)
        on_device.replay.add(*rows)
        on_host.replay.add(*rows)
        for _ in range(3):
            a, h = on_device.sample(), on_host.sample()
            np.testing.assert_array_equal(a.indices, h.indices)
            np.testing.assert_array_equal(a.weights, h.weights)
            for f in TRANSITION_FIELDS:
                assert getattr(a.batch, f) is slot[f]  # gathered into the slot's tensors on the GPU
                np.testing.assert_array_equal(slot[f].cpu().numpy(), getattr(h.batch, f), err_msg=f)
            td_a, td_h = on_device.train(a.batch, a.weights), on_host.train(h.batch, h.weights)
            # same GPU, same kernels, the same input bytes: the updates agree exactly
            np.testing.assert_array_equal(td_a, td_h)
            on_device.apply(a.indices, td_a)
            on_host.apply(h.indices, td_h)
            updates += 1
    for x, y in zip(dqn.q_net.parameters(), twin.q_net.parameters()):
        assert torch.equal(x, y)
    dev_st, host_st = on_device.replay.storage, on_host.replay.storage
    assert dev_st.batches_on_device == on_device.updates == updates and host_st.batches_on_device == 0
    assert dev_st.bytes_d2h == 0, "a batch row came back to the host"
    assert host_st.bytes_d2h == updates * batch * 49
    assert dev_st.bytes_h2d == host_st.bytes_h2d == 10 * 300 * 49 + updates * batch * 8
