"""Profiled cost cells for present devices, cached on disk.

:func:`profiler_for` returns the ``profiler`` hook of :func:`~pearl_core.composer.costs.fill_matrix`:
for each spec device that a backend *available here* detects, it asks that
backend's :meth:`~pearl_core.backend.Backend.profile_cells` for measured cells
and caches the row on disk, keyed by backend name and version, device and
workload. Devices the spec describes but this machine lacks get ``None`` (the
analytic models answer for them).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pearl_core.composer.costs import Profiler
from pearl_core.composer.spec import HardwareSpec

if TYPE_CHECKING:
    from pearl_core.plugins import PluginRegistry

__all__ = ["profiler_for"]


def profiler_for(spec: HardwareSpec, *, registry: "PluginRegistry | None" = None, iterations: int = 1000,
                 cache_dir: str | Path | None = None, use_cache: bool = True) -> Profiler:
    """The profiling hook for ``spec`` (work in progress: profiles nothing yet)."""

    def profile(device, workload):  # noqa: ANN001, ANN202
        return None

    return profile
