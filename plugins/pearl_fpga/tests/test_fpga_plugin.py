"""The FPGA backend registers, reaches the emulation device and says what it is (and is not)."""

import numpy as np
import pytest

import pearl_core
from pearl_core.composer.costs import AnalyticCostModel, ProfiledCostModel
from pearl_core.plugins import PluginRegistry
from pearl_fpga.backend import FpgaBackend
from pearl_fpga.runtime import EMULATION_NOTE, DpctlRuntime
from pearl_fpga.sumtree import PipelinedSumTree, tree_levels


def test_registers_and_is_available_on_the_emulation_device():
    reg = PluginRegistry()
    (rec,) = [p for p in reg.plugins() if p.name == "fpga"]
    assert rec.loaded and rec.distribution == "pearl-fpga" and rec.backends == ("fpga",)
    (row,) = [s for s in reg.status() if s.name == "fpga"]
    assert row.available, row.reason
    assert "FPGA Emulation Device" in DpctlRuntime.default().description


def test_devices_say_functional_emulation_and_no_bitstream():
    (dev,) = FpgaBackend().devices()
    assert dev.kind == "fpga" and dev.backend == "fpga"
    assert "functional emulation — no bitstream built or run" in dev.description == (
        f"Intel(R) FPGA Emulation Device: {EMULATION_NOTE}")
    assert dev.details["fp64"] is True
    assert dev.details["emulated"] is True  # hardware detection leaves it out: nothing to plan with
    # no emulator timings: the backend is an analytic cost model only
    assert not isinstance(FpgaBackend(), ProfiledCostModel) and isinstance(FpgaBackend(), AnalyticCostModel)


def test_authors_testbench_tree_k4_d4():
    # pearl-notes 3.3: K = 4, D = 4 would be 256 leaves; the testbench fills 64 leaves at 0.1 (root 6.4).
    tree = pearl_core.get_backend("fpga").make_sum_tree(64, 4)
    assert isinstance(tree, PipelinedSumTree) and tree.levels == 3 and tree.widths == (4, 16, 64)
    tree.update(np.arange(64), np.full(64, 0.1))
    assert tree.total() == pytest.approx(6.4)
    # Our contract is the strict "prefix > x" (the testbench used >=, which picks 0 for x = 0.1).
    np.testing.assert_array_equal(tree.sample([0.05, 1.0, 1.4, 6.3]), [0, 9, 13, 62])


def test_update_with_duplicates_and_shared_ancestors_is_deterministic():
    tree = pearl_core.get_backend("fpga").make_sum_tree(1000, 8)
    idx = np.array([5, 6, 7, 5, 999, 6, 0, 0, 0])   # duplicates, siblings, a shared root path
    tree.update(idx, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    np.testing.assert_array_equal(tree.get([0, 5, 6, 7, 999]), [9.0, 4.0, 6.0, 3.0, 5.0])
    assert tree.total() == 27.0
    tree.update([999], [1e30])
    tree.update([999], [0.0])                       # a delta tree would lose the 22 to cancellation
    assert tree.total() == 22.0


def test_depth_and_unknown_options():
    assert [tree_levels(c, 16) for c in (1, 16, 17, 8192, 65536, 65537)] == [1, 1, 2, 4, 4, 5]
    with pytest.raises(pearl_core.errors.InvalidOptionError, match="unknown sum-tree options"):
        FpgaBackend().make_sum_tree(8, 2, pipes=4)
    assert FpgaBackend().make_sum_tree(8, 2, threads=4).capacity == 8  # the core's wiring always passes threads
