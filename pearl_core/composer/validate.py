"""``pearl validate``: run the plan's candidates on the present devices and compare with the prediction.

For a plan whose RM and learner share the host CPU, the candidates are the
runtime variants of :mod:`pearl_core.composer.tuning` (setting 1 / 2, learner
threads); otherwise the chosen assignment alone (the only one whose devices
this machine is known to have). Each runs the real
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
"""

from __future__ import annotations

import csv
import dataclasses
import math
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import typer
from rich.console import Console
from rich.table import Table

from pearl_core.composer.cli import fail, render_plan
from pearl_core.composer.compose_cli import composer_from_options, with_plan_options
from pearl_core.composer.plan import PlacementPlan
from pearl_core.composer.profiling import run_config_for
from pearl_core.errors import PearlError
from pearl_core.runtime.config import Setting

if TYPE_CHECKING:
    from pearl_core.runtime.config import RuntimePlan

__all__ = ["ValidationReport", "ValidationRow", "measured_iteration_s", "validate_plan"]


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
    """

    label: str
    setting: Setting
    learner_threads: int
    rm_threads: int
    predicted_s: float
    measured_s: float
    updates: int
    chosen: bool

    @property
    def error(self) -> float:
        """``(predicted - measured) / measured`` (signed; ``nan`` when unmeasured)."""
        if not math.isfinite(self.measured_s) or self.measured_s <= 0:
            return math.nan
        return (self.predicted_s - self.measured_s) / self.measured_s


@dataclass(frozen=True)
class ValidationReport:
    rows: tuple[ValidationRow, ...]
    window_s: float

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
        return mine is best or (math.isfinite(mine.measured_s) and mine.measured_s <= 1.05 * best.measured_s)


def measured_iteration_s(metrics_csv: Path) -> tuple[float, int]:
    """``(seconds per update, updates)`` over the steady part of a run's ``metrics.csv``.

    Uses the rows after the first one with updates > 0 (learning has started and
    the first row's partial interval is skipped) up to the last row.
    """
    with open(metrics_csv, newline="", encoding="utf-8") as fh:
        rows = [(float(r["wall_s"]), int(float(r["updates"]))) for r in csv.DictReader(fh)]
    started = [r for r in rows if r[1] > 0]
    if len(started) < 3:
        return math.nan, 0
    (w0, u0), (w1, u1) = started[1], started[-1]
    du = u1 - u0
    return ((w1 - w0) / du if du > 0 else math.nan), du


def validate_plan(plan: PlacementPlan, *, window_s: float = 15.0, learning_starts: int = 1_000, seed: int = 0,
                  repeats: int = 1, progress: Callable[[str], None] | None = None) -> ValidationReport:
    """Run every candidate of ``plan`` that this machine can run; see the module docstring.

    With ``repeats > 1`` the candidates run in turn that many rounds (A, B, A, B, ...)
    and each one's measured time is the median of its rounds, so a slow drift of
    the machine hits all of them alike.

    Raises:
        PearlError: the workload cannot be run (no env id or trainer recorded).
    """
    from pearl_core.runtime.config import StopCriteria
    from pearl_core.runtime.parallel import ParallelRuntime

    wl = plan.workload_value()
    bsi = int(wl.insert_batch or wl.n_actors)
    base = dataclasses.replace(run_config_for(wl, seed=seed), replay_ratio=1.0 / bsi,
                               learning_starts=learning_starts,
                               stop=StopCriteria(max_wall_time_s=float(window_s), eval_every=10**9))
    candidates: list[tuple[str, RuntimePlan, float, bool]] = []
    if plan.variants:
        chosen = plan.variant
        for v in plan.variants:
            label = f"setting {v.setting}, learner {v.learner_threads} thread(s)"
            rp = plan.runtime_plan(setting=v.setting, learner_threads=v.learner_threads, rm_threads=v.rm_threads)
            candidates.append((label, rp, v.predicted_s, v == chosen))
    else:
        candidates.append((f"RM {plan.rm_device}, learner {plan.learner_device}", plan.runtime_plan(),
                           plan.predicted_iteration_s, True))
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise PearlError(f"validate: repeats = {repeats!r}; expected an int >= 1.")
    results: list[list[tuple[float, int]]] = [[] for _ in candidates]
    for r in range(repeats):
        for i, (label, rp, _, _) in enumerate(candidates):
            if progress is not None:
                progress(f"running {label} for {window_s:g} s" + (f" (round {r + 1}/{repeats})" if repeats > 1 else "")
                         + " ...")
            with tempfile.TemporaryDirectory(prefix="pearl-validate-") as tmp:
                config = dataclasses.replace(base, log_dir=str(Path(tmp) / "run"))
                try:
                    ParallelRuntime(config, rp, progress=False, tensorboard=False, plot=False,
                                    metrics_every=250).run()
                except PearlError as exc:
                    raise PearlError(f"validate: the run of {label} failed: {exc}") from exc
                results[i].append(measured_iteration_s(Path(config.log_dir) / "metrics.csv"))
    rows = []
    for (label, rp, predicted, is_chosen), got in zip(candidates, results):
        finite = [m for m, _ in got if math.isfinite(m)]
        measured = statistics.median(finite) if finite else math.nan
        rows.append(ValidationRow(label, rp.setting, rp.learner_threads, rp.rm_threads, predicted, measured,
                                  sum(u for _, u in got), is_chosen))
    return ValidationReport(tuple(rows), float(window_s))


# -- the command ----------------------------------------------------------------------------------

def render_report(report: ValidationReport, console: Any) -> None:
    """Predicted vs measured per candidate, ranks, and the two acceptance figures."""
    rows = report.rows
    pred_rank = {id(r): i + 1 for i, r in enumerate(sorted(rows, key=lambda r: r.predicted_s))}
    ok = sorted((r for r in rows if math.isfinite(r.measured_s)), key=lambda r: r.measured_s)
    meas_rank = {id(r): i + 1 for i, r in enumerate(ok)}
    table = Table(title=f"predicted vs measured seconds per learner iteration ({report.window_s:g} s per run)")
    for col in ("candidate", "predicted ms", "measured ms", "error", "rank (pred)", "rank (meas)", "updates"):
        table.add_column(col, justify="left" if col == "candidate" else "right")
    for r in rows:
        table.add_row(("* " if r.chosen else "  ") + r.label, f"{r.predicted_s * 1e3:.3f}",
                      "-" if not math.isfinite(r.measured_s) else f"{r.measured_s * 1e3:.3f}",
                      "-" if not math.isfinite(r.error) else f"{r.error:+.1%}", str(pred_rank[id(r)]),
                      str(meas_rank.get(id(r), "-")), str(r.updates))
    console.print(table)
    console.print(f"chosen (*): {report.chosen.label}; prediction error {report.chosen_error:.1%}"
                  + (" (within 20%)" if report.chosen_error <= 0.20 else " (over 20%)"))
    best = report.measured_best
    console.print(f"measured best: {best.label}; the composer's top choice "
                  + ("agrees (within 5% of the best)" if report.top_agrees else "does not agree"))


def validate_command(**options: Any) -> None:
    """Run each candidate the plan considered on this machine for a short window; print predicted vs measured."""
    o = options
    console = Console(width=max(132, Console().width))
    try:
        composer = composer_from_options(o)
        composition = composer.run(profile=o["profile"])
        render_plan(composition, console)
        report = validate_plan(composition.plan, window_s=o["window"], learning_starts=o["learning_starts"],
                               repeats=o["repeats"], progress=lambda line: console.print(line))
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
    ("profile", bool, typer.Option(True, "--profile/--no-profile", help="Measure the present devices' cells "
                                   "(cached on disk); --no-profile predicts with the analytic models.")),
    ("replay_ratio", float, typer.Option(0.5, "--replay-ratio", help="Learner updates per env step.")),
    ("learning_starts", int, typer.Option(1_000, "--learning-starts", help="Env steps before the first "
                                          "update (not measured).")),
    ("max_error", Optional[float], typer.Option(None, "--max-error", help="Exit 1 when the chosen plan's "
                                                "prediction error exceeds this fraction (e.g. 0.2).")),
)
validate_command.__signature__, validate_command.__annotations__ = with_plan_options(  # type: ignore[attr-defined]
    _VALIDATE_EXTRA, drop=("png", "json_out"))
