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
  the learner is measured at every count ``1 .. C - n_actors``, or ``1 .. C`` when its threads
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
A quick profile (fewer iterations) skips these runs.
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
from pearl_core.composer.matrix import CostCell, DeviceCosts, DeviceRow, MeasureRequest, PrimitiveCost, RunMeasurement
from pearl_core.errors import PearlError, SpecError

if TYPE_CHECKING:
    from pearl_core.composer.spec import DeviceSpec
    from pearl_core.composer.workload import Workload

__all__ = ["MeasuringBackend", "checked_cost", "measured", "profile_host"]


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


def profile_host(bname: str, backend: Any, device: "DeviceSpec", workload: "Workload", *, iterations: int = 1000,
                 warmup: int = 50, rapl_root: str = "/sys/class/powercap",
                 clock: Callable[[], float] = time.perf_counter) -> DeviceRow:
    """The host's row, measured by ``backend`` at the thread counts and variants this module's policy chooses.

    Cell power: where RAPL can be read (``rapl_root``), each cell's ``power_w`` is the CPU packages' average
    over the probe that measured it (replay: the RM cells; learner at the chosen threads: the learner cell;
    worker loop: the co-located cells), else the spec's idle and active watts scaled by the busy threads; the
    row's notes say which (``clock``: for tests)."""
    probe = _RaplProbe(rapl_root, clock)
    # A profile measures this machine: never more threads than it has, whatever the spec says.
    threads = min(int(device.threads or device.cores or os.cpu_count() or 1), os.cpu_count() or 1)
    bs, na = workload.batch_size, workload.n_actors
    avail = max(1, threads - na)
    yields = learner_threads_yield(workload)  # help-first learner threads may share the actors' cores
    most = threads if yields else avail
    budget, learn_iters, w = CELL_BUDGET_S, max(10, iterations // 3), min(warmup, 20)

    def ask(primitive: str, t: int = 1, n: int = iterations, warm: int = warmup) -> PrimitiveCost:
        return probe.run(f"{primitive}:{t}", lambda: measured(bname, backend, device, workload,
                                                             MeasureRequest(primitive, t, n, warm, budget)))

    actor_s = ask("actor_step", 1, min(iterations, 500)).seconds
    produce_s = bs * actor_s / na
    learner_s = {t: ask("learner", t, learn_iters, w).seconds for t in range(1, most + 1)}
    fast_enough = [t for t in range(1, avail + 1) if learner_s[t] <= produce_s]
    t_l = min(fast_enough) if fast_enough else min(range(1, avail + 1), key=learner_s.__getitem__)
    t_r = max(1, min(threads - na - t_l, bs))
    rm = ask("replay", t_r)
    co = ask("worker_loop", t_l, learn_iters, w)
    hop_s = ask("message_hop").seconds

    def power(busy: int) -> float:
        return device.idle_power_w + (device.active_power_w - device.idle_power_w) * min(1.0, busy / threads)

    p_all, p_co = power(na + t_l + t_r), power(na + t_l)
    p_rm, p_learner = probe.power(f"replay:{t_r}", p_all), probe.power(f"learner:{t_l}", p_all)
    p_co = probe.power(f"worker_loop:{t_l}", p_co)
    s, u, n = (CostCell(_part(v), p_rm, "profiled") for v in (rm.sample_s, rm.update_s, rm.insert_s))
    co_s, co_u, co_n = (CostCell(_part(v), p_co, "profiled") for v in (co.sample_s, co.update_s, co.insert_s))
    co_learner = CostCell(co.learner_s + co.update_s + co.insert_s, p_co, "profiled")  # type: ignore[operator]
    power_note = probe.note({f"replay:{t_r}": "replay (RM cells)", f"learner:{t_l}": "learner",
                             f"worker_loop:{t_l}": "worker loop (co-located cells)"}, device)
    runs: tuple[RunMeasurement, ...] = ()
    calibration_note: tuple[str, ...] = ()
    if iterations >= CALIBRATE_MIN_ITERATIONS:
        # The host variants as the runtime runs them, in alternating rounds, medians: what the isolated cells
        # leave out (messages, wake-ups, relaying, cores shared with the actors) is in these. A failure leaves
        # the variants to the isolated cells' model. A variant's run is never faster than its learner step
        # alone: that floor lets the calibration skip the variants that cannot win (composer.calibrate).
        window_s, rounds = calibration_setup()
        variants = [(setting, t) for t in range(1, most + 1) for setting in (1, 2)]
        try:
            runs = calibrate_host_variants(workload, variants, window_s=window_s, rounds=rounds,
                                           lower_bounds={v: learner_s[v[1]] for v in variants},
                                           max_updates=CALIBRATE_MAX_UPDATES, budget_s=CALIBRATE_BUDGET_S)
        except PearlError as exc:
            calibration_note = (f"no calibration runs ({exc}); the host variants are predicted from the "
                                "isolated cells",)
        else:
            calibration_note = (_calibration_note(runs, variants, window_s, rounds),)
    config = {"rm_threads": t_r, "learner_threads": t_l, "co_rm_threads": t_r, "co_learner_threads": t_l}
    costs = DeviceCosts(actor_s, hop_s, tuple(learner_s.items()), yields, t_l, runs)
    notes = (f"measured by backend {bname!r}: up to {iterations} iterations per RM cell, {learn_iters} per "
             f"learner thread count, each cell timed for at most ~{budget:g} s (medians)",
             f"learner threads {t_l}: actors produce {bs} experiences in {produce_s * 1e3:.2f} ms; "
             + ", ".join(f"{t} thread(s) train them in {v * 1e3:.2f} ms" for t, v in learner_s.items()),
             power_note, *calibration_note)
    return DeviceRow(device.name, device.kind, s, u, n, CostCell(learner_s[t_l], p_learner, "profiled"), co_s, co_u,
                     co_n, co_learner, config=config, notes=notes, costs=costs)


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
