"""Fill the Primitive Device Assignment Matrix: one row per device of a hardware spec.

For each device, in order, the first source that answers wins:

1. ``profiler(device, workload)`` if one is given (measurement on a present
   device; returns a row or ``None``);
2. the backend of the device's kind, when it is an :class:`AnalyticCostModel`
   (defines ``analytic_cells(device, workload)``; the FPGA backend brings the
   paper's Eq. 2-6 model this way; the composer never imports a plugin);
3. the core's default model, the host CPU's (:mod:`.analytic`), for a device of kind ``cpu``
   whose backend models nothing (the core's own host code paths; every other kind is its
   backend's to model: the GPU model lives in the CUDA plugin, ``pearl_cuda.model``);
4. otherwise an empty row whose notes say that nothing models this kind, so the
   device takes part in no feasible candidate.

A backend may declare the extra :class:`~pearl_core.composer.spec.DeviceSpec` fields its model reads
(``spec_fields``, e.g. the FPGA backend's resources): a device that lacks one gets an empty row whose
note names the fields and the fix, and its model is not asked (:func:`missing_spec_fields`).

Two rules apply to every row, whichever source answered:

* **Fanout.** When the workload's prioritized replay needs a sum-tree fanout
  above the :attr:`~pearl_core.backend.Backend.max_fanout` of the backend that
  drives the device (its spec entry's ``backend``, else
  :func:`~pearl_core.composer.backends.backend_for_kind`: the backend the
  runtime builds the tree with), the device's replay-manager
  cells (stand-alone and co-located) are empty and a note says why and how to
  fix it (:func:`limit_fanout`); its learner cell stays.
* **A failing backend model.** A backend whose ``analytic_cells`` raises (or
  returns something that is not the device's row) gets an empty row for that
  device, with a note naming the backend, the exception and the fix, and a
  logged warning; the other devices are planned as usual
  (:func:`failed_row`). The same holds for a profiler that raises: the
  profiler of :mod:`.profiling` re-raises what ``measure_primitive``, the deprecated
  ``profile_cells`` (or ``settings``) raised, marked with :func:`blame`, and the row names that backend.

A backend is a cost model by having the methods, not by subclassing: the
:class:`~pearl_core.backend.Backend` ABC knows nothing of the composer, and the
two protocols below say what the composer calls. :func:`analytic_row` and
:func:`profiled_row` call them on any backend (``None`` when it has no such method).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

from pearl_core.composer.analytic import cpu_row
from pearl_core.composer.backends import backend_for_kind
from pearl_core.composer.matrix import CO_CELLS, RM_CELLS, AssignmentMatrix, DeviceRow
from pearl_core.composer.spec import DeviceSpec, HardwareSpec
from pearl_core.composer.workload import Workload
from pearl_core.errors import SpecError

if TYPE_CHECKING:
    from pearl_core.plugins import PluginRegistry

__all__ = ["BLAME_ATTR", "PROFILE_CELLS_DEPRECATED", "AnalyticCostModel", "CostModel", "ProfiledCostModel", "Profiler",
           "analytic_row", "blame", "missing_spec_fields",
           "exceeds_fanout", "failed_row", "fanout_note", "fill_matrix", "limit_fanout", "profiled_row",
           "row_for_device"]

_log = logging.getLogger(__name__)

#: ``profiler(device, workload) -> DeviceRow | None``.
Profiler = Callable[[DeviceSpec, Workload], "DeviceRow | None"]


@runtime_checkable
class AnalyticCostModel(Protocol):
    """A backend that models a device of its kind as a hardware spec describes it (present or not)."""

    def analytic_cells(self, device: DeviceSpec, workload: Workload) -> DeviceRow | None:
        """The device's row, with ``"analytic"`` cells, or ``None`` to leave it to the core's default model.

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
    """A backend that measures a *present* device of its kind on synthetic data, whole rows at a time.

    Deprecated: the composer owns what is measured and asks ``measure_primitive`` for one primitive at a
    time (:class:`~pearl_core.composer.hostprofile.MeasuringBackend`, :mod:`.deviceprofile`); a backend
    with ``measure_primitive`` is never asked ``profile_cells`` (see :func:`profiled_row`).
    """

    def profile_cells(self, device: DeviceSpec, workload: Workload, *, iterations: int = 1000,
                      warmup: int = 50) -> DeviceRow | None:
        """The device's row, with ``"profiled"`` cells (compute only) and the tuning found in ``config``.

        Called only when the backend is available and detects the spec's device;
        ``None`` leaves the device to :meth:`AnalyticCostModel.analytic_cells`.
        ``iterations`` timed runs per cell (medians), after ``warmup`` untimed
        ones. The composer caches the row on disk, keyed by backend name and
        version, the backend's ``settings()``, device and workload, so implementations need not cache.
        A raised exception leaves this device out of the plan (its row is empty, with a note), not
        the others.
        """
        ...


