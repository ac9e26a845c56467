"""The CPU backend: a native n-ary sum tree (C++, pybind11, threads)."""

from __future__ import annotations

import os
import platform
from typing import Any

from pearl_core.backend import Availability, Backend, DeviceInfo
from pearl_core.sumtree import SumTree


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


class CpuBackend(Backend):
    """Host CPU backend. Sum-tree options: ``threads`` (default: all cores)."""

    name = "cpu"
    device_kind = "cpu"

    def availability(self) -> Availability:
        try:
            from pearl_cpu import _sumtree  # noqa: F401 - the compiled extension
        except ImportError as exc:
            return Availability.no(
                f"the native extension pearl_cpu._sumtree failed to import ({exc}); "
                "reinstall pearl-cpu so it is compiled for this Python"
            )
        return Availability.yes()

    def devices(self) -> list[DeviceInfo]:
        if not self.availability().available:
            return []
        cores = os.cpu_count() or 1
        details = {"cores": cores, "memory_bytes": _memory_bytes(), "machine": platform.machine()}
        return [DeviceInfo("cpu0", "cpu", self.name, _cpu_model(), details)]

    def make_sum_tree(self, capacity: int, fanout: int = 16, **options: Any) -> SumTree:
        from pearl_cpu.sumtree import CpuSumTree

        threads = options.pop("threads", None)
        if options:
            raise TypeError(f"cpu backend: unknown sum-tree options {sorted(options)}; known: ['threads']")
        return CpuSumTree(capacity, fanout, threads=threads)
