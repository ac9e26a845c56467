"""Hardware spec: TOML with explicit units -> SI dataclasses; validation names file, object, key, value, expectation."""

from __future__ import annotations

from pathlib import Path

import pytest

from pearl_core.composer import DeviceSpec, HardwareSpec, LinkSpec
from pearl_core.composer.detect import detect_hardware
from pearl_core.errors import SpecError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "hardware"
KINDS = ("cpu", "cuda", "fpga")

HOST = """
[[device]]
name = "host"
kind = "cpu"
cores = 4
memory_GiB = 16
idle_power_W = 10
active_power_W = 40

[[link]]
a = "host"
b = "host"
latency_us = 1
bandwidth_GBps = 10
"""

GPU = """
[[device]]
name = "gpu"
kind = "cuda"
memory_GiB = 24
idle_power_W = 20
active_power_W = 300
mem_bandwidth_GBps = 900

[[link]]
a = "host"
b = "gpu"
latency_us = 10
bandwidth_GBps = 12
"""


def load(text: str, source: str = "spec.toml") -> HardwareSpec:
    return HardwareSpec.from_toml(text, source=source, kinds=KINDS)


def error(text: str) -> str:
    with pytest.raises(SpecError) as info:
        load(text)
    return str(info.value)


def test_units_are_converted_once_to_si():
    spec = load(HOST + GPU)
    host, gpu = spec.device("host"), spec.device("gpu")
    assert host.memory_bytes == 16 * 2**30 and host.threads == 4
    assert gpu.mem_bandwidth_Bps == 900e9 and gpu.device_string == "cuda:0"
    link = spec.link("gpu", "host")
    assert (link.a, link.b, link.latency_s, link.bandwidth_Bps) == ("gpu", "host", 10e-6, 12e9)
    assert link.cost_s(12e3) == pytest.approx(10e-6 + 1e-6)
    # No self link written for the GPU: derived from its memory bandwidth.
    assert spec.link("gpu", "gpu").bandwidth_Bps == 900e9 and spec.link("gpu", "gpu").crossings == 0
    assert spec.host == "host"


def test_two_accelerators_without_a_link_talk_through_the_host():
    text = HOST + GPU + GPU.replace('"gpu"', '"gpu2"').replace("bandwidth_GBps = 12", "bandwidth_GBps = 6")
    spec = load(text)
    route = spec.link("gpu", "gpu2")
    assert route.via == ("host",) and route.crossings == 2
    assert route.cost_s(6e3) == pytest.approx((10e-6 + 6e3 / 12e9) + (10e-6 + 6e3 / 6e9))
    assert spec.device("gpu2").device_string == "cuda:1"


def test_both_example_specs_load():
    mine = HardwareSpec.load(EXAMPLES / "this-machine.toml")
    assert [d.kind for d in mine.devices] == ["cpu"] and mine.device("epyc").cores == 2
    server = HardwareSpec.load(EXAMPLES / "cpu-gpu-fpga.toml")
    fpga = server.device("agilex")
    assert (fpga.dsp_blocks, fpga.ram_blocks, fpga.ram_block_bits, fpga.logic_ram_blocks,
            fpga.logic_ram_block_bits, fpga.clock_hz) == (4510, 7110, 20480, 24360, 640, 250e6)
    assert fpga.onchip_ram_bits == 7110 * 20480 + 24360 * 640
    assert server.link("h100", "agilex").via == ("xeon",)


def test_round_trip_through_a_dict_gives_an_equal_spec():
    spec = HardwareSpec.load(EXAMPLES / "cpu-gpu-fpga.toml")
    again = HardwareSpec.from_dict(spec.to_dict(), kinds=KINDS)
    assert again == spec


