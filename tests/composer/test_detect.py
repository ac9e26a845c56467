"""``composer/detect.py`` holds no accelerator's figures: a detected device's defaults and resource fields come from
the backend that detects it (``spec_defaults``, ``spec_fields``); the host CPU's defaults are the core's."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import pytest

from pearl_core.backend import Availability, Backend, DeviceInfo
from pearl_core.composer.detect import detect_hardware
from pearl_core.hookspecs import hookimpl
from pearl_core.plugins import PluginRegistry

ROOT = Path(__file__).resolve().parents[2]


def registry_for(**attrs) -> tuple[PluginRegistry, type]:
    class Acc(Backend):
        name = "acc"
        device_kind = "acc"

        def availability(self):
            return Availability.yes()

        def devices(self):
            return [DeviceInfo("acc0", "acc", "acc", "a test board", {"clock_hz": 4e8, "dsp_blocks": 99,
                                                                      "memory_bytes": 2**33})]

        def make_sum_tree(self, capacity, fanout=16, **options):
            raise NotImplementedError

    for key, value in attrs.items():
        setattr(Acc, key, value)

    @hookimpl
    def pearl_register_backends(register):
        register(Acc)

    reg = PluginRegistry(autoload=False)
    reg.register_plugin(types.SimpleNamespace(pearl_register_backends=pearl_register_backends), name="acc")
    return reg, Acc


def test_a_detected_device_takes_its_backends_defaults_and_the_fields_it_reads():
    defaults = {"idle_power_w": 3.0, "active_power_w": 9.0, "mem_bandwidth_Bps": 7e9, "memory_bytes": 2**30}
    reg, _ = registry_for(spec_defaults=defaults, spec_fields=("clock_hz",))
    dev = detect_hardware(reg).device("acc0")
    assert (dev.idle_power_w, dev.active_power_w, dev.mem_bandwidth_Bps) == (3.0, 9.0, 7e9)
    assert dev.memory_bytes == 2**33 and dev.clock_hz == 4e8  # given by the details: not assumed
    assert dev.dsp_blocks is None  # reported, but not a field this backend reads
    assert dev.assumed == ("idle_power_w", "active_power_w", "mem_bandwidth_Bps")


def test_without_declared_defaults_a_detected_accelerator_gets_the_generic_ones():
    reg, _ = registry_for()
    dev = detect_hardware(reg).device("acc0")
    assert (dev.idle_power_w, dev.active_power_w, dev.mem_bandwidth_Bps) == (20.0, 75.0, 10e9)


@pytest.mark.parametrize("bad", [{"idle_power_w": 1.0}, {"idle_power_w": 3.0, "active_power_w": -9.0,
                                                         "mem_bandwidth_Bps": 7e9, "memory_bytes": 2**30}, "fast"])
def test_malformed_spec_defaults_leave_the_device_out_naming_the_backend(bad):
    reg, _ = registry_for(spec_defaults=bad)
    with pytest.warns(UserWarning, match=r"leaves out 'acc0' of backend 'acc': backend 'acc': spec_defaults = .* "
                                         r"is invalid; expected numbers > 0"):
        spec = detect_hardware(reg)
    assert [d.kind for d in spec.devices] == ["cpu"]


def test_the_cuda_backend_brings_the_figures_detection_used_to_hold():
    from pearl_cuda.backend import CudaBackend

    assert CudaBackend.spec_defaults == {"idle_power_w": 30.0, "active_power_w": 250.0, "mem_bandwidth_Bps": 500e9,
                                         "memory_bytes": 16 * 2**30}
    tree = ast.parse((ROOT / "pearl_core" / "composer" / "detect.py").read_text(encoding="utf-8"))
    assert not {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in ("cuda", "fpga")}
