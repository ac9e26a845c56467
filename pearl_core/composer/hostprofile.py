"""The composer's policy for measuring the host CPU: which thread counts, which variants, how long.

A backend that can measure single primitives (a :class:`MeasuringBackend`: the CPU backend) is
asked, one :class:`~pearl_core.composer.matrix.MeasureRequest` at a time, for what this module
decides to measure; it answers each with a :class:`~pearl_core.composer.matrix.PrimitiveCost`
and decides nothing. :func:`profile_host` turns the answers into the host's
:class:`~pearl_core.composer.matrix.DeviceRow`, its named measurements
(:class:`~pearl_core.composer.matrix.DeviceCosts`) included. The paper's thread rules:

* actors run on the host, one core each;
* learner threads ``t_l``: the fewest (of the cores the actors leave) whose update of ``BS``
  experiences takes no longer than the actors take to produce ``BS`` experiences, else the fastest;
  the learner is measured at the counts of :func:`thread_candidates` (powers of two, and the largest)
  up to ``C - n_actors``, or up to ``C`` when its threads
  yield to the actors (:func:`~pearl_core.composer.calibrate.learner_threads_yield`);
* RM threads: the cores left after actors and learner, clipped to ``[1, BS]``.

Co-located cells describe this runtime's setting 2 on a CPU: one worker process inserts, samples,
trains and updates in turn, measured that way (the ``worker_loop`` primitive: each part is slower
there than alone), and the learner cell carries the RM update and insert
(``DeviceCosts.worker_loop_threads``), so Algorithm 1's ``sample + max(update + insert, learner)`` is
the worker's whole iteration.

With ``iterations >= CALIBRATE_MIN_ITERATIONS`` (the composer's default 1000) each host variant
(setting 1 and 2 at each learner thread count measured) also runs as the runtime runs it
(:func:`~pearl_core.composer.calibrate.calibrate_host_variants`), recorded as
:class:`~pearl_core.composer.matrix.RunMeasurement` s: the isolated cells miss the runtime's
messages, wake-ups and shared cores, which at small models are most of an update (docs/composer.md).
A quick profile (fewer iterations) skips these runs. Every probe gets a share of the profiling budget
(:mod:`pearl_core.composer.budget`); what does not fit is modelled and the row's notes say so.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

from pearl_core.composer.calibrate import (
    CALIBRATE_BUDGET_S,
    CALIBRATE_MAX_UPDATES,
    CALIBRATE_MIN_ITERATIONS,
    CELL_BUDGET_S,
    calibrate_host_variants,
    calibration_setup,
    learner_threads_yield,
)
from pearl_core.composer.budget import OverBudget, ProbePlan, probe_deadline_s
from pearl_core.composer.matrix import CostCell, DeviceCosts, DeviceRow, MeasureRequest, PrimitiveCost, RunMeasurement
from pearl_core.composer.timing import ProfileBudget
from pearl_core.errors import PearlError, PluginTimeoutError, SpecError

if TYPE_CHECKING:
    from pearl_core.composer.spec import DeviceSpec
    from pearl_core.composer.workload import Workload

__all__ = ["MeasuringBackend", "checked_cost", "measured", "profile_host", "thread_candidates"]


@runtime_checkable
class MeasuringBackend(Protocol):
    """A backend that measures one primitive of a workload on a *present* device, at what it is asked."""

    def measure_primitive(self, device: "DeviceSpec", workload: "Workload",
                          request: MeasureRequest) -> PrimitiveCost | None:
        """Median seconds of ``request.primitive`` at ``request.threads``; ``None`` when it cannot measure it
        (the device is then left to the analytic models). Never chooses threads."""
        ...


def measured(bname: str, backend: Any, device: "DeviceSpec", workload: "Workload",
             request: MeasureRequest) -> PrimitiveCost:
    """``backend.measure_primitive(...)``, checked: a :class:`PrimitiveCost` of the primitive and threads asked.

    Raises:
        SpecError: the backend answered something else (``None`` included: the host policy needs every
            primitive it asks for).
    """
    return checked_cost(bname, request, backend.measure_primitive(device, workload, request))


def checked_cost(bname: str, request: MeasureRequest, got: Any) -> PrimitiveCost:
    """``got`` when it is a :class:`PrimitiveCost` of the primitive and threads asked, with the primitive's parts.

    Raises:
        SpecError: it is anything else (``None`` included), naming the backend and the request.
    """
    parts = {"replay": ("sample_s", "update_s", "insert_s"),
             "worker_loop": ("sample_s", "learner_s", "update_s", "insert_s")}.get(request.primitive, ())
    if (not isinstance(got, PrimitiveCost) or (got.primitive, got.threads) != (request.primitive, request.threads)
            or any(getattr(got, p) is None for p in parts)):
        raise SpecError(f"backend {bname!r}.measure_primitive answered {got!r:.200} to {request!r}; expected a "
                        f"PrimitiveCost({request.primitive!r}, threads={request.threads}, seconds=...) with "
                        f"{', '.join(parts) or 'no parts'}. Fix: return the primitive measured at the threads asked.")
    return got


def _part(seconds: float | None) -> float:
    """A part of a replay or worker-loop cost: :func:`measured` refused a cost without its parts."""
    assert seconds is not None
    return seconds


class _RaplProbe:
    """Average CPU-package watts over each probe, from RAPL (``pearl_core.runtime.energy``), where it can be read."""

    def __init__(self, root: str, clock: Callable[[], float]):
        from pearl_core.runtime.energy import RaplCounters

        self.clock = clock
        self.watts: dict[str, float] = {}
        try:
            self.rapl: Any = RaplCounters(root)
            self.why = ""
        except (OSError, ValueError) as exc:
            self.rapl, self.why = None, f"{type(exc).__name__}: {exc}"

    def run(self, key: str, fn: Callable[[], PrimitiveCost]) -> PrimitiveCost:
        """``fn()``; when RAPL is read, the probe's average watts go to ``watts[key]``."""
        if self.rapl is None:
            return fn()
        try:
            self.rapl.start()
        except (OSError, ValueError) as exc:
            self.rapl, self.why = None, f"{type(exc).__name__}: {exc}"
            return fn()
        t = self.clock()
        cost = fn()
        took = self.clock() - t
        try:
            self.rapl.poll()
        except (OSError, ValueError) as exc:
            self.rapl, self.why = None, f"failed during a probe: {type(exc).__name__}: {exc}"
            return cost
        if took >= RAPL_MIN_PROBE_S:
            self.watts[key] = self.rapl.joules() / took
        return cost

    def power(self, key: str, modelled: float) -> float:
        return self.watts.get(key, modelled)

    def note(self, keys: dict[str, str], device: "DeviceSpec") -> str:
        spec = (f"the spec's watts (idle {device.idle_power_w:g} W, active {device.active_power_w:g} W) scaled by "
                "the busy threads")
        got = [f"{label} {self.watts[key]:,.1f} W" for key, label in keys.items() if key in self.watts]
        if not got:
            why = self.why or f"no probe lasted {RAPL_MIN_PROBE_S:g} s"
            return f"cell power: {spec} (RAPL not used: {why})"
        names = ",".join(self.rapl.names) if self.rapl is not None else "RAPL"
        rest = [label for key, label in keys.items() if key not in self.watts]
        return (f"cell power: measured, RAPL {names} averaged over each probe: " + ", ".join(got)
                + (f"; {spec} for {', '.join(rest)}" if rest else ""))


