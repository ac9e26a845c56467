"""``composer/costs.py`` holds no kind-specific model: the core's default model is the host CPU's.

A GPU is modelled by the CUDA plugin's backend (``pearl_cuda.model``, tested in
``plugins/pearl_cuda/tests/test_cuda_model.py``); without a backend for its kind, a ``cuda`` device is
like any other kind nobody models: an empty row that says so, and no candidate on it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from pearl_core.composer import HardwareSpec, make_plan, workload_for_env
from pearl_core.composer.costs import fill_matrix
from pearl_core.plugins import PluginRegistry

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "hardware" / "cpu-gpu-fpga.toml"


def test_without_the_cuda_backend_a_gpu_has_no_model_in_the_core():
    reg = PluginRegistry(autoload=False)  # no plugin at all: the core alone
    spec = HardwareSpec.load(SPEC, registry=reg)
    wl = workload_for_env("CartPole-v1", 32, hidden_sizes=(64, 64))
    row = fill_matrix(spec, wl, registry=reg).row("h100")
    assert all(c is None for _, c in row.cells())
    assert row.notes == ("no cost model for this device: no backend for kind 'cuda'",)
    assert fill_matrix(spec, wl, registry=reg).row("xeon").learner.source == "analytic"  # the host's default model
    plan = make_plan(spec, wl, registry=reg)
    assert "h100" not in (plan.rm_device, plan.learner_device)


def test_the_core_cost_modules_name_no_accelerator_kind():
    """No ``"cuda"`` / ``"fpga"`` branch in the core's cost filling and analytic model."""
    for name in ("costs.py", "analytic.py"):
        tree = ast.parse((ROOT / "pearl_core" / "composer" / name).read_text(encoding="utf-8"))
        kinds = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in ("cuda", "fpga", "gpu")}
        assert not kinds, f"pearl_core/composer/{name} names {sorted(kinds)}"


# --------------------------------------------------------------------------- fields a backend declares it reads
def _acc_registry(spec_fields):
    import types

    from pearl_core.backend import Availability, Backend
    from pearl_core.composer.matrix import CostCell, DeviceRow
    from pearl_core.hookspecs import hookimpl

    class Acc(Backend):
        name = "acc"
        device_kind = "acc"
        asked = []

        def availability(self):
            return Availability.no("no acc here")

        def devices(self):
            return []

        def make_sum_tree(self, capacity, fanout=16, **options):
            raise NotImplementedError

        def analytic_cells(self, device, workload):
            type(self).asked.append(device.name)
            cell = CostCell(1e-6, device.active_power_w, "analytic")
            return DeviceRow(device.name, device.kind, cell, cell, cell, cell, cell, cell, cell, cell)

    Acc.spec_fields = spec_fields

    @hookimpl
    def pearl_register_backends(register):
        register(Acc)

    reg = PluginRegistry(autoload=False)
    reg.register_plugin(types.SimpleNamespace(pearl_register_backends=pearl_register_backends), name="acc")
    return reg, Acc


def _acc_spec(**fields):
    from pearl_core.composer.spec import DeviceSpec, LinkSpec

    host = DeviceSpec("c", "cpu", 2**30, 10, 50, cores=4)
    acc = DeviceSpec("n0", "acc", 2**32, 5, 15, mem_bandwidth_Bps=1e11, **fields)
    return HardwareSpec((host, acc), (LinkSpec("c", "c", 1e-6, 1e10), LinkSpec("c", "n0", 1e-5, 1e10)))


def test_a_device_without_the_fields_its_backend_reads_is_not_modelled_and_says_which():
    from pearl_core.composer.workload import Workload

    reg, acc = _acc_registry(("clock_hz", "peak_flops"))
    wl = Workload(batch_size=8, obs_bytes=16, action_bytes=8)
    row = fill_matrix(_acc_spec(peak_flops=1e12), wl, registry=reg).row("n0")
    assert all(c is None for _, c in row.cells()) and acc.asked == []
    assert row.notes == ("backend 'acc' reads field(s) ['clock_hz'] of this device to model it (its spec_fields), "
                         "but the spec leaves them out. Fix: add them to the device's [[device]] table "
                         "(docs/hardware-spec.md).",)
    assert fill_matrix(_acc_spec(peak_flops=1e12, clock_hz=1e9), wl, registry=reg).row("n0").can_colocate
    assert acc.asked == ["n0"]


def test_malformed_spec_fields_name_the_backend():
    from pearl_core.composer.workload import Workload

    reg, _ = _acc_registry(("clock_hz", "no_such_field"))
    row = fill_matrix(_acc_spec(clock_hz=1e9), Workload(8, 16, 8), registry=reg).row("n0")
    assert not row.can_learn and "backend 'acc'" in row.notes[0] and "spec_fields = ('clock_hz', 'no_such_field')" \
        in row.notes[0] and "expected a tuple of DeviceSpec field names" in row.notes[0]


def test_the_fpga_backend_declares_its_resources():
    from pearl_fpga.backend import FpgaBackend

    assert FpgaBackend.spec_fields == ("dsp_blocks", "ram_blocks", "ram_block_bits", "logic_ram_blocks",
                                       "logic_ram_block_bits", "clock_hz")
