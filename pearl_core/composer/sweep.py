"""``pearl validate --sweep``: the composer's fidelity over a grid of workloads.

For each workload of the grid (:func:`sweep_points`) the composer plans as a
user's :class:`~pearl_core.composer.api.Composer` would (profiled cells for the
present devices, cached on disk), then :func:`~pearl_core.composer.validate.validate_plan`
runs every runnable candidate of the plan (the host variants: protocol setting
and learner threads; runner-up device assignments whose devices are present)
in alternating rounds (A, B, A, B, ...) and takes each one's median. A
:class:`SweepReport` holds, per workload, predicted vs measured seconds per
learner iteration and the composer's pick vs the measured best, and overall:

* the share of workloads whose pick is the measured best or within
  :data:`PICK_TOLERANCE` (3%) of it;
* the median and the largest ``|predicted - measured| / measured`` over every
  measured candidate (and over the chosen ones alone).

Typical use (see also ``benchmarks/composer_fidelity.py``)::

    report = run_sweep(sweep_points("dqn"), window_s=6, repeats=2, progress=print)
    print(report.to_markdown())
    report.pick_share, report.median_error, report.max_error

Every run writes into a temporary folder that is removed afterwards; nothing
is learned or kept. The grid runs for a long time (minutes per workload); a
workload whose plan or run fails is recorded with the error and the sweep goes
on.
"""

from __future__ import annotations

import datetime
import math
import os
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from pearl_core.errors import PearlError, SpecError

if TYPE_CHECKING:
    from pearl_core.composer.validate import ValidationReport, ValidationRow
    from pearl_core.plugins import PluginRegistry

__all__ = ["GRIDS", "PICK_TOLERANCE", "SweepPoint", "SweepReport", "SweepResult", "run_sweep", "sweep_command",
           "sweep_points", "validate_or_sweep_command"]

#: The pick counts as right when its measured time is within this fraction of the measured best's.
PICK_TOLERANCE = 0.03


@dataclass(frozen=True)
class SweepPoint:
    """One workload of the sweep.

    Attributes:
        env_id: gymnasium environment (``CartPole-v1`` for DQN, ``Pendulum-v1`` for DDPG).
        batch_size: ``BS``.
        hidden: the MLP's hidden sizes (``(64, 64)``).
        replay: ``"uniform"`` or ``"prioritized"``.
        n_actors: actor processes.
        envs_per_actor: environments each actor steps together.
        replay_ratio: learner updates per env step (``BS_i = 1 / replay_ratio``).
    """

    env_id: str
    batch_size: int
    hidden: tuple[int, ...]
    replay: str
    n_actors: int
    envs_per_actor: int
    replay_ratio: float = 0.5

    @property
    def label(self) -> str:
        short = "PER" if self.replay == "prioritized" else "uni"
        return (f"{self.env_id} b{self.batch_size} {'-'.join(map(str, self.hidden))} {short} "
                f"{self.n_actors}a x{self.envs_per_actor}")


def sweep_points(grid: str = "full") -> tuple[SweepPoint, ...]:
    """The workloads of a named grid.

    ``"dqn"``: DQN on CartPole-v1, batch {32, 128, 512} x MLP {64-64, 256-256} x
    replay {uniform, prioritized} x actors {1, 2} x envs per actor {1, 8} (48
    workloads); ``"ddpg"``: the same grid for DDPG on Pendulum-v1; ``"full"``:
    both (96); ``"quick"``: 8 of the DQN grid's corners (a smoke run).

    Raises:
        SpecError: an unknown grid name.
    """
    if grid not in GRIDS:
        raise SpecError(f"sweep grid {grid!r} is unknown; expected one of {sorted(GRIDS)} (e.g. --sweep dqn).")
    return GRIDS[grid]()


def _grid(env_id: str) -> tuple[SweepPoint, ...]:
    return tuple(SweepPoint(env_id, bs, h, rp, na, ne)
                 for bs in (32, 128, 512) for h in ((64, 64), (256, 256)) for rp in ("uniform", "prioritized")
                 for na in (1, 2) for ne in (1, 8))


def _quick() -> tuple[SweepPoint, ...]:
    return tuple(SweepPoint("CartPole-v1", bs, h, rp, na, ne)
                 for bs, h, rp, na, ne in ((32, (64, 64), "uniform", 1, 1), (32, (256, 256), "prioritized", 1, 1),
                                           (512, (64, 64), "prioritized", 1, 1), (512, (256, 256), "uniform", 1, 1),
                                           (32, (64, 64), "prioritized", 2, 8), (128, (256, 256), "prioritized", 2, 1),
                                           (128, (64, 64), "uniform", 1, 8), (512, (256, 256), "prioritized", 2, 8)))


