"""Fill the Primitive Device Assignment Matrix: one row per device of a hardware spec.

For each device, in order, the first source that answers wins:

1. ``profiler(device, workload)`` if one is given (measurement on a present
   device; returns a row or ``None``);
2. the backend of the device's kind: ``Backend.analytic_cells(device, workload)``
   (the FPGA backend brings the paper's Eq. 2-6 model this way; the composer
   never imports a plugin);
3. the core's analytic models for ``cpu`` and ``cuda`` (:mod:`.analytic`);
4. otherwise an empty row whose notes say that nothing models this kind, so the
   device takes part in no feasible candidate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from pearl_core.composer.analytic import cpu_row, gpu_row
from pearl_core.composer.backends import backend_for_kind
from pearl_core.composer.matrix import AssignmentMatrix, DeviceRow
from pearl_core.composer.spec import DeviceSpec, HardwareSpec
from pearl_core.composer.workload import Workload
from pearl_core.errors import SpecError

if TYPE_CHECKING:
    from pearl_core.plugins import PluginRegistry

__all__ = ["Profiler", "fill_matrix", "row_for_device"]

#: ``profiler(device, workload) -> DeviceRow | None``.
Profiler = Callable[[DeviceSpec, Workload], "DeviceRow | None"]


def row_for_device(spec: HardwareSpec, device: DeviceSpec, workload: Workload, *,
                   registry: "PluginRegistry | None" = None, profiler: Profiler | None = None) -> DeviceRow:
    """The matrix row of one device (sources tried in the order of the module docstring)."""
    if profiler is not None:
        row = profiler(device, workload)
        if row is not None:
            return _checked(row, device, "the profiler")
    bname, backend = backend_for_kind(device.kind, registry)
    if backend is not None:
        try:
            row = backend.analytic_cells(device, workload)
        except Exception as exc:  # noqa: BLE001 - a plugin's model bug must not stop planning
            return DeviceRow(device.name, device.kind, notes=(
                f"backend {bname!r} failed to model this device ({type(exc).__name__}: {exc})",))
        if row is not None:
            return _checked(row, device, f"backend {bname!r}")
    if device.kind == "cpu":
        return cpu_row(device, workload, is_host=device.name == spec.host)
    if device.kind == "cuda":
        return gpu_row(device, workload)
    hint = f"backend {bname!r} has no analytic model" if backend is not None else f"no backend for kind {device.kind!r}"
    return DeviceRow(device.name, device.kind, notes=(f"no cost model for this device: {hint}",))


def _checked(row: DeviceRow, device: DeviceSpec, who: str) -> DeviceRow:
    if not isinstance(row, DeviceRow) or row.device != device.name:
        raise SpecError(f"{who} returned {row!r} for device {device.name!r}; expected a DeviceRow with "
                        f"device={device.name!r}.")
    return row


def fill_matrix(spec: HardwareSpec, workload: Workload, *, registry: "PluginRegistry | None" = None,
                profiler: Profiler | None = None) -> AssignmentMatrix:
    """One row per spec device, compute-only cells (``comm_inclusive=False``)."""
    rows = tuple(row_for_device(spec, d, workload, registry=registry, profiler=profiler) for d in spec.devices)
    return AssignmentMatrix(rows, comm_inclusive=False)
