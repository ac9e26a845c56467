"""pearl_core.testing.StorageConformance on CudaStorage, over the numpy stand-in for cupy (no GPU needed).

As in ``test_cuda_storage.py``, ``fake_cupy`` replaces ``cupy``: its host->device copies are queued and
read their pinned source only at the next synchronisation point, so the suite sees what a GPU would
(a staging slot refilled too early stores the wrong rows). Two staging layouts run: the default one
(one pinned slot holds every batch the suite adds) and a tiny one (3 rows per slot, 2 slots), where
every batch of more than 3 rows is split into chunks that reuse the slots. torch's side of the GPU
(``CudaStorage._torch_device`` / ``_torch_stream``) is the CPU and a fake stream, so the kit's device-face
test runs ``gather_device`` into CPU tensors through the same cupy views and stream waits.
"""

import importlib.util
import pathlib
import sys

import pytest

from pearl_core.testing import StorageConformance

_spec = importlib.util.spec_from_file_location("pearl_cuda_fake_cupy_storage_conformance",
                                               pathlib.Path(__file__).with_name("fake_cupy.py"))
fake_cupy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_cupy)
_TORCH_STREAM = fake_cupy.Stream()  # stands for torch's current stream on the GPU


@pytest.fixture(autouse=True)
def _cupy(monkeypatch):
    import torch

    from pearl_cuda.storage import CudaStorage

    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setattr(CudaStorage, "_torch_device", lambda self: torch.device("cpu"))
    monkeypatch.setattr(CudaStorage, "_torch_stream", lambda self: _TORCH_STREAM)
    fake_cupy._PENDING.clear()
    yield
    fake_cupy._PENDING.clear()


class TestCudaStorageConformance(StorageConformance):
    device = "cuda:0"

    def make_storage(self, spec, capacity):
        from pearl_cuda.storage import CudaStorage

        return CudaStorage(spec, capacity, device="cuda:0")


class TestCudaStorageChunkedStagingConformance(StorageConformance):
    device = "cuda:1"

    def make_storage(self, spec, capacity):
        from pearl_cuda.storage import CudaStorage

        return CudaStorage(spec, capacity, device="cuda:1", staging_rows=3, staging_slots=2)
