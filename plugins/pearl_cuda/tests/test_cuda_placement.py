"""The plan's device strings through the CUDA backend (numpy stand-in for cupy, no GPU needed).

``make_sum_tree(..., device="cuda:N")`` and ``make_storage(spec, capacity, "cuda:N")`` put the
primitive on GPU ``N``; a malformed or absent device is refused with the reason and the fix; the
core's placement layer (``pearl_core.placement``) gets what it checks for (``.device == "cuda:N"``,
the learner's torch device ``"cuda:N"``).
"""

import importlib.util
import pathlib
import sys

import numpy as np
import pytest

from pearl_core.errors import InvalidDTypeError, InvalidOptionError, InvalidValueError, PlacementError
from pearl_core.replay.storage import StorageSpec
from pearl_cuda import backend, kernels
from pearl_cuda.device import cuda_device_string, cuda_ordinal

_spec = importlib.util.spec_from_file_location("pearl_cuda_fake_cupy_placement",
                                               pathlib.Path(__file__).with_name("fake_cupy.py"))
fake_cupy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_cupy)

SPEC = StorageSpec((4,), np.float32, (), np.int64)


@pytest.fixture
def gpus(monkeypatch):
    """An available CUDA backend that sees two (fake) GPUs."""
    from pearl_core.backend import Availability

    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setattr(backend.CudaBackend, "availability", lambda self: Availability.yes())
    monkeypatch.setattr(fake_cupy.cuda.runtime, "getDeviceCount", lambda: 2)
    kernels.load.cache_clear()
    yield backend.CudaBackend()
    kernels.load.cache_clear()


def test_device_strings_parse():
    assert [cuda_ordinal(d) for d in (0, 3, "cuda", "cuda:0", "cuda:12", " cuda:1 ", None, np.int64(2))] == \
        [0, 3, 0, 0, 12, 1, 0, 2]
    assert cuda_device_string("cuda") == "cuda:0"
    torch = pytest.importorskip("torch")
    assert cuda_ordinal(torch.device("cuda", 1)) == 1 and cuda_ordinal(torch.device("cuda")) == 0
    with pytest.raises(InvalidValueError, match="'cpu' device"):
        cuda_ordinal(torch.device("cpu"))


@pytest.mark.parametrize("bad,err,says", [
    ("cpu", InvalidValueError, "'cpu' device is not a GPU"),
    ("fpga:0", InvalidValueError, "'fpga' device is not a GPU"),
    ("cuda:", InvalidValueError, "ordinal after the colon"),
    ("cuda:1.5", InvalidValueError, "expected 'cuda' or 'cuda:N'"),
    ("CUDA:0", InvalidValueError, "lower case"),
    (1.0, InvalidDTypeError, "expected an int ordinal"),
    ([0], InvalidDTypeError, "list"),
    (False, InvalidDTypeError, "bool"),
    (-1, InvalidValueError, "negative"),
])
def test_malformed_devices_say_what_and_how_to_fix(bad, err, says):
    with pytest.raises(err, match=says) as info:
        cuda_ordinal(bad)
    assert "Fix:" in str(info.value)


def test_torch_device_type_is_cuda():
    assert backend.CudaBackend.torch_device_type == "cuda"


def test_sum_tree_on_the_plans_gpu(gpus):
    tree = gpus.make_sum_tree(100, 4, device="cuda:1", threads=8)
    assert (tree.device, tree.device_id) == ("cuda:1", 1)
    tree.update([3, 7], [1.0, 2.0])
    assert tree.total() == 3.0
    assert gpus.make_sum_tree(100, 4, device=1).device == "cuda:1"  # an ordinal still works
    assert gpus.make_sum_tree(100, 4).device == "cuda:0"  # default GPU 0
    with pytest.raises(PlacementError, match=r"cuda:2, but this process sees 2 GPUs \(cuda:0..cuda:1\)"):
        gpus.make_sum_tree(100, 4, device="cuda:2")
    with pytest.raises(InvalidValueError, match="not a GPU"):
        gpus.make_sum_tree(100, 4, device="cpu")
    with pytest.raises(InvalidOptionError, match="colour"):
        gpus.make_sum_tree(100, 4, device="cuda:0", colour="red")


def test_malformed_device_is_refused_before_the_availability_check(monkeypatch):
    monkeypatch.setattr(backend, "probe_cuda", lambda: "no CUDA device is visible")
    with pytest.raises(InvalidValueError, match="not a CUDA device string"):
        backend.CudaBackend().make_sum_tree(16, 4, device="cuda:one")
    with pytest.raises(pytest.importorskip("pearl_core").BackendUnavailableError, match="no CUDA device"):
        backend.CudaBackend().make_storage(SPEC, 16, "cuda:0")


def test_core_placement_gets_gpu_primitives(gpus):
    placement = pytest.importorskip("pearl_core.placement", reason="pearl-core without the placement layer")
    from pearl_core.plugins import PluginRegistry
    from pearl_cuda.storage import CudaStorage

    reg = PluginRegistry()
    storage = placement.make_storage(SPEC, 64, "cuda:1", registry=reg)
    assert isinstance(storage, CudaStorage) and storage.device == "cuda:1"
    tree = placement.make_tree("cuda", "cuda:1", 64, 16, threads=4, registry=reg)
    assert tree.device == "cuda:1"
    from pearl_core.algorithms import DQN

    route = placement.learner_route(DQN, "cuda:1", registry=reg)
    assert (route.how, route.torch_device, route.backend) == ("torch", "cuda:1", "cuda")
