"""The CUDA probe explains a missing cupy or a missing device instead of raising."""

import sys

from pearl_cuda import backend


def test_probe_reports_missing_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    assert "cupy is not installed" in backend.probe_cuda()


def test_availability_never_claims_kernels(monkeypatch):
    monkeypatch.setattr(backend, "probe_cuda", lambda: None)  # pretend a GPU is present
    avail = backend.CudaBackend().availability()
    assert not avail.available and backend.NOT_SHIPPED in avail.reason