@pytest.mark.parametrize("edit, expected", [
    # missing fields
    (lambda t: t.replace("memory_GiB = 24\n", ""), "spec.toml: device 'gpu': missing field 'memory'"),
    (lambda t: t.replace("cores = 4\n", ""), "device 'host': missing field 'cores'"),
    (lambda t: t.replace('a = "host"\nb = "gpu"\nlatency_us = 10\n', 'a = "host"\nb = "gpu"\n'),
     "link #2 ('host'-'gpu'): missing field 'latency'"),
    # negative bandwidth: the key as written, the value, what is expected
    (lambda t: t.replace("bandwidth_GBps = 12", "bandwidth_GBps = -12"),
     "spec.toml: link #2 ('host'-'gpu'): bandwidth_GBps = -12 is invalid; expected a number > 0"),
    (lambda t: t.replace("memory_GiB = 24", "memory_GiB = -1"), "device 'gpu': memory_GiB = -1 is invalid"),
    (lambda t: t.replace("active_power_W = 300", "active_power_W = 5"), "active_power_w = 5"),
    # unknown kind (with a suggestion), unknown key (with a suggestion)
    (lambda t: t.replace('kind = "cuda"', 'kind = "cdua"'), "device 'gpu': kind = 'cdua' is unknown; expected one of"),
    (lambda t: t.replace("memory_GiB = 24", "memory_Gib = 24"),
     "unknown field 'memory_Gib'; did you mean 'memory_GiB'?"),
    (lambda t: t.replace("memory_GiB = 24", "memory_GiB = 24\nmemory_bytes = 5"), "give the same quantity twice"),
    # duplicate names, links to unknown devices, duplicate links, missing host link
    (lambda t: t.replace('name = "gpu"', 'name = "host"'), "name 'host' is already used by device #1"),
    (lambda t: t.replace('b = "gpu"', 'b = "gpu0"'), "device 'gpu0' is not in the spec"),
    (lambda t: t + '\n[[link]]\na = "gpu"\nb = "host"\nlatency_us = 1\nbandwidth_GBps = 1\n',
     "link #3 ('gpu'-'host') repeats link #2"),
    (lambda t: t.replace('a = "host"\nb = "gpu"', 'a = "gpu"\nb = "gpu"'),
     "device 'gpu' has no link to the host 'host'"),
    # FPGA fields on a GPU, type errors
    (lambda t: t.replace("memory_GiB = 24", "memory_GiB = 24\ndsp_blocks = 10"),
     "field(s) ['dsp_blocks'] are read by no backend of kind 'cuda'"),
    (lambda t: t.replace("cores = 4", 'cores = "four"'), "cores = 'four' is invalid; expected an integer >= 1"),
    (lambda t: t.replace("latency_us = 10", "latency_us = true"), "latency_us = True is invalid"),
])
def test_malformed_specs_are_rejected_with_a_clear_message(edit, expected):
    assert expected in error(edit(HOST + GPU))


def test_fpga_fields_are_required_for_an_fpga():
    text = HOST + """
[[device]]
name = "fpga0"
kind = "fpga"
memory_GiB = 8
idle_power_W = 20
active_power_W = 60
dsp_blocks = 4510
mem_bandwidth_GBps = 77

[[link]]
a = "host"
b = "fpga0"
latency_us = 10
bandwidth_GBps = 16
"""
    message = error(text)
    assert "device 'fpga0': missing field(s)" in message and "ram_blocks" in message and "clock_hz" in message


def test_structural_errors():
    assert "not valid TOML" in error("[[device]\nname=")
    assert "no device of kind 'cpu'" in error(GPU.split("[[link]]")[0])
    assert "has no within-device link" in error(HOST.split("[[link]]")[0])
    assert "host = 'gpu' is invalid; expected a device of kind 'cpu'" in error('host = "gpu"\n' + HOST + GPU)
    assert "unknown field 'devices'" in error("[[devices]]\nname = 'x'\n")
    with pytest.raises(SpecError, match="does not exist"):
        HardwareSpec.load(ROOT / "no-such-spec.toml")


def test_direct_construction_validates_too():
    with pytest.raises(SpecError, match="bandwidth_Bps = -1"):
        LinkSpec("a", "b", 0.0, -1)
    with pytest.raises(SpecError, match="name"):
        DeviceSpec("", "cpu", 1, 0, 1, cores=1)
    with pytest.raises(SpecError, match="threads = 2 is invalid; expected an integer >= cores"):
        DeviceSpec("c", "cpu", 1, 0, 1, cores=4, threads=2)


def test_kinds_of_registered_backends_are_accepted():
    text = (HOST + GPU).replace('kind = "cuda"', 'kind = "npu"').replace('"gpu"', '"npu0"')
    assert "kind = 'npu' is unknown" in error(text)
    spec = HardwareSpec.from_toml(text, kinds=KINDS + ("npu",))
    assert spec.device("npu0").device_string == "npu:0"


def test_detect_describes_this_machine_with_assumptions_listed():
    spec = detect_hardware()
    host = spec.host_device
    assert host.kind == "cpu" and host.cores >= 1 and spec.source == "detected"
    assert "idle_power_w" in host.assumed
    assert spec.link(host.name, host.name).latency_s > 0
