"""Device identity comes from detection, never from spec order (issue 43): ``composer/spec.py`` gives a device
that names its detected device (``options.detected_as``) that device's index, and ``composer/here.py`` never
lets a described, undetected (what-if) device pass as a real one."""

from __future__ import annotations

import types

import pytest

from pearl_core.backend import Availability, Backend, DeviceInfo
from pearl_core.composer.here import not_detected
from pearl_core.composer.spec import DeviceSpec, HardwareSpec, LinkSpec
from pearl_core.errors import SpecError
from pearl_core.hookspecs import hookimpl
from pearl_core.plugins import PluginRegistry


class OneCard(Backend):
    """One detected accelerator, ``acc:0`` (a card profiled at ~73k samples/s in the issue)."""

    name = "acc"
    device_kind = "acc"

    def availability(self):
        return Availability.yes()

    def devices(self):
        return [DeviceInfo("acc:0", "acc", self.name, "the real card")]

    def make_sum_tree(self, capacity, fanout=16, **options):
        raise NotImplementedError


def _registry() -> PluginRegistry:
    reg = PluginRegistry(autoload=False)

    @hookimpl
    def pearl_register_backends(register):
        register(OneCard)

    reg.register_plugin(types.SimpleNamespace(pearl_register_backends=pearl_register_backends), name="acc")
    return reg


def _spec(*accelerators: DeviceSpec) -> HardwareSpec:
    host = DeviceSpec("host", "cpu", 2**32, 5.0, 50.0, cores=4)
    links = (LinkSpec("host", "host", 1e-6, 1e10),
             *(LinkSpec("host", d.name, 1e-5, 1e10) for d in accelerators))
    return HardwareSpec((host, *accelerators), links)


def _acc(name: str, **options) -> DeviceSpec:
    return DeviceSpec(name, "acc", 2**34, 30.0, 300.0, mem_bandwidth_Bps=1e12, options=options)


def test_a_what_if_device_listed_first_does_not_take_the_detected_devices_index():
    spec = _spec(_acc("h100_whatif"), _acc("card", detected_as="acc:0"))
    strings = {d.name: d.device_string for d in spec.devices}
    assert strings == {"host": "cpu", "card": "acc:0", "h100_whatif": "acc:1"}  # main: h100 acc:0, card acc:1


def test_two_devices_claiming_one_detected_device_are_refused():
    with pytest.raises(SpecError, match="index = 0 is already used by"):
        _spec(_acc("a", detected_as="acc:0"), _acc("b", detected_as="acc:0"))


def test_specs_in_detection_order_keep_their_indices():
    spec = _spec(_acc("card", detected_as="acc:0"), _acc("h100_whatif"))
    assert [d.index for d in spec.devices[1:]] == [0, 1]


def test_only_the_device_detection_matched_is_the_real_one():
    reg = _registry()
    spec = _spec(_acc("h100_whatif"), _acc("card", detected_as="acc:0"))
    by = {d.name: d for d in spec.devices}
    assert not_detected(by["card"], reg) is None
    why = not_detected(by["h100_whatif"], reg)
    assert why is not None and "what-if device" in why and "detected_as" in why
    # a device whose name is the detected one's is that device, but not at another index
    assert not_detected(_spec(_acc("acc:0")).devices[1], reg) is None
    moved = DeviceSpec("acc:0", "acc", 2**34, 30.0, 300.0, mem_bandwidth_Bps=1e12, index=3)
    why = not_detected(moved, reg)
    assert why is not None and "index 3" in why and "set 0" in why


def test_a_plan_on_a_what_if_device_is_refused_even_where_its_device_string_is_present():
    from pearl_core.composer.here import whatif_refusals

    reg = _registry()
    spec = _spec(_acc("h100_whatif"))  # acc:0 by order, and acc:0 is present here: it must not pass as the card
    assert spec.device("h100_whatif").device_string == "acc:0"
    composer = types.SimpleNamespace(spec=spec, registry=reg)
    on_card = types.SimpleNamespace(rm_device="host", learner_device="h100_whatif", ds_device="h100_whatif")
    lines = whatif_refusals(composer, on_card)
    assert len(lines) == 1 and lines[0].startswith("h100_whatif: ") and "what-if device" in lines[0]
    on_host = types.SimpleNamespace(rm_device="host", learner_device="host", ds_device="host")
    assert whatif_refusals(composer, on_host) == []
    named = _spec(_acc("card", detected_as="acc:0"))
    real = types.SimpleNamespace(rm_device="host", learner_device="card", ds_device="host")
    assert whatif_refusals(types.SimpleNamespace(spec=named, registry=reg), real) == []