@runtime_checkable
class CostModel(AnalyticCostModel, ProfiledCostModel, Protocol):
    """A backend that is both cost models (deprecated with :class:`ProfiledCostModel`)."""


def analytic_row(backend: Any, device: DeviceSpec, workload: Workload) -> DeviceRow | None:
    """``backend.analytic_cells(device, workload)``, or ``None`` when the backend has no such method."""
    method = getattr(backend, "analytic_cells", None)
    return None if method is None else method(device, workload)


#: The note a row measured through the deprecated ``profile_cells`` carries (and the warning logged once per backend).
PROFILE_CELLS_DEPRECATED = ("measured through the backend's profile_cells, which is deprecated: the composer now "
                            "chooses what to measure and asks measure_primitive(device, workload, MeasureRequest) -> "
                            "PrimitiveCost (docs/writing-a-plugin.md, 'Cost models'); profile_cells will be removed "
                            "at the next major plugin contract. Fix: implement measure_primitive instead")
_warned_profile_cells: set[str] = set()


def profiled_row(backend: Any, device: DeviceSpec, workload: Workload, *, iterations: int = 1000,
                 warmup: int = 50) -> DeviceRow | None:
    """``backend.profile_cells(...)``, or ``None`` when the backend has no such method.

    ``profile_cells`` is deprecated (:data:`PROFILE_CELLS_DEPRECATED`): still called for a backend that has
    no ``measure_primitive``, with a warning logged once per backend class and the note on the row it returns.
    """
    method = getattr(backend, "profile_cells", None)
    if method is None:
        return None
    who = f"{type(backend).__module__}.{type(backend).__qualname__}"
    if who not in _warned_profile_cells:
        _warned_profile_cells.add(who)
        _log.warning("backend %s (%s): %s.", getattr(backend, "name", "?"), who, PROFILE_CELLS_DEPRECATED)
    row = method(device, workload, iterations=iterations, warmup=warmup)
    if isinstance(row, DeviceRow) and PROFILE_CELLS_DEPRECATED not in row.notes:
        row = dataclasses.replace(row, notes=(*row.notes, PROFILE_CELLS_DEPRECATED))
    return row


def row_for_device(spec: HardwareSpec, device: DeviceSpec, workload: Workload, *,
                   registry: "PluginRegistry | None" = None, profiler: Profiler | None = None) -> DeviceRow:
    """The matrix row of one device (sources tried in the order of the module docstring, then the fanout rule).

    The device's backend is the one its spec entry names (``backend = "..."``), else the one of its kind.
    """
    bname, backend = backend_for_kind(device.kind, registry, getattr(device, "backend", None))
    return limit_fanout(_source_row(spec, device, workload, bname, backend, profiler), workload, bname, backend)


def _source_row(spec: HardwareSpec, device: DeviceSpec, workload: Workload, bname: str, backend: Any,
                profiler: Profiler | None) -> DeviceRow:
    if profiler is not None:
        try:
            row = profiler(device, workload)
            if row is not None:
                return _checked(row, device, "the profiler")
        except Exception as exc:  # noqa: BLE001 - a failed measurement must not stop planning
            who, method = getattr(exc, BLAME_ATTR, (None, "the profiler"))
            return failed_row(device, who, method, exc)
    if backend is not None:
        try:
            missing = missing_spec_fields(bname, backend, device)
        except SpecError as exc:
            return failed_row(device, bname, "spec_fields", exc)
        if missing:
            return DeviceRow(device.name, device.kind, notes=(
                f"backend {bname!r} reads field(s) {missing} of this device to model it (its spec_fields), but the "
                f"spec leaves them out. Fix: add them to the device's [[device]] table "
                f"(docs/hardware-spec.md).",))
        try:
            row = analytic_row(backend, device, workload)
            if row is not None:
                row = _checked(row, device, f"backend {bname!r}.analytic_cells")
        except Exception as exc:  # noqa: BLE001 - a plugin's model bug must not stop planning
            return failed_row(device, bname, "analytic_cells", exc)
        if row is not None:
            return row
    if device.kind == "cpu":
        return cpu_row(device, workload, is_host=device.name == spec.host)
    hint = f"backend {bname!r} has no analytic model" if backend is not None else f"no backend for kind {device.kind!r}"
    return DeviceRow(device.name, device.kind, notes=(f"no cost model for this device: {hint}",))