GRIDS: dict[str, Callable[[], tuple[SweepPoint, ...]]] = {
    "dqn": lambda: _grid("CartPole-v1"),
    "ddpg": lambda: _grid("Pendulum-v1"),
    "full": lambda: _grid("CartPole-v1") + _grid("Pendulum-v1"),
    "quick": _quick,
}


@dataclass(frozen=True)
class SweepResult:
    """One workload: its validation report, or why it could not be validated."""

    point: SweepPoint
    report: "ValidationReport | None"
    error: str = ""
    replicate: "ValidationReport | None" = None

    def replicate_s(self, row: "ValidationRow") -> float:
        """The second validation's measured seconds for ``row``'s candidate (``nan`` without one)."""
        if self.replicate is None:
            return math.nan
        got = [r.measured_s for r in self.replicate.rows if r.label == row.label]
        return got[0] if got and math.isfinite(got[0]) else math.nan

    @property
    def replicate_pick_ok(self) -> bool | None:
        """The first validation's measured best is the second validation's best (within
        :data:`PICK_TOLERANCE`): how often a predictor that knew the first measurement exactly would pick
        right, judged by the second (``None`` without a second measurement of every measured candidate)."""
        rows = self.measured
        second = [self.replicate_s(r) for r in rows]
        if not rows or not all(math.isfinite(x) for x in second):
            return None
        first_best = min(range(len(rows)), key=lambda i: rows[i].measured_s)
        return second[first_best] <= (1 + PICK_TOLERANCE) * min(second)

    @property
    def measured(self) -> "tuple[ValidationRow, ...]":
        if self.report is None:
            return ()
        return tuple(r for r in self.report.rows if math.isfinite(r.measured_s))

    @property
    def pick_ok(self) -> bool | None:
        """The chosen candidate is the measured best or within :data:`PICK_TOLERANCE` of it (``None``: not measured)."""
        rows = self.measured
        if self.report is None or not rows or not math.isfinite(self.report.chosen.measured_s):
            return None
        best = min(r.measured_s for r in rows)
        return self.report.chosen.measured_s <= (1 + PICK_TOLERANCE) * best


