"""``CudaBackend.measure_primitive`` on the numpy stand-in for cupy (no GPU needed): the replay primitive runs the
real sum-tree launch code on the fake device and answers a :class:`PrimitiveCost` record; the composer's accelerator
policy builds the GPU's row from the backend's answers (the learner's parts, which need torch on a GPU, are
stood in for here and run for real in ``test_cuda_gpu.py``).
"""

import importlib.util
import pathlib
import sys
from types import SimpleNamespace as NS

import pytest

from pearl_core.composer.deviceprofile import profile_device
from pearl_core.composer.workload import Workload
from pearl_core.errors import SpecError
from pearl_core.sdk import MeasureRequest, PrimitiveCost
from pearl_cuda import kernels, profile
from pearl_cuda.backend import CudaBackend

_spec = importlib.util.spec_from_file_location("pearl_cuda_fake_cupy_m",
                                               pathlib.Path(__file__).with_name("fake_cupy.py"))
fake_cupy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_cupy)

WL = Workload(batch_size=16, obs_bytes=16, action_bytes=8, capacity=4096, fanout=16, insert_batch=4)
GPU = NS(name="cuda:0", kind="cuda", index=0, active_power_w=300.0)


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML: power from the spec
    kernels.load.cache_clear()
    backend = CudaBackend()
    assert backend.availability().available, backend.availability().reason
    yield backend
    kernels.load.cache_clear()


def test_replay_is_measured_on_the_device_and_answered_as_a_record(fake_gpu):
    fake_cupy.RawModule.launches.clear()
    cost = fake_gpu.measure_primitive(GPU, WL, MeasureRequest("replay", 1, iterations=3, warmup=1))
    assert isinstance(cost, PrimitiveCost) and (cost.primitive, cost.threads) == ("replay", 1)
    assert all(v is not None and v >= 0 for v in (cost.sample_s, cost.update_s, cost.insert_s))
    assert cost.seconds == pytest.approx(cost.sample_s + cost.update_s + cost.insert_s)
    assert cost.power_w == 300.0 and "power from spec" in cost.notes
    assert dict(cost.details) == {"ordinal": 0, "rm_parallelism": 16}
    # the real launch code ran: sample, get (the insert's retrieval) and update kernels, warmup included
    launched = set(fake_cupy.RawModule.launches)
    assert {"pearl_sample", "pearl_get"} <= launched and any(k.startswith("pearl_update") for k in launched)


def test_host_primitives_are_not_this_backends_and_the_session_is_per_device_and_workload(fake_gpu):
    for primitive in ("actor_step", "message_hop"):
        assert fake_gpu.measure_primitive(GPU, WL, MeasureRequest(primitive)) is None
    fake_gpu.measure_primitive(GPU, WL, MeasureRequest("replay", 1, 2, 0))
    first = fake_gpu._gpu_session
    fake_gpu.measure_primitive(GPU, WL, MeasureRequest("replay", 1, 2, 0))
    assert fake_gpu._gpu_session is first  # the filled tree is built once for one device and workload
    other = Workload(batch_size=8, obs_bytes=16, action_bytes=8, capacity=1024, fanout=16, insert_batch=4)
    fake_gpu.measure_primitive(GPU, other, MeasureRequest("replay", 1, 2, 0))
    assert fake_gpu._gpu_session is not first and fake_gpu._gpu_session.wl == other


def test_the_composer_builds_the_gpu_row_from_the_backends_answers(fake_gpu, monkeypatch):
    def learner(self, request):
        self.learner_cost = PrimitiveCost("learner", 1, 2e-4, power_w=310.0, details={"learner_streams": 2})
        return self.learner_cost

    def worker_loop(self, request):
        return PrimitiveCost("worker_loop", 1, 3e-4, sample_s=1e-5, update_s=2e-5, insert_s=3e-5, learner_s=2.5e-4)

    monkeypatch.setattr(profile.GpuSession, "learner", learner)
    monkeypatch.setattr(profile.GpuSession, "worker_loop", worker_loop)
    row = profile_device("cuda", fake_gpu, GPU, WL, iterations=3, warmup=1)
    assert row.device == "cuda:0" and row.can_rm and row.can_learn and row.can_colocate
    assert {c.source for _, c in row.cells()} == {"profiled"}
    assert row.learner.latency_s == 2e-4 and row.learner.power_w == 310.0 and row.co_learner.latency_s == 2.5e-4
    assert row.rm_sample.power_w == 300.0 and row.config["learner_streams"] == 2 and row.config["ordinal"] == 0


def test_an_unavailable_backend_measures_nothing_and_the_policy_leaves_the_gpu_to_its_model(monkeypatch):
    import pearl_cuda.backend as backend_module

    monkeypatch.setattr(backend_module, "probe_cuda", lambda: "no CUDA device is visible")
    backend = CudaBackend()
    assert backend.measure_primitive(GPU, WL, MeasureRequest("replay")) is None
    assert profile_device("cuda", backend, GPU, WL, iterations=3, warmup=1) is None


def test_a_wrong_record_from_the_gpu_is_named(fake_gpu, monkeypatch):
    monkeypatch.setattr(profile.GpuSession, "learner", lambda self, request: PrimitiveCost("learner", 4, 1e-4))
    with pytest.raises(SpecError, match=r"backend 'cuda'\.measure_primitive answered .*threads=4"):
        profile_device("cuda", fake_gpu, GPU, WL, iterations=3, warmup=1)
