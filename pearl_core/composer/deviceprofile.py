"""The composer's policy for measuring a present accelerator (a device other than the host) primitive by primitive.

A backend that measures single primitives (``measure_primitive``, the
:class:`~pearl_core.composer.hostprofile.MeasuringBackend` protocol: the CUDA backend) is asked, for a
device of its kind that this machine has and that is not the spec's host, three
:class:`~pearl_core.composer.matrix.MeasureRequest` s, and :func:`profile_device` builds the device's
:class:`~pearl_core.composer.matrix.DeviceRow` from the :class:`~pearl_core.composer.matrix.PrimitiveCost`
answers (``"profiled"`` cells, compute only):

* ``replay`` (``iterations`` timed calls after ``warmup``): the replay manager alone, its
  ``sample_s`` / ``update_s`` / ``insert_s`` are the ``rm_*`` cells;
* ``learner`` (``max(10, min(iterations, 200))`` after ``min(warmup, 20)``: a learner step costs far more
  than a replay call): the ``learner`` cell;
* ``worker_loop`` (as many): the setting-2 iteration as the device runs it; each part is its co-located
  cell (``co_rm_*``, ``co_learner``), and Algorithm 1 takes ``sample + max(update + insert, learner)``: parts
  that overlap (the GPU's streams) are reported as measured; a device that runs them one after another (one
  process drives it) reports the learner part as ``learner + update + insert``.

An accelerator's work is spread over the device by its kernels, so every request asks for ``threads = 1``
(the backend tunes what it tunes, e.g. CUDA streams, and reports it in ``details``). A cell's power is the
``power_w`` the backend read, else the spec's ``active_power_w`` (a busy accelerator draws near its board
power). The backend's ``details`` go to the row's ``config`` and its ``notes`` to the row's notes.
A backend answers ``None`` to what it cannot measure here. ``None`` to all three (e.g. its device library is
missing): the device is modelled (``analytic_cells``), as if it were absent. ``None`` to some: the row holds
what was measured (``"profiled"``) and, for the rest, the cells of the backend's ``analytic_cells``
(``"analytic"``; empty when it has no model), and a note says which. Any other answer that is not the
:class:`PrimitiveCost` asked for is a :class:`~pearl_core.errors.SpecError` naming the backend; the composer
leaves that device out of the plan (:func:`~pearl_core.composer.costs.failed_row`), not the others.

The host is measured by :func:`~pearl_core.composer.hostprofile.profile_host` (thread counts, host
variants, calibration runs); a second device of the host's kind is modelled, not measured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pearl_core.composer.budget import ProbePlan
from pearl_core.composer.costs import analytic_row
from pearl_core.composer.hostprofile import checked_cost
from pearl_core.composer.matrix import CostCell, DeviceRow, MeasureRequest, PrimitiveCost
from pearl_core.composer.timing import ProfileBudget
from pearl_core.errors import PluginTimeoutError, SpecError

if TYPE_CHECKING:
    from pearl_core.composer.spec import DeviceSpec
    from pearl_core.composer.workload import Workload

__all__ = ["LEARNER_MAX_ITERATIONS", "PROBE_WEIGHTS", "profile_device"]

#: Timed learner steps at most per learner or worker-loop request (a replay call is far cheaper than a step).
LEARNER_MAX_ITERATIONS = 200


#: The accelerator's probes and their weights in its part of the profiling budget (the learner's probe runs
#: the stream search, the graph and the real trainer).
PROBE_WEIGHTS = {"replay": 1.0, "learner": 2.0, "worker_loop": 1.0}


def profile_device(bname: str, backend: Any, device: "DeviceSpec", workload: "Workload", *, iterations: int = 1000,
                   warmup: int = 50, budget: "ProfileBudget | None" = None) -> DeviceRow | None:
    """The accelerator's row from the backend's ``replay``, ``learner`` and ``worker_loop`` measurements,
    or ``None`` when the backend cannot measure it here (its first answer is ``None``).

    ``budget``: the device's part of the profiling budget (:mod:`pearl_core.composer.budget`; ``None``: no
    bound). Each request's ``budget_s`` is its probe's share; a probe left without a share, or that overruns
    its deadline, is not measured: its cells are the backend's analytic model's and the notes say so."""
    learn_iters, learn_warm = max(10, min(iterations, LEARNER_MAX_ITERATIONS)), min(warmup, 20)
    plan = ProbePlan(budget if budget is not None else ProfileBudget(1e9), PROBE_WEIGHTS)
    requests = (("replay", iterations, warmup), ("learner", learn_iters, learn_warm),
                ("worker_loop", learn_iters, learn_warm))
    got: dict[str, PrimitiveCost | None] = {}
    for primitive, n, warm in requests:
        share = plan.share(primitive)
        if not plan.fits(share):
            plan.skip(primitive, f"{primitive} cells")
            got[primitive] = None
            continue
        request = MeasureRequest(primitive, 1, n, warm, share if budget is not None else None)
        try:
            answer = plan.run(primitive, share, lambda r=request: backend.measure_primitive(device, workload, r))
        except PluginTimeoutError as exc:
            plan.timed_out(primitive, f"{primitive} cells", exc)
            answer = None
        got[primitive] = None if answer is None else checked_cost(bname, request, answer)
    if all(v is None for v in got.values()) and not plan.modelled:
        return None
    rm, learner, co = got["replay"], got["learner"], got["worker_loop"]
    model = _model_row(bname, backend, device, workload) if None in (rm, learner, co) else None

    def cell(seconds: float | None, cost: PrimitiveCost) -> CostCell:
        watts = cost.power_w if cost.power_w is not None else device.active_power_w
        return CostCell(seconds, watts, "profiled")  # type: ignore[arg-type] - checked_cost: no part is None

    def modelled(*names: str) -> list[CostCell | None]:
        return [None if model is None else getattr(model, n) for n in names]

    cells = ([cell(rm.sample_s, rm), cell(rm.update_s, rm), cell(rm.insert_s, rm)] if rm is not None
             else modelled("rm_sample", "rm_update", "rm_insert"))
    cells += [cell(learner.seconds, learner)] if learner is not None else modelled("learner")
    cells += ([cell(co.sample_s, co), cell(co.update_s, co), cell(co.insert_s, co), cell(co.learner_s, co)]
              if co is not None else modelled("co_rm_sample", "co_rm_update", "co_rm_insert", "co_learner"))
    measured = [c for c in got.values() if c is not None]
    config: dict[str, Any] = dict(model.config) if model is not None else {}
    for cost in measured:
        config.update(cost.details)
    notes = [f"measured by backend {bname!r} primitive by primitive: replay {iterations} calls, learner and "
             f"worker loop {learn_iters} steps each (medians)", *(n for cost in measured for n in cost.notes)]
    notes += plan.notes()
    missing = [p for p, v in got.items() if v is None and not any(m.startswith(f"{p} cells") for m in plan.modelled)]
    if None in got.values():
        if missing:
            notes.append(f"backend {bname!r} did not measure {missing} here: "
                         + ("those cells are its analytic model's" if model is not None
                            else "it has no analytic model either, so those cells are empty"))
        notes += list(model.notes) if model is not None else []
    return DeviceRow(device.name, device.kind, *cells, config=config, notes=tuple(dict.fromkeys(notes)))


def _model_row(bname: str, backend: Any, device: "DeviceSpec", workload: "Workload") -> DeviceRow | None:
    """The backend's ``analytic_cells`` row for the primitives it did not measure, checked (``None``: no model)."""
    row = analytic_row(backend, device, workload)
    if row is not None and (not isinstance(row, DeviceRow) or row.device != device.name):
        raise SpecError(f"backend {bname!r}.analytic_cells returned {row!r:.200} for {device.name!r}; expected a "
                        f"DeviceRow with device={device.name!r}. Fix: return DeviceRow({device.name!r}, ...) or None.")
    return row