@dataclass(frozen=True)
class SweepReport:
    """Every workload's result and the overall figures."""

    results: tuple[SweepResult, ...]
    window_s: float
    repeats: int
    machine: str = ""
    started: str = ""
    finished: str = ""

    @property
    def validated(self) -> tuple[SweepResult, ...]:
        return tuple(r for r in self.results if r.pick_ok is not None)

    @property
    def pick_share(self) -> float:
        """Share of validated workloads whose pick is the measured best (within 3%)."""
        v = self.validated
        return sum(bool(r.pick_ok) for r in v) / len(v) if v else math.nan

    def errors(self, chosen_only: bool = False, model: bool = False) -> list[float]:
        """``|error|`` of every measured candidate (or the chosen ones); ``model``: the isolated cells' model's."""
        out = [abs(row.model_error if model else row.error) for r in self.validated for row in r.measured
               if row.chosen or not chosen_only]
        return [e for e in out if math.isfinite(e)]

    def replicate_errors(self) -> list[float]:
        """``|second - first| / first`` of every candidate measured by both validations: the error of a
        "prediction" that is a second measurement of the same runtime plan, the floor under any predictor's
        error on this machine (empty when the sweep ran without ``replicate``)."""
        out = [abs(r.replicate_s(row) - row.measured_s) / row.measured_s for r in self.validated
               for row in r.measured]
        return [e for e in out if math.isfinite(e)]

    def replicate_line(self) -> str:
        """The repeatability figures (empty when the sweep ran without ``replicate``)."""
        e = self.replicate_errors()
        if not e:
            return ""
        picks = [r.replicate_pick_ok for r in self.validated if r.replicate_pick_ok is not None]
        text = (f"a second validation of the same candidates, taken as the prediction: |error| over {len(e)} "
                f"candidates median {statistics.median(e):.1%}, max {max(e):.1%}")
        if picks:
            text += (f"; the first validation's best is the second's best (within {PICK_TOLERANCE:.0%}) in "
                     f"{sum(picks)} of {len(picks)} workloads ({sum(picks) / len(picks):.0%})")
        return text

    def spreads(self, calibration: bool = False) -> list[float]:
        """The rounds' ``(max - min) / median`` of every measured candidate that has one: the validation
        rounds' (:attr:`ValidationRow.spread`), or with ``calibration`` the calibration rounds' behind its
        prediction (:attr:`ValidationRow.predicted_spread`). Runs of one candidate differ by this much on the
        machine, so an error of that size is within its noise."""
        out = [row.predicted_spread if calibration else row.spread for r in self.validated for row in r.measured]
        return [x for x in out if math.isfinite(x)]

    def noise_line(self) -> str:
        """The measured and the calibration rounds' spreads, median and max (empty when neither was measured)."""
        parts = []
        for name, xs in (("validation", self.spreads()), ("calibration", self.spreads(calibration=True))):
            if xs:
                parts.append(f"{name} rounds of one candidate, (max - min) / median: median "
                             f"{statistics.median(xs):.1%}, max {max(xs):.1%} ({len(xs)} candidates)")
        return "; ".join(parts)

    @property
    def median_error(self) -> float:
        e = self.errors()
        return statistics.median(e) if e else math.nan

    @property
    def max_error(self) -> float:
        e = self.errors()
        return max(e) if e else math.nan

    def summary(self) -> str:
        v = self.validated
        ch = self.errors(chosen_only=True)
        return (f"{len(v)} of {len(self.results)} workloads validated; pick = measured best (within "
                f"{PICK_TOLERANCE:.0%}) in {sum(bool(r.pick_ok) for r in v)} ({self.pick_share:.0%}); "
                f"|error| over {len(self.errors())} measured candidates: median {self.median_error:.1%}, "
                f"max {self.max_error:.1%}; chosen only: median "
                f"{(statistics.median(ch) if ch else math.nan):.1%}, max {(max(ch) if ch else math.nan):.1%}"
                + (f"; the isolated cells' model alone: median {statistics.median(me):.1%}, max {max(me):.1%}"
                   if (me := self.errors(model=True)) else ""))

    def to_markdown(self) -> str:
        twice = any(r.replicate is not None for r in self.results)
        lines = ["# Composer fidelity sweep", "",
                 f"- machine: {self.machine}", f"- started {self.started}, finished {self.finished}",
                 f"- each candidate ran {self.window_s:g} s per round, {self.repeats} alternating rounds "
                 "(A, B, A, B); measured = median of its rounds (seconds per learner update, steady state)",
                 f"- pick is right when its measured time is within {PICK_TOLERANCE:.0%} of the measured best", "",
                 f"**{self.summary()}**", "",
                 *([f"The machine's own noise, {noise}.", ""] if (noise := self.noise_line()) else []),
                 *([f"The measurement's own repeatability, {rep}.", ""] if (rep := self.replicate_line()) else []),
                 "predicted = the composer's figure (a host variant's calibration run when the profile has one); "
                 "model = the isolated cells' model of the same variant; cal. / meas. spread = (max - min) / "
                 "median of the calibration / validation rounds of that candidate"
                 + ("; 2nd measured = a second validation of the candidate, right after the first." if twice
                    else "."), "",
                 "| workload | candidate | predicted ms | measured ms | error | model ms | model error | pick | best "
                 "| cal. spread | meas. spread |" + (" 2nd measured ms | 2nd vs 1st |" if twice else ""),
                 "|---|---|---:|---:|---:|---:|---:|:-:|:-:|---:|---:|" + ("---:|---:|" if twice else "")]
        for res in self.results:
            if res.report is None:
                lines.append(f"| {res.point.label} | not validated: {res.error} | | | | | | | | | |"
                             + (" | |" if twice else ""))
                continue
            best = min(res.measured, key=lambda r: r.measured_s) if res.measured else None
            for row in res.report.rows:
                ms = f"{row.measured_s * 1e3:.3f}" if math.isfinite(row.measured_s) else "-"
                err = f"{row.error:+.1%}" if math.isfinite(row.error) else "-"
                model = f"{row.model_s * 1e3:.3f}" if math.isfinite(row.model_s) else "-"
                merr = f"{row.model_error:+.1%}" if math.isfinite(row.model_error) else "-"
                mark = ("yes" if res.pick_ok else "NO") if row.chosen else ""
                cal, meas = (f"{x:.1%}" if math.isfinite(x) else "-" for x in (row.predicted_spread, row.spread))
                second = ""
                if twice:
                    m2 = res.replicate_s(row)
                    second = (f" {m2 * 1e3:.3f} | {_relative_text(m2, row.measured_s)} |" if math.isfinite(m2)
                              else " - | - |")
                lines.append(f"| {res.point.label} | {row.label} | {row.predicted_s * 1e3:.3f} | {ms} | {err} | "
                             f"{model} | {merr} | {'*' if row.chosen else ''} {mark} | {'*' if row is best else ''} "
                             f"| {cal} | {meas} |{second}")
        return "\n".join(lines) + "\n"


