"""Host-side logic of the CUDA plugin, tested on numpy / CPU torch (no GPU needed)."""

import sys

import pytest

from pearl_core.composer.workload import LearnerLayer
from pearl_core.errors import InvalidValueError
from pearl_cuda import detect, learner, profile, transport
from pearl_cuda.sumtree import BLOCK_MAX_BATCH, launch_shape, resolve_strategy


# ---------------------------------------------------------------- sum-tree launches
def test_launch_shapes():
    assert launch_shape(1, "block", 132) == (1, 32)
    assert launch_shape(100, "block", 132) == (1, 128)
    assert launch_shape(5000, "block", 132) == (1, 1024)  # one block, grid-stride inside
    assert launch_shape(4096, "levels", 132) == (16, 256)
    assert launch_shape(4096, "grid", 132) == (16, 256)
    assert launch_shape(10**6, "grid", 132) == (132, 256)  # never more blocks than SMs: all resident
    with pytest.raises(ValueError):
        launch_shape(0, "levels", 1)


def test_strategy_resolution():
    assert resolve_strategy("auto", BLOCK_MAX_BATCH, True) == "block"
    assert resolve_strategy("auto", BLOCK_MAX_BATCH + 1, True) == "grid"
    assert resolve_strategy("auto", 4096, False) == "levels"
    assert resolve_strategy("grid", 4096, False) == "levels"
    with pytest.raises(InvalidValueError, match="unknown"):
        resolve_strategy("atomics", 1, True)


# ---------------------------------------------------------------- detection and power
def test_gpu_info_from_properties():
    info = detect.gpu_info(1, {"name": b"NVIDIA H100 80GB HBM3\x00\x00", "totalGlobalMem": 80 * 2**30,
                               "major": 9, "minor": 0, "multiProcessorCount": 132, "cooperativeLaunch": 1})
    assert info.name == "cuda:1" and info.kind == "cuda" and info.backend == "cuda"
    assert info.description == "NVIDIA H100 80GB HBM3 (sm_90, 80 GiB)"
    assert info.details["memory_bytes"] == 80 * 2**30 and info.details["compute_capability"] == "9.0"
    assert info.details["multiprocessors"] == 132 and info.details["cooperative_launch"] is True


def test_power_meter_falls_back_to_the_spec(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    meter = detect.PowerMeter(0, 350.0)
    assert meter.source == "spec" and meter.watts() == 350.0


# ---------------------------------------------------------------- learner tuning
def test_stream_candidates_are_a_subset_of_1_to_bs():
    assert learner.stream_candidates(1) == (1,)
    assert learner.stream_candidates(32) == (1, 2, 4)
    assert learner.stream_candidates(4096) == (1, 2, 4, 8, 16)
    for bs in (1, 7, 64, 100, 4096):
        assert all(1 <= s <= bs for s in learner.stream_candidates(bs))


def test_split_sizes():
    assert learner.split_sizes(10, 3) == (4, 3, 3)
    assert sum(learner.split_sizes(4096, 16)) == 4096
    with pytest.raises(ValueError):
        learner.split_sizes(4, 5)


def test_mlp_dims_from_workload_layers():
    ly = [LearnerLayer("q_net.0", "linear", 4, 256, 1024, 1280, True, "q_net"),
          LearnerLayer("q_net.2", "linear", 256, 256, 65536, 65792, True, "q_net"),
          LearnerLayer("q_net.4", "linear", 256, 2, 512, 514, True, "q_net"),
          LearnerLayer("target_net.0", "linear", 4, 256, 1024, 1280, False, "target_net"),
          LearnerLayer("target_net.2", "linear", 256, 2, 512, 514, False, "target_net")]
    assert learner.mlp_dims(ly) == ((4, 256, 256, 2), (4, 256, 2))
    assert learner.mlp_dims(()) == ((4, 256, 256, 2), None)


# ---------------------------------------------------------------- transports
def test_chunk_rows():
    assert transport.chunk_rows(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert transport.chunk_rows(0, 4) == []


def test_slot_ring_waits_before_reuse():
    waited = []
    ring = transport.SlotRing(2, wait=waited.append)
    a = ring.acquire()
    ring.release(a, "copy-a")
    b = ring.acquire()
    ring.release(b, "copy-b")
    assert (a, b) == (0, 1) and waited == []
    assert ring.acquire() == 0 and waited == ["copy-a"]  # slot 0 is reused only after its copy finished


def test_transport_table():
    assert set(transport.TRANSPORTS) == {("cpu", "cuda"), ("cuda", "cpu"), ("cuda", "cuda")}


# ---------------------------------------------------------------- measurement helpers
def test_device_ordinal():
    from types import SimpleNamespace as NS

    assert profile.device_ordinal(NS(index=2, name="h100")) == 2
    assert profile.device_ordinal(NS(index=None, name="cuda:3")) == 3
    assert profile.device_ordinal(NS(index=None, name="h100")) == 0


def test_time_calls_reports_the_median():
    ticks = iter([0.0, 1.0, 1.0, 3.0, 3.0, 3.5])
    import pearl_cuda.profile as prof

    orig = prof.time.perf_counter
    prof.time.perf_counter = lambda: next(ticks)
    try:
        assert prof.time_calls(lambda: None, lambda: None, 3, 0) == 1.0  # samples 1.0, 2.0, 0.5
    finally:
        prof.time.perf_counter = orig
