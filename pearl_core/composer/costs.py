"""Fill the Primitive Device Assignment Matrix: one row per device of a hardware spec.

For each device, in order, the first source that answers wins:

1. ``profiler(device, workload)`` if one is given (measurement on a present
   device; returns a row or ``None``);
2. the backend of the device's kind, when it is an :class:`AnalyticCostModel`
   (defines ``analytic_cells(device, workload)``; the FPGA backend brings the
   paper's Eq. 2-6 model this way; the composer never imports a plugin);
3. the core's analytic models for ``cpu`` and ``cuda`` (:mod:`.analytic`);
4. otherwise an empty row whose notes say that nothing models this kind, so the
   device takes part in no feasible candidate.

A backend is a cost model by having the methods, not by subclassing: the
:class:`~pearl_core.backend.Backend` ABC knows nothing of the composer, and the
two protocols below say what the composer calls. :func:`analytic_row` and
:func:`profiled_row` call them on any backend (``None`` when it has no such method).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

from pearl_core.composer.analytic import cpu_row, gpu_row
from pearl_core.composer.backends import backend_for_kind
from pearl_core.composer.matrix import AssignmentMatrix, DeviceRow
from pearl_core.composer.spec import DeviceSpec, HardwareSpec
from pearl_core.composer.workload import Workload
from pearl_core.errors import SpecError

if TYPE_CHECKING:
    from pearl_core.plugins import PluginRegistry

__all__ = ["AnalyticCostModel", "CostModel", "ProfiledCostModel", "Profiler", "analytic_row", "fill_matrix",
           "profiled_row", "row_for_device"]

#: ``profiler(device, workload) -> DeviceRow | None``.
Profiler = Callable[[DeviceSpec, Workload], "DeviceRow | None"]


@runtime_checkable
class AnalyticCostModel(Protocol):
    """A backend that models a device of its kind as a hardware spec describes it (present or not)."""

    def analytic_cells(self, device: DeviceSpec, workload: Workload) -> DeviceRow | None:
        """The device's row, with ``"analytic"`` cells, or ``None`` to leave it to the core's models.

        Called even when the backend is unavailable here, so it must not touch a
        device. Cells are per-iteration seconds and watts of the RM operations,
        the learner and both co-located, **excluding** communication (Algorithm 1
        adds it from the spec's links). A cell is ``None`` (with the reason in
        ``notes``) when the primitive cannot run there, e.g. RM and learner do
        not fit one FPGA together. The row's ``device`` is ``device.name``.
        """
        ...


@runtime_checkable
class ProfiledCostModel(Protocol):
    """A backend that measures a *present* device of its kind on synthetic data."""

    def profile_cells(self, device: DeviceSpec, workload: Workload, *, iterations: int = 1000,
                      warmup: int = 50) -> DeviceRow | None:
        """The device's row, with ``"profiled"`` cells (compute only) and the tuning found in ``config``.

        Called only when the backend is available and detects the spec's device;
        ``None`` leaves the device to :meth:`AnalyticCostModel.analytic_cells`.
        ``iterations`` timed runs per cell (medians), after ``warmup`` untimed
        ones. The composer caches the row on disk, keyed by backend name and
        version, device and workload, so implementations need not cache.
        """
        ...


@runtime_checkable
class CostModel(AnalyticCostModel, ProfiledCostModel, Protocol):
    """A backend that is both cost models (the CPU and CUDA backends are)."""


def analytic_row(backend: Any, device: DeviceSpec, workload: Workload) -> DeviceRow | None:
    """``backend.analytic_cells(device, workload)``, or ``None`` when the backend has no such method."""
    method = getattr(backend, "analytic_cells", None)
    return None if method is None else method(device, workload)


def profiled_row(backend: Any, device: DeviceSpec, workload: Workload, *, iterations: int = 1000,
                 warmup: int = 50) -> DeviceRow | None:
    """``backend.profile_cells(...)``, or ``None`` when the backend has no such method."""
    method = getattr(backend, "profile_cells", None)
    return None if method is None else method(device, workload, iterations=iterations, warmup=warmup)


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
            row = analytic_row(backend, device, workload)
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
