"""Registries of hand-written backends for the composer and kit tests, and the third-party kind ``tst``
(a model of its own, a sum tree no wider than 8) several of them plan with."""

from __future__ import annotations

import types

from pearl_core.backend import Availability, Backend
from pearl_core.composer import CostCell, DeviceRow, DeviceSpec
from pearl_core.hookspecs import hookimpl
from pearl_core.plugins import PluginRegistry


def registry_with(*backends) -> PluginRegistry:
    """A registry holding exactly ``backends`` (each registered by a plugin named after it)."""
    reg = PluginRegistry(autoload=False)
    for cls in backends:
        @hookimpl
        def pearl_register_backends(register, cls=cls):
            register(cls)

        reg.register_plugin(types.SimpleNamespace(pearl_register_backends=pearl_register_backends), name=cls.name)
    return reg


def cpu(name="c") -> DeviceSpec:
    return DeviceSpec(name, "cpu", 2**30, 10, 50, cores=4, launch_latency_s=5e-6, mem_latency_s=1e-7,
                      peak_flops=100e9, mem_bandwidth_Bps=40e9)


def full_row(device, source="analytic", latency=1e-6) -> DeviceRow:
    cell = CostCell(latency, device.active_power_w, source)
    return DeviceRow(device.name, device.kind, cell, cell, cell, cell, cell, cell, cell, cell)


class TstBackend(Backend):
    """A third-party kind with its own analytic model and a sum tree no wider than 8."""

    name = "tst"
    device_kind = "tst"
    max_fanout = 8

    def availability(self):
        return Availability.no("no tst device in CI")

    def devices(self):
        return []

    def make_sum_tree(self, capacity, fanout=16, **options):
        raise NotImplementedError

    def analytic_cells(self, device, workload):
        return full_row(device)
