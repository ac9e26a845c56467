"""The plugin without a GPU: it registers, reports why it is unavailable, and plans through the composer."""

import pathlib
import sys

import pytest

import pearl_core
from pearl_core.composer import HardwareSpec
from pearl_core.composer.costs import fill_matrix
from pearl_core.composer.detect import detect_hardware
from pearl_core.composer.workload import Workload
from pearl_core.plugins import PluginRegistry
from pearl_core.sdk import MeasureRequest
from pearl_cuda import backend, detect


def test_registers_and_reports_unavailable_with_reason():
    reg = PluginRegistry()
    (rec,) = [p for p in reg.plugins() if p.name == "cuda"]
    assert rec.loaded and rec.distribution == "pearl-cuda" and rec.backends == ("cuda",)
    (row,) = [s for s in reg.status() if s.name == "cuda"]
    if detect.probe() is None:
        pytest.skip("a GPU is present here: the backend is available (tests/test_cuda_gpu.py covers it)")
    assert not row.available
    assert row.reason and len(row.reason) > 20  # a real sentence, not an empty flag


def test_asking_for_it_raises_with_the_reason():
    if detect.probe() is None:
        pytest.skip("a GPU is present here")
    reg = PluginRegistry()
    (row,) = [s for s in reg.status() if s.name == "cuda"]
    with pytest.raises(pearl_core.BackendUnavailableError) as info:
        reg.get_backend("cuda")
    assert row.reason in str(info.value)


def test_probe_reports_missing_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    reason = backend.probe_cuda()
    assert "cupy is not installed" in reason and "pearl-cuda[cuda12]" in reason


def test_unavailable_backend_lists_no_device_and_profiles_nothing(monkeypatch):
    monkeypatch.setattr(backend, "probe_cuda", lambda: "no CUDA device is visible")
    b = backend.CudaBackend()
    assert b.availability().reason == "no CUDA device is visible"
    assert b.devices() == []
    assert b.measure_primitive(None, None, MeasureRequest("replay")) is None
    assert not hasattr(b, "profile_cells")  # retired from this backend: the composer asks measure_primitive
    with pytest.raises(pearl_core.BackendUnavailableError, match="no CUDA device is visible"):
        b.make_sum_tree(1024, 16, threads=4)


def test_kernel_compile_failure_is_the_reason(monkeypatch):
    monkeypatch.setattr(backend, "probe_cuda", lambda: None)  # pretend a GPU is present

    def broken(device_id=0):
        raise RuntimeError("nvrtc: syntax error")

    from pearl_cuda import kernels

    monkeypatch.setattr(kernels, "load", broken)
    avail = backend.CudaBackend().availability()
    assert not avail.available and "failed to compile" in avail.reason and "syntax error" in avail.reason


def test_importing_touches_no_device():
    code = "import sys, pearl_cuda, pearl_cuda.backend, pearl_cuda.plugin; sys.exit('cupy' in sys.modules)"
    import subprocess

    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def _wl():
    return Workload(batch_size=64, obs_bytes=16, action_bytes=8, capacity=2**20, fanout=16)


def test_composer_models_a_described_but_absent_gpu():
    path = pathlib.Path(__file__).resolve().parents[3] / "examples" / "hardware" / "cpu-gpu-fpga.toml"
    row = fill_matrix(HardwareSpec.load(path), _wl()).row("h100")  # an H100 this machine does not have
    assert row.kind == "cuda" and row.can_rm and row.can_learn and row.can_colocate
    assert {c.source for _, c in row.cells() if c is not None} == {"analytic"}


@pytest.mark.filterwarnings("ignore:hardware detection leaves out")
def test_composer_sees_a_present_gpu_through_detection(monkeypatch):
    """With the backend available, detection lists the GPU with its memory (cupy faked by one property dict)."""
    from pearl_core.backend import Availability

    props = {"name": b"NVIDIA H200", "totalGlobalMem": 141 * 2**30, "major": 9, "minor": 0,
             "multiProcessorCount": 132, "cooperativeLaunch": 1}
    monkeypatch.setattr(backend.CudaBackend, "availability", lambda self: Availability.yes())
    monkeypatch.setattr(backend, "list_gpus", lambda: [detect.gpu_info(0, props)])
    spec = detect_hardware(PluginRegistry())
    (gpu,) = [d for d in spec.devices if d.kind == "cuda"]
    assert gpu.name == "cuda:0" and gpu.memory_bytes == 141 * 2**30 and "H200" in gpu.description