#: Shortest probe whose RAPL average is used (the counters advance about every millisecond).
RAPL_MIN_PROBE_S = 0.05


def thread_candidates(most: int, avail: int) -> tuple[int, ...]:
    """The learner thread counts the host profile measures: powers of two up to ``most``, and ``avail`` (what
    the actors leave) and ``most`` themselves (fewer probes than every count on a many-core host; a step's
    time changes slowly between neighbouring counts)."""
    out = {t for t in (1 << k for k in range(max(1, most).bit_length())) if t <= most}
    return tuple(sorted(out | {max(1, min(avail, most)), max(1, most)}))


#: The calibration's weight in the host's budget, relative to all its cells together (it gets about two
#: thirds of the host's part: its runs decide the variant), and what the budget expects a calibration to
#: cost: the child's start-up (importing torch) plus, per variant, its window and a run's start and end.
CALIBRATION_WEIGHT = 2.0
CALIBRATION_START_S = 3.0
CALIBRATION_RUN_OVERHEAD_S = 1.0


def profile_host(bname: str, backend: Any, device: "DeviceSpec", workload: "Workload", *, iterations: int = 1000,
                 warmup: int = 50, rapl_root: str = "/sys/class/powercap",
                 clock: Callable[[], float] = time.perf_counter, budget: "ProfileBudget | None" = None) -> DeviceRow:
    """The host's row, measured by ``backend`` at the thread counts and variants this module's policy chooses.

    Cell power: where RAPL can be read (``rapl_root``), each cell's ``power_w`` is the CPU packages' average
    over the probe that measured it (replay: the RM cells; learner at the chosen threads: the learner cell;
    worker loop: the co-located cells), else the spec's idle and active watts scaled by the busy threads; the
    row's notes say which (``clock``: for tests).

    ``budget``: the host's part of the profiling budget (:mod:`pearl_core.composer.budget`; ``None``: no bound
    but each cell's :data:`CELL_BUDGET_S` and the calibration's :data:`CALIBRATE_BUDGET_S`). Cells whose probe
    does not fit are left out (further learner thread counts, the worker loop: the co-located cells are then
    the isolated ones) and calibration runs only the variants that fit, the most promising first (by their
    learner step alone); the row's notes say what was modelled because of the budget.

    Raises:
        OverBudget: nothing was left for the first probe, or a probe the row cannot do without (actor step,
            learner at 1 thread, replay, message hop) overran its deadline (the profiler then models the host).
            Once the host is being measured, those probes run at their fewest calls even past the budget.
    """
    probe = _RaplProbe(rapl_root, clock)
    # A profile measures this machine: never more threads than it has, whatever the spec says.
    threads = min(int(device.threads or device.cores or os.cpu_count() or 1), os.cpu_count() or 1)
    bs, na = workload.batch_size, workload.n_actors
    avail = max(1, threads - na)
    yields = learner_threads_yield(workload)  # help-first learner threads may share the actors' cores
    most = threads if yields else avail
    cap, learn_iters, w = CELL_BUDGET_S, max(10, iterations // 3), min(warmup, 20)
    counts = thread_candidates(most, avail)
    weights = {"actor_step": 1.0, **{f"learner:{t}": 1.0 for t in counts}, "replay": 1.5, "worker_loop": 1.5,
               "message_hop": 0.3}
    calibrate = iterations >= CALIBRATE_MIN_ITERATIONS
    if calibrate:
        weights["calibration"] = CALIBRATION_WEIGHT * sum(weights.values())
    plan = ProbePlan(budget if budget is not None else ProfileBudget(1e9, clock), weights)

    def ask(key: str, what: str, primitive: str, t: int = 1, n: int = iterations, warm: int = warmup,
            per_call: float | None = None, required: bool = False) -> PrimitiveCost | None:
        share = plan.share(key, cap)
        if not plan.fits(share, per_call):
            if required and not plan.samples:  # nothing measured yet: the host is modelled
                raise OverBudget(f"the host's {what} did not fit the profiling budget ({share:.3f} s left for it)")
            if not required:  # one the row needs, once the host is being measured, runs at its fewest calls
                plan.skip(key, what)
                return None
        request = MeasureRequest(primitive, t, n, warm, share)
        try:
            return probe.run(f"{primitive}:{t}", lambda: plan.run(
                key, share, lambda: measured(bname, backend, device, workload, request)))
        except PluginTimeoutError as exc:
            if required:
                raise OverBudget(f"the host's {what} overran its deadline ({exc})") from exc
            plan.timed_out(key, what, exc)
            return None

    def must(cost: PrimitiveCost | None) -> PrimitiveCost:
        assert cost is not None  # required probes raise instead of answering None
        return cost

    actor_s = must(ask("actor_step", "actor step", "actor_step", 1, min(iterations, 500), required=True)).seconds
    produce_s = bs * actor_s / na
    learner_s = {1: must(ask("learner:1", "learner at 1 thread", "learner", 1, learn_iters, w, required=True)).seconds}
    for t in counts[1:]:
        got = ask(f"learner:{t}", f"learner at {t} threads", "learner", t, learn_iters, w, per_call=learner_s[1])
        if got is not None:
            learner_s[t] = got.seconds
    usable = [t for t in learner_s if t <= avail]
    fast_enough = [t for t in usable if learner_s[t] <= produce_s]
    t_l = min(fast_enough) if fast_enough else min(usable, key=learner_s.__getitem__)
    t_r = max(1, min(threads - na - t_l, bs))
    rm = must(ask("replay", "replay (RM cells)", "replay", t_r, required=True))
    co = ask("worker_loop", "worker loop (co-located cells: the isolated cells stand in)", "worker_loop", t_l,
             learn_iters, w, per_call=learner_s[t_l] + rm.seconds)
    hop_s = must(ask("message_hop", "message hop", "message_hop", required=True)).seconds

    def power(busy: int) -> float:
        return device.idle_power_w + (device.active_power_w - device.idle_power_w) * min(1.0, busy / threads)

    p_all, p_co = power(na + t_l + t_r), power(na + t_l)
    p_rm, p_learner = probe.power(f"replay:{t_r}", p_all), probe.power(f"learner:{t_l}", p_all)
    p_co = probe.power(f"worker_loop:{t_l}", p_co)
    s, u, n = (CostCell(_part(v), p_rm, "profiled") for v in (rm.sample_s, rm.update_s, rm.insert_s))
    if co is None:  # not measured (the budget): the worker loop as the isolated cells add up, one after another
        co = PrimitiveCost("worker_loop", t_l, rm.seconds + learner_s[t_l], sample_s=rm.sample_s,
                           update_s=rm.update_s, insert_s=rm.insert_s, learner_s=learner_s[t_l])
    co_s, co_u, co_n = (CostCell(_part(v), p_co, "profiled") for v in (co.sample_s, co.update_s, co.insert_s))
    co_learner = CostCell(co.learner_s + co.update_s + co.insert_s, p_co, "profiled")  # type: ignore[operator]
    power_note = probe.note({f"replay:{t_r}": "replay (RM cells)", f"learner:{t_l}": "learner",
                             f"worker_loop:{t_l}": "worker loop (co-located cells)"}, device)
    runs: tuple[RunMeasurement, ...] = ()
    calibration_note: tuple[str, ...] = ()
    if calibrate:
        runs, calibration_note = _calibrate(plan, workload, learner_s, most)
    config = {"rm_threads": t_r, "learner_threads": t_l, "co_rm_threads": t_r, "co_learner_threads": t_l}
    costs = DeviceCosts(actor_s, hop_s, tuple(learner_s.items()), yields, t_l, runs)
    notes = (f"measured by backend {bname!r}: up to {iterations} iterations per RM cell, {learn_iters} per "
             f"learner thread count, each cell timed for at most ~{cap:g} s (medians)",
             f"learner threads {t_l}: actors produce {bs} experiences in {produce_s * 1e3:.2f} ms; "
             + ", ".join(f"{t} thread(s) train them in {v * 1e3:.2f} ms" for t, v in learner_s.items()),
             power_note, *calibration_note, *plan.notes())
    return DeviceRow(device.name, device.kind, s, u, n, CostCell(learner_s[t_l], p_learner, "profiled"), co_s, co_u,
                     co_n, co_learner, config=config, notes=notes, costs=costs)


def _calibrate(plan: ProbePlan, workload: "Workload", learner_s: dict[int, float], most: int
               ) -> tuple[tuple[RunMeasurement, ...], tuple[str, ...]]:
    """The host variants as the runtime runs them, in alternating rounds, medians: what the isolated cells
    leave out (messages, wake-ups, relaying, cores shared with the actors) is in these. Only the variants that
    fit the calibration's share run, those whose learner step alone is fastest first (the others are predicted
    from the isolated cells, scaled by what the runs measured: :func:`~pearl_core.composer.tuning.host_variants`).
    A failure leaves the variants to the isolated cells' model. A variant's run is never faster than its
    learner step alone: that floor lets the calibration skip the variants that cannot win (composer.calibrate)."""
    window_s, rounds = calibration_setup()
    share = plan.share("calibration")
    ranked = sorted((t for t in learner_s if t <= most), key=learner_s.__getitem__)
    variants = [(setting, t) for t in ranked for setting in (2, 1)]
    fit = int(max(0.0, share - CALIBRATION_START_S) // (window_s + CALIBRATION_RUN_OVERHEAD_S))
    chosen, left_out = variants[:fit], variants[fit:]
    if left_out:
        plan.skip("calibration", "calibration runs of " + ", ".join(f"setting {s} x {t} thread(s)" for s, t in
                                                                    left_out))
    if not chosen:
        return (), ("no calibration runs (none fits the profiling budget); the host variants are predicted from "
                    "the isolated cells",)
    try:
        runs = plan.run("calibration", share, lambda: calibrate_host_variants(
            workload, chosen, window_s=window_s, rounds=rounds, lower_bounds={v: learner_s[v[1]] for v in chosen},
            max_updates=CALIBRATE_MAX_UPDATES, budget_s=min(CALIBRATE_BUDGET_S, share - CALIBRATION_START_S),
            timeout_s=probe_deadline_s(share)))
    except PearlError as exc:
        return (), (f"no calibration runs ({exc}); the host variants are predicted from the isolated cells",)
    return runs, (_calibration_note(runs, chosen, window_s, rounds),)


def _calibration_note(runs: tuple[RunMeasurement, ...], variants: list[tuple[int, int]], window_s: float,
                      rounds: int) -> str:
    """One line: how each host variant was calibrated (rounds run, or left out at its floor)."""
    by = {(r.setting, r.threads): r for r in runs}
    parts = []
    for s, t in variants:
        rec = by.get((s, t))
        if rec is not None and rec.rounds:
            parts.append(f"setting {s} x {t} thread(s): {rec.rounds} round(s)")
        elif rec is not None and rec.floor:
            parts.append(f"setting {s} x {t} thread(s): not run, its learner step alone ({rec.floor * 1e3:.2f} ms) "
                         "is slower than the best run (predicted at that floor, bound 'floor')")
        else:
            parts.append(f"setting {s} x {t} thread(s): no measurement (too few updates)")
    return (f"host variants calibrated: runs of at most {window_s:g} s or {CALIBRATE_MAX_UPDATES} updates, up to "
            f"{rounds} alternating round(s) for the variants within reach of the best, medians; " + "; ".join(parts))
