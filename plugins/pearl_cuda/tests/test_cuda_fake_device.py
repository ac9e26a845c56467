"""CudaSumTree's host face through the conformance kit on a numpy stand-in for cupy (no GPU needed).

Every launch is checked against the kernel signatures parsed from the CUDA
sources (argument count, pointer dtypes, scalar C types, launch shape), so an
argument-order or type slip in the Python launch code fails here and not first
on a GPU. The kernels' effects are re-implemented from the source in
``fake_cupy.py``. This proves the plumbing, not the CUDA code itself (that is
the nvcc compile check, the emulation tests, and the GPU tests).
"""

import importlib.util
import pathlib
import sys

import numpy as np
import pytest

from pearl_core.testing import SumTreeConformance
from pearl_cuda import kernels

_spec = importlib.util.spec_from_file_location("pearl_cuda_fake_cupy", pathlib.Path(__file__).with_name("fake_cupy.py"))
fake_cupy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_cupy)


class _WithFakeCupy:
    strategy = "auto"

    @classmethod
    def setup_class(cls):
        cls._saved = sys.modules.get("cupy")
        sys.modules["cupy"] = fake_cupy
        kernels.load.cache_clear()

    @classmethod
    def teardown_class(cls):
        if cls._saved is None:
            sys.modules.pop("cupy", None)
        else:
            sys.modules["cupy"] = cls._saved
        kernels.load.cache_clear()

    def make_tree(self, capacity, fanout):
        from pearl_cuda.sumtree import CudaSumTree

        return CudaSumTree(capacity, fanout, update_strategy=self.strategy)


class TestFakeDeviceAuto(_WithFakeCupy, SumTreeConformance):
    """``auto``: one-block updates up to 512 items, cooperative grid above (the large-batch tests)."""

    strategy = "auto"


class TestFakeDeviceFace(_WithFakeCupy):
    def test_strategies_launch_what_they_say(self):
        fake_cupy.RawModule.launches.clear()
        tree = self.make_tree(4096, 16)  # 3 levels
        for st, want in (("levels", ["pearl_update_claim", "pearl_update_leaves"] + ["pearl_update_level"] * 3),
                         ("block", ["pearl_update_block"]), ("grid", ["pearl_update_grid"])):
            fake_cupy.RawModule.launches.clear()
            tree.update_device(fake_cupy.asarray(np.array([1, 2, 1])), fake_cupy.asarray(np.array([1.0, 2.0, 3.0])),
                               strategy=st)
            assert fake_cupy.RawModule.launches == want
        assert tree.get([1, 2]).tolist() == [3.0, 2.0] and tree.total() == 5.0

    def test_device_face_converts_dtypes_on_the_device_and_flags_bad_input(self):
        from pearl_core.errors import InvalidDTypeError, InvalidIndexError, InvalidValueError

        tree = self.make_tree(100, 4)
        tree.update_device(fake_cupy.asarray(np.array([3, 7], np.int32)), fake_cupy.asarray(np.array([1, 2])))
        assert tree.get_device(fake_cupy.asarray(np.array([7, 3]))).get().tolist() == [2.0, 1.0]
        with pytest.raises(InvalidValueError, match="not a device array"):
            tree.get_device(np.array([1]))
        with pytest.raises(InvalidDTypeError):
            tree.get_device(fake_cupy.asarray(np.array([1.5])))
        tree.update_device(fake_cupy.asarray(np.array([3, 100])), fake_cupy.asarray(np.array([9.0, 9.0])))
        with pytest.raises(InvalidIndexError):
            tree.check_errors()
        tree.check_errors()  # cleared
        assert tree.sample_device(fake_cupy.asarray(np.array([0.5, 9.5, -1.0]))).get().tolist() == [3, 7, -1]
        with pytest.raises(InvalidValueError, match="mass"):
            tree.check_errors()

    def test_load_rebuilds_from_leaves(self):
        from pearl_cuda.emulation import EmulatedSumTree

        p = np.random.default_rng(0).uniform(0, 2, 3000)
        tree, emu = self.make_tree(3000, 7), EmulatedSumTree(3000, 7)
        tree.load(p)
        emu.update(np.arange(3000), p)
        np.testing.assert_array_equal(np.asarray(tree.tree), emu.tree)