def _relative_text(value: float, reference: float) -> str:
    """``(value - reference) / reference`` as a signed percentage, ``-`` when either is not a finite time."""
    if not (math.isfinite(value) and math.isfinite(reference) and reference > 0):
        return "-"
    return f"{(value - reference) / reference:+.1%}"


def machine_line() -> str:
    """What the sweep ran on: CPU model, logical CPUs, load average at the start."""
    from pearl_core.composer.detect import cpu_model

    model = cpu_model()
    try:
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    return f"{model}, {os.cpu_count()} logical CPUs, load average {load} at the start"


def _composer_for(point: SweepPoint, hardware, metric: str, registry: "PluginRegistry | None", cache_dir):
    from pearl_core.algorithms.defaults import default_trainer, hidden_kwargs
    from pearl_core.composer.api import Composer

    composer = Composer(hardware, metric, registry=registry, cache_dir=cache_dir)
    composer.set_actors(point.env_id, point.n_actors, envs_per_actor=point.envs_per_actor)
    assert composer._spaces is not None  # set by set_actors above
    trainer = default_trainer(composer._spaces[1])
    composer.set_train_function(trainer, point.batch_size, replay_ratio=point.replay_ratio,
                                **hidden_kwargs(trainer, list(point.hidden)))
    composer.set_replay(point.replay)
    return composer


def run_sweep(points: Sequence[SweepPoint], *, hardware=None, metric: str = "throughput", window_s: float = 6.0,
              repeats: int = 2, learning_starts: int = 1_000, top: int = 2,
              registry: "PluginRegistry | None" = None, cache_dir=None,
              progress: Callable[[str], None] | None = None,
              after_each: "Callable[[SweepReport], None] | None" = None, replicate: bool = False) -> SweepReport:
    """Plan and validate every workload of ``points``; see the module docstring.

    Args:
        hardware: a hardware spec (path or value); default the detected machine.
        window_s, repeats, learning_starts, top: as :func:`~pearl_core.composer.validate.validate_plan`.
        cache_dir: the profile cache (default: the profiler's).
        progress: called with a line per workload and per run.
        after_each: called with the report so far after each workload (e.g. to write it, so a
            long sweep stopped early keeps what it measured).
        replicate: validate each workload a second time, right after the first (the same candidates,
            rounds and windows): the report then gives how far two measurements of the same runtime plan
            are apart (:meth:`SweepReport.replicate_line`), the floor under the composer's error here.

    Raises:
        PearlError: bad ``window_s``/``repeats`` (before anything runs).
    """
    from pearl_core.composer.validate import validate_plan

    if not (isinstance(window_s, (int, float)) and math.isfinite(window_s) and window_s > 0):
        raise PearlError(f"sweep: window_s = {window_s!r}; expected seconds > 0 (e.g. 6).")
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise PearlError(f"sweep: repeats = {repeats!r}; expected an int >= 1 (e.g. 2).")
    started = datetime.datetime.now().isoformat(timespec="seconds")
    machine = machine_line()
    results = []
    for i, point in enumerate(points):
        if progress is not None:
            progress(f"[{i + 1}/{len(points)}] {point.label}: planning (profiling the host when not cached) ...")
        try:
            composition = _composer_for(point, hardware, metric, registry, cache_dir).run(profile=True)
            report = validate_plan(composition.plan, window_s=window_s, learning_starts=learning_starts,
                                   repeats=repeats, top=top, registry=registry, progress=progress)
            second = (validate_plan(composition.plan, window_s=window_s, learning_starts=learning_starts,
                                    repeats=repeats, top=top, registry=registry, progress=progress)
                      if replicate else None)
        except PearlError as exc:
            results.append(SweepResult(point, None, str(exc).splitlines()[0][:300]))
            if progress is not None:
                progress(f"  not validated: {exc}")
            continue
        res = SweepResult(point, report, replicate=second)
        results.append(res)
        if progress is not None:
            rows = ", ".join(f"{r.label}: {r.predicted_s * 1e3:.3f} vs {r.measured_s * 1e3:.3f} ms"
                             for r in report.rows)
            progress(f"  {rows}; pick {'right' if res.pick_ok else 'WRONG'}")
        if after_each is not None:
            after_each(SweepReport(tuple(results), float(window_s), repeats, machine, started,
                                   f"(in progress: {len(results)} of {len(points)})"))
    finished = datetime.datetime.now().isoformat(timespec="seconds")
    return SweepReport(tuple(results), float(window_s), repeats, machine, started, finished)



