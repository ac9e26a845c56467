"""pearl_core.composer.spec_rules: a hardware spec's values are bounded so that planning stays finite and fast:
normal floats, rates of at least one per second, short device names, at most MAX_DEVICES devices."""

from __future__ import annotations

import time

import pytest

from pearl_core.composer.spec import DeviceSpec, HardwareSpec, LinkSpec
from pearl_core.composer.spec_rules import MAX_DEVICES, MAX_NAME_CHARS
from pearl_core.errors import SpecError

SPEC = '''
host = "{name}"
[[device]]
name = "{name}"
kind = "cpu"
cores = 4
memory_GiB = 8
idle_power_W = 10
active_power_W = 50
mem_bandwidth_GBps = 10
[[link]]
a = "{name}"
b = "{name}"
latency_us = {latency}
bandwidth_GBps = {bandwidth}
'''


def load(name="h", latency="1", bandwidth="10"):
    return HardwareSpec.from_toml(SPEC.format(name=name, latency=latency, bandwidth=bandwidth), source="s.toml")


def test_the_template_loads():
    assert load().link("h", "h").bandwidth_Bps == 10e9


@pytest.mark.parametrize("bandwidth,text", [
    ("1e-320", "bandwidth_GBps = 1e-320 is invalid; expected a number > 0 (at least 2.22507e-308"),
    ("1e-300", "bandwidth_Bps = 1e-291 is invalid; expected at least 1 byte/s"),
    ("1e300", "bandwidth_GBps = 1e+300 is invalid"),
])
def test_a_bandwidth_that_is_no_rate_is_refused_by_name(bandwidth, text):
    with pytest.raises(SpecError, match="Fix:|expected") as info:
        load(bandwidth=bandwidth)
    assert text in str(info.value) and "s.toml" in str(info.value)


def test_a_subnormal_latency_is_refused():
    with pytest.raises(SpecError, match=r"latency_us = 1e-320 is invalid; expected a number >= 0"):
        load(latency="1e-320")


def test_a_huge_device_name_is_refused_at_once():
    start = time.monotonic()
    with pytest.raises(SpecError) as info:
        load(name="g" * 100_000)
    assert time.monotonic() - start < 1
    text = str(info.value)
    assert f"has 100000 characters; expected at most {MAX_NAME_CHARS}" in text and "Fix:" in text
    assert len(text) < 1000  # the message quotes the start of the name, not all of it


def test_a_spec_with_too_many_devices_is_refused_before_any_planning():
    n = 300
    devices = [DeviceSpec("xeon", "cpu", 2**38, 60, 185, cores=16)] + [
        DeviceSpec(f"gpu{i}", "cuda", 2**36, 50, 350, mem_bandwidth_Bps=2e12) for i in range(n - 1)]
    links = [LinkSpec("xeon", f"gpu{i}", 1e-5, 2.4e10) for i in range(n - 1)]
    start = time.monotonic()
    with pytest.raises(SpecError, match=rf"the spec lists 300 devices; PEARL plans for at most {MAX_DEVICES}"):
        HardwareSpec(tuple(devices), (LinkSpec("xeon", "xeon", 2e-6, 2e10), *links))
    assert time.monotonic() - start < 2


def test_routes_are_found_without_scanning_every_link():
    """A spec at the limit: every route of the O(devices^2) planning search is a dict lookup."""
    n = MAX_DEVICES
    devices = [DeviceSpec("xeon", "cpu", 2**38, 60, 185, cores=16)] + [
        DeviceSpec(f"gpu{i}", "cuda", 2**36, 50, 350, mem_bandwidth_Bps=2e12) for i in range(n - 1)]
    spec = HardwareSpec(tuple(devices), (LinkSpec("xeon", "xeon", 2e-6, 2e10),
                                         *(LinkSpec("xeon", f"gpu{i}", 1e-5, 2.4e10) for i in range(n - 1))))
    start = time.monotonic()
    for a in spec.devices:
        for b in spec.devices:
            spec.link(a.name, b.name)
    assert time.monotonic() - start < 2
    assert spec.link("gpu1", "gpu2").via == ("xeon",) and spec.link("gpu3", "xeon").a == "gpu3"