def missing_spec_fields(bname: str, backend: Any, device: DeviceSpec) -> list[str]:
    """The fields of ``device`` that ``backend`` declares it reads (``spec_fields``) and the spec leaves out.

    A backend declares the extra :class:`~pearl_core.composer.spec.DeviceSpec` fields its model needs (the FPGA
    backend: its resources, ``dsp_blocks``, ``ram_blocks``, ...); the core reads none of them itself.

    Raises:
        SpecError: ``spec_fields`` is not a tuple of DeviceSpec field names.
    """
    fields = getattr(backend, "spec_fields", ())
    known = {f.name for f in dataclasses.fields(DeviceSpec)}
    if not isinstance(fields, (tuple, list)) or not all(isinstance(f, str) and f in known for f in fields):
        raise SpecError(f"backend {bname!r}: spec_fields = {fields!r:.200} is invalid; expected a tuple of "
                        f"DeviceSpec field names (e.g. ('clock_hz',)), from {sorted(known)}.")
    return [f for f in fields if getattr(device, f) is None]


#: Attribute of an exception naming ``(backend name, method)`` that raised it (set by :func:`blame`).
BLAME_ATTR = "pearl_blame"


def blame(exc: BaseException, bname: str, method: str) -> BaseException:
    """Record on ``exc`` that backend ``bname``'s ``method`` raised it, and return it (re-raise it as it is).

    A profiler that calls a backend uses it, so that :func:`fill_matrix` names
    the right backend in the failed row's note; the exception's type and
    message are unchanged for any other caller.
    """
    try:
        setattr(exc, BLAME_ATTR, (bname, method))
        exc.add_note(f"raised by backend {bname!r} in {method}")
    except (AttributeError, TypeError):  # an exception type that takes no attributes
        pass
    return exc


def failed_row(device: DeviceSpec, bname: str | None, method: str, exc: BaseException) -> DeviceRow:
    """An empty row for ``device`` whose note says that backend ``bname``'s ``method`` raised ``exc``; logs a warning.

    ``bname`` is ``None`` for a profiler that named no backend (see :func:`blame`).
    The device then takes part in no feasible candidate; the other devices are planned as usual.
    """
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    who = f"backend {bname!r}" if bname is not None else "the profiler"
    where = f" in {method}" if bname is not None else ""
    _log.warning("%s%s raised %s for device %r; the device is left out of the plan", who, where, what, device.name)
    fix = ("report it to the backend's authors or update the plugin (`pearl plugins` shows its version)"
           if bname is not None else "fix the profiler, or plan without it")
    return DeviceRow(device.name, device.kind, notes=(
        f"{who} failed to model this device ({what}){where}; expected a DeviceRow for {device.name!r}. "
        f"The device is left out of the plan. Fix: {fix}.",))


def fanout_note(bname: str, max_fanout: int, fanout: int) -> str:
    """Why a device's replay-manager cells are empty: the workload's fanout exceeds the backend's ``max_fanout``."""
    return (f"no replay manager here: backend {bname!r} supports sum-tree fanouts up to {max_fanout} (its "
            f"max_fanout) but the workload's fanout is {fanout}. Fix: use fanout <= {max_fanout} (e.g. "
            f"set_replay(fanout={max_fanout}) or --fanout {max_fanout}), or a backend without this limit.")


def exceeds_fanout(backend: Any, workload: Workload) -> int | None:
    """The backend's ``max_fanout`` when the workload's sum tree is wider than it, else ``None``.

    Uniform replay has no tree, so no fanout limit applies to it.
    """
    limit = getattr(backend, "max_fanout", None)
    if (workload.replay != "prioritized" or limit is None or isinstance(limit, bool)
            or not isinstance(limit, int)):
        return None
    return limit if workload.fanout > limit else None


def limit_fanout(row: DeviceRow, workload: Workload, bname: str, backend: Any) -> DeviceRow:
    """``row`` with its RM and co-located cells emptied when ``backend`` cannot run the workload's fanout.

    The note (:func:`fanout_note`) goes first, so Algorithm 1's reason for the
    infeasible candidates starts with it. A row already carrying the same note
    is returned as it is; the learner cell is always kept.
    """
    limit = exceeds_fanout(backend, workload)
    if limit is None:
        return row
    note = fanout_note(bname, limit, workload.fanout)
    if note in row.notes:
        return row
    empty: dict[str, Any] = {name: None for name in RM_CELLS + CO_CELLS}
    return dataclasses.replace(row, **empty, notes=(note, *row.notes))


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