# -- the command: `pearl validate --sweep GRID` -----------------------------------------------------

def validate_or_sweep_command(**options: Any) -> None:
    """``pearl validate``: one workload (:func:`~pearl_core.composer.validate.validate_command`), or with
    ``--sweep GRID`` every workload of the grid (:func:`sweep_command`)."""
    from pearl_core.composer.validate import check_options, validate_command

    if options.get("sweep") is None:
        validate_command(**options)
        return
    from rich.console import Console

    from pearl_core.composer.cli import fail

    console = Console(width=max(132, Console().width))
    try:
        check_options(options)
    except PearlError as exc:
        fail(console, exc)
    sweep_command(options, console)


def sweep_command(o: dict[str, Any], console: Any) -> None:
    """``pearl validate --sweep GRID``: every workload of the grid planned and validated; a table and the figures.

    The grid's workloads replace the single-workload options (batch, hidden sizes,
    replay, actors); ``--hardware``, ``--metric``, ``--window``, ``--repeats``,
    ``--top`` and ``--learning-starts`` apply to each. ``--max-error`` bounds
    the worst ``|error|`` of any measured candidate; ``--report`` writes the
    markdown report (atomically).
    """
    from rich.markup import escape
    from rich.table import Table

    from pearl_core.composer.cli import fail
    from pearl_core.fileio import atomic_write

    try:
        points = sweep_points(o["sweep"])
        report = run_sweep(points, hardware=o["hardware"], metric=o["metric"], window_s=o["window"],
                           repeats=o["repeats"], learning_starts=o["learning_starts"], top=o["top"],
                           progress=lambda line: console.print(escape(line)))
    except (PearlError, OSError) as exc:
        fail(console, exc)
    table = Table(title=f"composer fidelity: {len(points)} workloads ({o['sweep']}), {report.window_s:g} s x "
                        f"{report.repeats} rounds per candidate")
    for col in ("workload", "candidate", "predicted ms", "measured ms", "error", "pick"):
        table.add_column(col, justify="left" if col in ("workload", "candidate") else "right")
    for res in report.results:
        if res.report is None:
            table.add_row(escape(res.point.label), f"not validated: {escape(res.error)}", "", "", "", "")
            continue
        for row in res.report.rows:
            ms = f"{row.measured_s * 1e3:.3f}" if math.isfinite(row.measured_s) else "-"
            err = f"{row.error:+.1%}" if math.isfinite(row.error) else "-"
            pick = ("right" if res.pick_ok else "WRONG") if row.chosen else ""
            table.add_row(escape(res.point.label), ("* " if row.chosen else "  ") + escape(row.label),
                          f"{row.predicted_s * 1e3:.3f}", ms, err, pick)
    console.print(table)
    console.print(escape(report.summary()))
    if noise := report.noise_line():
        console.print(escape(f"the machine's own noise: {noise}"))
    if o["report"] is not None:
        try:
            atomic_write(o["report"], report.to_markdown(), make_parents=True)
        except OSError as exc:
            fail(console, exc)
        console.print(f"report written to {escape(str(o['report']))}")
    limit = o["max_error"]
    if limit is not None and not (report.max_error <= limit):
        console.print(f"[red]error:[/red] the worst prediction is off by {report.max_error:.1%} "
                      f"(> --max-error {limit:.0%}).")
        raise SystemExit(1)


def _command_signature() -> None:
    from pearl_core.composer.validate import validate_command

    validate_or_sweep_command.__signature__ = validate_command.__signature__  # type: ignore[attr-defined]
    validate_or_sweep_command.__annotations__ = dict(validate_command.__annotations__)
    validate_or_sweep_command.__doc__ = validate_command.__doc__


_command_signature()
