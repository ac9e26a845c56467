"""``pearl validate``: run the plan's candidates on the present devices and compare with the prediction.

The candidates: the top ``top`` (default 2) feasible assignments of
Algorithm 1's ranking (:meth:`~pearl_core.composer.algorithm.Decision.ranking`),
the chosen one first. When the chosen one puts RM and learner on the host CPU,
it is run as each runtime variant of :mod:`pearl_core.composer.tuning`
(setting 1 / 2, learner threads) instead of once. A runner-up whose devices
this machine does not have (neither the spec's host nor detected by an
available backend, :func:`~pearl_core.composer.profiling.present_device`), or
that the runtime cannot run, is not measured: it is listed in
:attr:`ValidationReport.skipped` with the reason and the next one in the
ranking is tried. Each runs the real
:class:`~pearl_core.runtime.parallel.ParallelRuntime` for a short window with the
plan's workload (same trainer, batch, replay; replay ratio ``1 / BS_i``), and
the measured iteration time is the steady-state slope of the run's
``metrics.csv``: wall seconds per learner update between the first logged row
after learning started and the last row. Nothing is learned or kept: each run
writes into a temporary folder that is removed afterwards.

Typical use::

    plan = make_plan(spec, wl, profiler=profiler_for(spec))      # or composer.run().plan
    report = validate_plan(plan, window_s=15)
    report.rows            # predicted vs measured per candidate
    report.chosen_error    # |measured - predicted| / measured of the chosen plan
    report.top_agrees      # the composer's best is the measured best
    report.order_agrees    # the measured order of the candidates is the predicted one
    report.skipped         # runner-ups not measured here, with the reason
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pearl_core.composer.algorithm import Candidate, place_storage
from pearl_core.composer.cli import fail, render_plan
from pearl_core.composer.compose_cli import composer_from_options, with_plan_options
from pearl_core.composer.plan import PlacementPlan
from pearl_core.composer.profiling import measure_run, measured_iteration_s, present_device, run_config_for
from pearl_core.composer.tuning import rounds_spread
from pearl_core.errors import InvalidValueError, PearlError, SpecError
from pearl_core.runtime.config import Setting

if TYPE_CHECKING:
    from pearl_core.plugins import PluginRegistry
    from pearl_core.runtime.config import RuntimePlan

#: Two measured times closer than this (relative) count as equal: runs on a shared machine vary by about that.
NOISE = 0.05

__all__ = ["NOISE", "ValidationReport", "ValidationRow", "measured_iteration_s", "order_line", "validate_plan",
           "validation_candidates"]


@dataclass(frozen=True)
class ValidationRow:
    """One candidate: what the composer predicted and what a run measured.

    Attributes:
        label: e.g. ``"setting 2, learner 1 thread(s)"``.
        setting, learner_threads, rm_threads: the runtime plan that ran.
        predicted_s: predicted seconds per learner iteration.
        measured_s: measured seconds per learner iteration (``nan`` if the run made too few updates).
        updates: learner updates in the measuring window.
        chosen: this is the composer's choice.
        rm_device, learner_device: the assignment (spec device names; ``""`` when not recorded).
        rank: the assignment's place in Algorithm 1's ranking (1 = best; 0 when not recorded).
        model_s: a host variant's prediction from the isolated cells alone
            (:attr:`~pearl_core.composer.tuning.Variant.model_s`; ``predicted_s``
            is a calibration run's when the profile has one); ``nan`` otherwise.
        predicted_spread: when ``predicted_s`` is a calibration run's, its rounds' ``(max - min) / median``
            (:attr:`~pearl_core.composer.tuning.Variant.spread`); ``nan`` otherwise.
        spread: the measured rounds' ``(max - min) / median`` (``nan`` with fewer than two measured rounds):
            how much this machine's runs of the same candidate differ, the floor under any prediction's error.
    """

    label: str
    setting: Setting
    learner_threads: int
    rm_threads: int
    predicted_s: float
    measured_s: float
    updates: int
    chosen: bool
    rm_device: str = ""
    learner_device: str = ""
    rank: int = 0
    model_s: float = math.nan
    predicted_spread: float = math.nan
    spread: float = math.nan

    @property
    def error(self) -> float:
        """``(predicted - measured) / measured`` (signed; ``nan`` when unmeasured)."""
        return _relative(self.predicted_s, self.measured_s)

    @property
    def model_error(self) -> float:
        """``(model_s - measured) / measured`` (signed; ``nan`` when either is missing)."""
        return _relative(self.model_s, self.measured_s)


def _relative(predicted: float, measured: float) -> float:
    if not math.isfinite(measured) or measured <= 0 or not math.isfinite(predicted):
        return math.nan
    return (predicted - measured) / measured


@dataclass(frozen=True)
class ValidationReport:
    """Every measured candidate, and the runner-ups that could not be measured here.

    Attributes:
        rows: the measured candidates, the chosen assignment's first.
        window_s: seconds each run lasted.
        skipped: ``(label, reason)`` of each candidate of the ranking that was not run.
    """

    rows: tuple[ValidationRow, ...]
    window_s: float
    skipped: tuple[tuple[str, str], ...] = ()

    @property
    def chosen(self) -> ValidationRow:
        return next(r for r in self.rows if r.chosen)

    @property
    def chosen_error(self) -> float:
        """Absolute relative error of the chosen candidate's prediction."""
        return abs(self.chosen.error)

    @property
    def measured_best(self) -> ValidationRow:
        ok = [r for r in self.rows if math.isfinite(r.measured_s)]
        return min(ok, key=lambda r: r.measured_s) if ok else self.chosen

    @property
    def top_agrees(self) -> bool:
        """The composer's choice is the fastest measured candidate, or within the measurement noise of it.

        Noise: two candidates whose measured times differ by less than 5% are
        treated as equal (runs on a shared machine vary by about that much).
        """
        best, mine = self.measured_best, self.chosen
        return mine is best or (math.isfinite(mine.measured_s) and mine.measured_s <= (1 + NOISE) * best.measured_s)

    @property
    def inversions(self) -> tuple[tuple[ValidationRow, ValidationRow], ...]:
        """Pairs ``(a, b)`` predicted ``a`` faster than ``b`` but measured ``b`` faster by more than the noise.

        Only candidates with a finite measurement count; equal predictions impose no order.
        """
        ok = [r for r in self.rows if math.isfinite(r.measured_s)]
        return tuple((a, b) for a in ok for b in ok
                     if a.predicted_s < b.predicted_s and b.measured_s * (1 + NOISE) < a.measured_s)

    @property
    def order_agrees(self) -> bool | None:
        """The measured order of the candidates is the predicted one (within :data:`NOISE`).

        ``None`` when fewer than two candidates were measured: there is no order to compare.
        """
        if sum(math.isfinite(r.measured_s) for r in self.rows) < 2:
            return None
        return not self.inversions


def validate_plan(plan: PlacementPlan, *, window_s: float = 15.0, learning_starts: int = 1_000, seed: int = 0,
                  repeats: int = 1, top: int = 2, registry: "PluginRegistry | None" = None,
                  progress: Callable[[str], None] | None = None) -> ValidationReport:
    """Run the top candidates of ``plan`` that this machine can run; see the module docstring.

    With ``repeats > 1`` the candidates run in turn that many rounds (A, B, A, B, ...)
    and each one's measured time is the median of its rounds, so a slow drift of
    the machine hits all of them alike.

    Args:
        top: how many assignments of Algorithm 1's ranking to measure (the
            chosen one counts; fewer when fewer are feasible or runnable here).
        registry: plugin registry that says which devices are present (default: the installed one).

    Raises:
        PearlError: the workload cannot be run (no env id or trainer recorded), a
            bad ``repeats``/``top``, or the run of a candidate failed.
    """
    for name, value in (("repeats", repeats), ("top", top)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PearlError(f"validate: {name} = {value!r}; expected an int >= 1 (e.g. {name}=2).")
    wl = plan.workload_value()
    run_config_for(wl, seed=seed)  # a workload that cannot run is refused before anything starts
    candidates, skipped = validation_candidates(plan, top=top, registry=registry)
    results: list[list[tuple[float, int]]] = [[] for _ in candidates]
    for r in range(repeats):
        for i, (row, rp) in enumerate(candidates):
            if progress is not None:
                progress(f"running {row.label} for {window_s:g} s"
                         + (f" (round {r + 1}/{repeats})" if repeats > 1 else "") + " ...")
            try:
                results[i].append(measure_run(wl, rp, window_s=window_s, learning_starts=learning_starts, seed=seed,
                                              prefix="pearl-validate-"))
            except PearlError as exc:
                raise PearlError(f"validate: the run of {row.label} failed: {exc}") from exc
    rows = []
    for (row, _), got in zip(candidates, results):
        finite = [m for m, _ in got if math.isfinite(m)]
        measured = statistics.median(finite) if finite else math.nan
        spread = rounds_spread(finite) if len(finite) >= 2 else math.nan
        rows.append(dataclasses.replace(row, measured_s=measured, updates=sum(u for _, u in got), spread=spread))
    return ValidationReport(tuple(rows), float(window_s), tuple(skipped))


def validation_candidates(plan: PlacementPlan, *, top: int = 2, registry: "PluginRegistry | None" = None
                          ) -> "tuple[list[tuple[ValidationRow, RuntimePlan]], list[tuple[str, str]]]":
    """What :func:`validate_plan` runs: ``([(row to fill, runtime plan)], [(label, why not run)])``.

    The chosen assignment (as its host variants when it has them), then the
    next assignments of :meth:`Decision.ranking` until ``top`` are taken;
    runner-ups this machine cannot run are skipped with the reason.
    """
    dec = plan.decision
    ranking = dec.ranking()
    rank = {(c.rm_device, c.learner_device): i + 1 for i, c in enumerate(ranking)}
    mine = (plan.rm_device, plan.learner_device)

    def row(label: str, rp: "RuntimePlan", predicted: float, chosen: bool, pair: tuple[str, str],
            model: float = math.nan, predicted_spread: float = math.nan) -> ValidationRow:
        return ValidationRow(label, rp.setting, rp.learner_threads, rp.rm_threads, float(predicted), math.nan, 0,
                             chosen, pair[0], pair[1], rank.get(pair, 0), float(model), float(predicted_spread))

    out: list[tuple[ValidationRow, RuntimePlan]] = []
    if plan.variants:
        for v in plan.variants:
            rp = plan.runtime_plan(setting=v.setting, learner_threads=v.learner_threads, rm_threads=v.rm_threads)
            out.append((row(f"setting {v.setting}, learner {v.learner_threads} thread(s)", rp, v.predicted_s,
                            v == plan.variant, mine, v.model_s, v.spread if v.bound == "run" else math.nan), rp))
    else:
        rp = plan.runtime_plan()
        out.append((row(_label(*mine), rp, plan.predicted_iteration_s, True, mine), rp))
    skipped: list[tuple[str, str]] = []
    taken = 1
    for cand in ranking:
        if taken >= top:
            break
        pair = (cand.rm_device, cand.learner_device)
        if pair == mine:
            continue
        label = _label(*pair)
        try:
            rp = _runner_up_plan(plan, cand, registry)
        except SpecError as exc:
            skipped.append((label, str(exc)))
            continue
        out.append((row(label, rp, float(cand.iteration_s), False, pair), rp))  # type: ignore[arg-type]
        taken += 1
    return out, skipped


def _label(rm: str, learner: str) -> str:
    return f"RM {rm}, learner {learner}"


def _runner_up_plan(plan: PlacementPlan, cand: Candidate, registry: "PluginRegistry | None") -> "RuntimePlan":
    """The runtime plan of a non-chosen assignment (DS placed by step 2); :class:`SpecError` says why it cannot run."""
    spec, wl = plan.hardware(), plan.workload_value()
    options = [o for o in place_storage(spec, wl, cand.rm_device, cand.learner_device) if o.feasible]
    if not options:
        raise SpecError(f"no device can hold its Data Storage ({wl.capacity} x {wl.experience_bytes} B); "
                        "a smaller replay capacity would let it run")
    order = {d.name: i for i, d in enumerate(spec.devices)}
    ds = min(options, key=lambda o: (o.cost_s, o.traffic_bytes, order[o.device])).device
    for name in dict.fromkeys((cand.rm_device, cand.learner_device, ds)):
        if name != spec.host and present_device(spec.device(name), registry) is None:
            raise SpecError(f"device {name!r} is not on this machine (no available backend detects it); "
                            "run validate where it is, or give it options.detected_as in the spec")
    decision = dataclasses.replace(plan.decision, rm_device=cand.rm_device, learner_device=cand.learner_device,
                                   ds_device=ds, setting=cand.setting, tied_with=(), tie_break="")
    other = dataclasses.replace(plan, decision=decision, tuning={})
    try:
        return other.runtime_plan()
    except PearlError as exc:
        raise SpecError(f"the runtime cannot run it: {exc}") from exc


# -- the command ----------------------------------------------------------------------------------

def render_report(report: ValidationReport, console: Any) -> None:
    """Predicted vs measured per candidate, both ranks, the skipped runner-ups and the agreement figures."""
    rows = report.rows
    pred_rank = {id(r): i + 1 for i, r in enumerate(sorted(rows, key=lambda r: r.predicted_s))}
    ok = sorted((r for r in rows if math.isfinite(r.measured_s)), key=lambda r: r.measured_s)
    meas_rank = {id(r): i + 1 for i, r in enumerate(ok)}
    table = Table(title=f"predicted vs measured seconds per learner iteration ({report.window_s:g} s per run)")
    for col in ("candidate", "Alg. 1 rank", "predicted ms", "measured ms", "rounds' spread", "error", "rank (pred)",
                "rank (meas)", "updates"):
        table.add_column(col, justify="left" if col == "candidate" else "right")
    for r in rows:  # rounds' spread: (max - min) / median of its measured rounds, the run-to-run noise
        table.add_row(("* " if r.chosen else "  ") + escape(r.label), str(r.rank or "-"), f"{r.predicted_s * 1e3:.3f}",
                      "-" if not math.isfinite(r.measured_s) else f"{r.measured_s * 1e3:.3f}",
                      "-" if not math.isfinite(r.spread) else f"{r.spread:.1%}",
                      "-" if not math.isfinite(r.error) else f"{r.error:+.1%}", str(pred_rank[id(r)]),
                      str(meas_rank.get(id(r), "-")), str(r.updates))
    console.print(table)
    for label, why in report.skipped:
        console.print(f"  not measured: {escape(label)} ({escape(why)})")
    console.print(f"chosen (*): {escape(report.chosen.label)}; prediction error {report.chosen_error:.1%}"
                  + (" (within 20%)" if report.chosen_error <= 0.20 else " (over 20%)"))
    best = report.measured_best
    console.print(f"measured best: {escape(best.label)}; the composer's top choice "
                  + ("agrees (within 5% of the best)" if report.top_agrees else "does not agree"))
    console.print(order_line(report))


def order_line(report: ValidationReport) -> str:
    """One sentence: whether the measured order of the candidates agrees with the predicted order."""
    agrees = report.order_agrees
    if agrees is None:
        return ("measured order: fewer than two candidates were measured, so there is no order to compare "
                "(a second feasible candidate runs only on devices this machine has)")
    n = sum(math.isfinite(r.measured_s) for r in report.rows)
    if agrees:
        return f"measured order agrees with the predicted order ({n} candidates, {NOISE:.0%} noise allowed)"
    pairs = "; ".join(f"predicted {a.label} ({a.predicted_s * 1e3:.3f} ms) faster than {b.label} "
                      f"({b.predicted_s * 1e3:.3f} ms), measured {a.measured_s * 1e3:.3f} ms vs "
                      f"{b.measured_s * 1e3:.3f} ms" for a, b in report.inversions)
    return f"measured order does not agree with the predicted order: {pairs}"


def check_options(o: dict[str, Any]) -> None:
    """Refuse bad ``pearl validate`` options by their flag, before anything is planned or run.

    Raises:
        InvalidValueError: ``--window`` not seconds > 0, ``--max-error`` not a fraction >= 0, ``--repeats`` or
            ``--top`` not >= 1, ``--learning-starts`` negative.
    """
    rules = (("window", "--window", lambda v: math.isfinite(v) and v > 0, "seconds > 0", "--window 15"),
             ("max_error", "--max-error", lambda v: v is None or (math.isfinite(v) and v >= 0),
              "a fraction >= 0 (0.2 allows 20% error)", "--max-error 0.2, or leave it out"),
             ("repeats", "--repeats", lambda v: v >= 1, "an integer >= 1", "--repeats 2"),
             ("top", "--top", lambda v: v >= 1, "an integer >= 1", "--top 2"),
             ("learning_starts", "--learning-starts", lambda v: v >= 0, "an integer >= 0", "--learning-starts 1000"))
    for key, flag, ok, expected, example in rules:
        if key in o and not ok(o[key]):
            raise InvalidValueError(f"{flag} {o[key]!r} is invalid; expected {expected}. Fix: e.g. {example}.")


def validate_command(**options: Any) -> None:
    """Run the plan's top candidates (and host variants) here for a short window; print predicted vs measured."""
    o = options
    console = Console(width=max(132, Console().width))
    try:
        check_options(o)
    except InvalidValueError as exc:
        fail(console, exc)
    if o["sweep"] is not None:  # the CLI sends --sweep to pearl_core.composer.sweep.validate_or_sweep_command
        fail(console, PearlError("validate_command runs one workload; for --sweep call "
                                 "pearl_core.composer.sweep.validate_or_sweep_command (what `pearl validate` runs)."))
    if o["report"] is not None:
        fail(console, PearlError(f"--report {o['report']} writes the report of a sweep, but no --sweep was given. "
                                 "Fix: add --sweep quick (or dqn, ddpg, full), or leave --report out."))
    try:
        composer = composer_from_options(o)
        composition = composer.run(profile=o["profile"])
        render_plan(composition, console)
        report = validate_plan(composition.plan, window_s=o["window"], learning_starts=o["learning_starts"],
                               repeats=o["repeats"], top=o["top"], registry=composer.registry,
                               progress=lambda line: console.print(line))
    except (PearlError, OSError) as exc:
        fail(console, exc)
    render_report(report, console)
    limit = o["max_error"]
    if limit is not None and not (report.chosen_error <= limit):
        console.print(f"[red]error:[/red] the chosen plan's prediction is off by {report.chosen_error:.1%} "
                      f"(> --max-error {limit:.0%}).")
        raise SystemExit(1)


_VALIDATE_EXTRA = (
    ("window", float, typer.Option(15.0, "--window", help="Seconds each candidate runs.")),
    ("repeats", int, typer.Option(2, "--repeats", help="Rounds: candidates run in turn this many times; "
                                  "each one's measurement is the median of its rounds.")),
    ("top", int, typer.Option(2, "--top", help="Assignments of Algorithm 1's ranking to measure (the chosen "
                              "one counts); runner-ups whose devices are absent here are skipped.")),
    ("profile", bool, typer.Option(True, "--profile/--no-profile", help="Measure the present devices' cells "
                                   "(cached on disk); --no-profile predicts with the analytic models.")),
    ("replay_ratio", float, typer.Option(0.5, "--replay-ratio", help="Learner updates per env step.")),
    ("learning_starts", int, typer.Option(1_000, "--learning-starts", help="Env steps before the first "
                                          "update (not measured).")),
    ("max_error", Optional[float], typer.Option(None, "--max-error", help="Exit 1 when the chosen plan's "
                                                "prediction error exceeds this fraction (e.g. 0.2); with --sweep, "
                                                "the worst error of any measured candidate.")),
    ("sweep", Optional[str], typer.Option(None, "--sweep", help="Validate a grid of workloads instead of one: "
                                          "dqn (48: batch 32/128/512 x MLP 64-64/256-256 x uniform/prioritized x "
                                          "1/2 actors x 1/8 envs per actor, DQN on CartPole-v1), ddpg (the same "
                                          "grid, DDPG on Pendulum-v1), full (both) or quick (8). The grid's "
                                          "workloads replace --batch-size, --hidden, --replay and --actors.")),
    ("report", Optional[Path], typer.Option(None, "--report", help="With --sweep: also write the report "
                                            "(markdown) there.")),
)
validate_command.__signature__, validate_command.__annotations__ = with_plan_options(  # type: ignore[attr-defined]
    _VALIDATE_EXTRA, drop=("png", "json_out"))
