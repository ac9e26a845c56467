"""``pearl validate --sweep``: the grid, the report's figures, the CLI, and the calibrated host variants."""

from __future__ import annotations

import ast
import math
import os
import pathlib
import subprocess
import sys

import pytest
from rich.console import Console
from typer.testing import CliRunner

from pearl_core.cli import app
from pearl_core.composer.matrix import CostCell, DeviceCosts, DeviceRow, RunMeasurement
from pearl_core.composer.spec import DeviceSpec
from pearl_core.composer.sweep import PICK_TOLERANCE, SweepPoint, SweepReport, SweepResult, sweep_points
from pearl_core.composer.tuning import Variant, host_variants
from pearl_core.composer.validate import ValidationReport, ValidationRow
from pearl_core.composer.workload import Workload
from pearl_core.errors import SpecError
from pearl_core.runtime.config import Setting

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_grids_cover_the_issue_grid():
    dqn = sweep_points("dqn")
    assert len(dqn) == 48 and len(set(dqn)) == 48
    assert {p.batch_size for p in dqn} == {32, 128, 512}
    assert {p.hidden for p in dqn} == {(64, 64), (256, 256)}
    assert {p.replay for p in dqn} == {"uniform", "prioritized"}
    assert {p.n_actors for p in dqn} == {1, 2} and {p.envs_per_actor for p in dqn} == {1, 8}
    assert {p.env_id for p in dqn} == {"CartPole-v1"}
    assert {p.env_id for p in sweep_points("ddpg")} == {"Pendulum-v1"}
    assert len(sweep_points("full")) == 96
    assert set(sweep_points("quick")) <= set(dqn)
    with pytest.raises(SpecError, match="unknown; expected one of"):
        sweep_points("everything")


def _row(label, predicted, measured, chosen, model=math.nan):
    return ValidationRow(label, Setting(1 if "1" in label else 2), 1, 1, predicted, measured, 100, chosen,
                         model_s=model)


def _result(*rows, point=SweepPoint("CartPole-v1", 32, (64, 64), "uniform", 1, 1)):
    return SweepResult(point, ValidationReport(tuple(rows), 5.0))


def test_pick_is_right_within_three_percent_of_the_measured_best():
    right = _result(_row("setting 1", 1.0, 1.02, True), _row("setting 2", 1.1, 1.0, False))
    wrong = _result(_row("setting 1", 1.0, 1.04, True), _row("setting 2", 1.1, 1.0, False))
    assert PICK_TOLERANCE == 0.03
    assert right.pick_ok is True and wrong.pick_ok is False
    unmeasured = _result(_row("setting 1", 1.0, math.nan, True), _row("setting 2", 1.1, 1.0, False))
    assert unmeasured.pick_ok is None


def test_report_figures_count_every_measured_candidate():
    a = _result(_row("setting 1", 1.1, 1.0, True, model=0.5), _row("setting 2", 0.8, 1.0, False, model=0.9))
    b = _result(_row("setting 1", 2.0, 2.5, False), _row("setting 2", 2.0, 2.0, True))
    failed = SweepResult(SweepPoint("Pendulum-v1", 32, (64, 64), "uniform", 1, 1), None, "the run failed: boom")
    rep = SweepReport((a, b, failed), 5.0, 2, "test machine")
    assert len(rep.validated) == 2
    assert rep.pick_share == 1.0  # a's pick ties the best (1.0), b's pick is the best (2.0 < 2.5)
    errors = sorted(rep.errors())
    assert errors == pytest.approx(sorted([0.1, 0.2, 0.2, 0.0]))
    assert rep.median_error == pytest.approx(0.15) and rep.max_error == pytest.approx(0.2)
    assert sorted(rep.errors(chosen_only=True)) == pytest.approx([0.0, 0.1])
    assert sorted(rep.errors(model=True)) == pytest.approx([0.1, 0.5])
    text = rep.to_markdown()
    assert "not validated: the run failed: boom" in text and "test machine" in text
    assert "| 1100.000 | 1000.000 | +10.0% | 500.000 | -50.0% |" in text  # seconds shown as ms
    assert "2 of 3 workloads validated" in rep.summary()


def test_report_gives_the_rounds_own_spread_beside_the_errors():
    import dataclasses

    a = _result(dataclasses.replace(_row("setting 1", 1.1, 1.0, True), predicted_spread=0.04, spread=0.30),
                dataclasses.replace(_row("setting 2", 0.8, 1.0, False), spread=0.10))  # not a calibration run
    b = _result(dataclasses.replace(_row("setting 1", 2.0, 2.5, False), predicted_spread=0.12),
                _row("setting 2", 2.0, 2.0, True))  # one round: no spread
    rep = SweepReport((a, b), 5.0, 2, "test machine")
    assert sorted(rep.spreads()) == pytest.approx([0.10, 0.30])
    assert sorted(rep.spreads(calibration=True)) == pytest.approx([0.04, 0.12])
    line = rep.noise_line()
    assert "validation rounds of one candidate, (max - min) / median: median 20.0%, max 30.0% (2 candidates)" in line
    assert "calibration rounds" in line and "median 8.0%, max 12.0%" in line
    text = rep.to_markdown()
    assert "The machine's own noise, validation rounds" in text
    assert "| 1100.000 | 1000.000 | +10.0% | - | - | * yes | * | 4.0% | 30.0% |" in text
    assert "| 800.000 | 1000.000 | -20.0% | - | - |   |  | - | 10.0% |" in text
    assert "noise" not in SweepReport((_result(_row("setting 1", 1.0, 1.0, True)),), 5.0, 1).to_markdown()


def test_pick_share_counts_wrong_picks():
    a = _result(_row("setting 1", 1.0, 1.2, True), _row("setting 2", 1.1, 1.0, False))
    b = _result(_row("setting 1", 1.0, 1.0, True), _row("setting 2", 1.1, 1.1, False))
    assert SweepReport((a, b), 5.0, 2).pick_share == 0.5


def _host_row(runs=()):
    cell = CostCell(1e-4, 10.0, "profiled")
    config = {"co_learner_threads": 1, "rm_threads": 1, "learner_threads": 1}
    costs = DeviceCosts(5e-5, 2e-5, ((1, 2e-4),), worker_loop_threads=1, runs=tuple(runs))
    return DeviceRow("cpu0", "cpu", cell, cell, cell, cell, cell, cell, cell, cell, config=config, costs=costs)


def test_host_variants_take_a_calibration_run_and_keep_the_model():
    dev = DeviceSpec("cpu0", "cpu", 2**34, 5, 20, cores=2, threads=2)
    wl = Workload(batch_size=32, obs_bytes=16, action_bytes=8, n_actors=1)
    plain = {(v.setting, v.learner_threads): v for v in host_variants(dev, _host_row(), wl)}
    runs = (RunMeasurement(1, 1, 9e-4, rounds=2, spread=0.05), RunMeasurement(2, 1, 7e-4, rounds=1))
    calibrated = {(v.setting, v.learner_threads): v for v in host_variants(dev, _host_row(runs), wl)}
    assert set(plain) == set(calibrated) == {(Setting(1), 1), (Setting(2), 1)}
    assert calibrated[Setting(1), 1].spread == 0.05 and calibrated[Setting(2), 1].spread == 0.0  # rounds' noise
    for key, run in (((Setting(1), 1), 9e-4), ((Setting(2), 1), 7e-4)):
        assert calibrated[key].predicted_s == run and calibrated[key].bound == "run"
        assert calibrated[key].model_s == pytest.approx(plain[key].predicted_s)
        assert plain[key].bound != "run" and plain[key].model_s == pytest.approx(plain[key].predicted_s)
    for bad in ({"seconds": float("nan")}, {"seconds": -1.0}):  # a run record must hold a measurement
        with pytest.raises(SpecError, match="RunMeasurement"):
            RunMeasurement(1, 1, **bad)
    for v in host_variants(dev, _host_row((RunMeasurement(1, 1, None), RunMeasurement(2, 1, 0.0))), wl):
        assert v.bound != "run"  # a record without seconds (or with none measurable) leaves the model's figure


def test_variant_round_trips_and_reads_plans_without_model_s():
    v = Variant(Setting(2), 1, 1, 1e-3, 32e3, 10.0, 0, "run", 8e-4)
    assert Variant.from_dict(v.to_dict()) == v
    old = {k: val for k, val in v.to_dict().items() if k != "model_s"}
    assert math.isnan(Variant.from_dict(old).model_s)


def test_cli_refuses_a_report_without_a_sweep_and_an_unknown_grid(tmp_path):
    runner = CliRunner()
    out = tmp_path / "r.md"
    res = runner.invoke(app, ["validate", "--report", str(out)])
    assert res.exit_code != 0 and "no --sweep was given" in res.output and not out.exists()
    res = runner.invoke(app, ["validate", "--sweep", "nope", "--report", str(out)])
    assert res.exit_code != 0 and "unknown; expected one of" in res.output and not out.exists()


@pytest.mark.slow
def test_benchmark_measures_a_workload_and_writes_the_report(tmp_path):
    """One real workload: profiled (with the calibration runs), both host variants run, the report written."""
    out = tmp_path / "fidelity.md"
    env = dict(os.environ, PEARL_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "composer_fidelity.py"), "--grid", "quick",
                           "--only", "0:1", "--window", "1.5", "--repeats", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = out.read_text(encoding="utf-8")
    assert "1 of 1 workloads validated" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("| CartPole-v1 b32 64-64 uni 1a x1 | setting")]
    # settings 1 and 2, each with every learner thread count calibrated (DQN's native step yields to the
    # actors, so its variants on the actors' cores are candidates too: 1 .. the machine's threads)
    counts = {n: sum(f"setting {n}," in ln for ln in rows) for n in (1, 2)}
    assert counts[1] == counts[2] >= 1 and len(rows) == 2 * counts[1], text
    for ln in rows:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        predicted, measured, model = float(cells[2]), float(cells[3]), float(cells[5])
        assert predicted > 0 and measured > 0 and model > 0
        assert predicted != model  # the calibration run, not the isolated cells' model, is the prediction


@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
def test_calibration_runs_in_a_child_and_measures_a_variant():
    from pearl_core.composer.calibrate import calibrate_host_variants
    from pearl_core.composer.workload import workload_for_env

    wl = workload_for_env("CartPole-v1", 32, hidden_sizes=(16, 16), replay="uniform", insert_batch=2)
    got = calibrate_host_variants(wl, [(2, 1)], window_s=1.0, rounds=1)
    (rec,) = got
    assert (rec.setting, rec.threads, rec.rounds) == (2, 1, 1) and 1e-6 < rec.seconds < 1.0
    assert rec.spread == 0.0 and rec.floor is None  # one round: no spread


def test_a_failing_calibration_says_why():
    from pearl_core.composer.calibrate import calibrate_host_variants
    from pearl_core.errors import PearlError

    wl = Workload(batch_size=32, obs_bytes=16, action_bytes=8, env_id="CartPole-v1",
                  trainer="pearl_no_such_module:Trainer")
    with pytest.raises(PearlError, match=r"calibration runs failed \(exit [1-9].*pearl_no_such_module"):
        calibrate_host_variants(wl, [(1, 1)], window_s=1.0, rounds=1)
    assert calibrate_host_variants(wl, []) == ()


UNGUARDED = """
from pearl_core.algorithms import DQN
from pearl_core.composer import Composer

# Composing at the top level of a script (no __main__ guard) is allowed: only training needs the guard.
composer = Composer(profile_iterations=200)
composer.set_actors("CartPole-v1", n_actors=1)
composer.set_train_function(DQN, batch_size=32, replay_ratio=0.5, hidden_sizes=[16, 16])
composer.set_replay("uniform", capacity=10_000)
plan = composer.run().plan
print("VARIANTS", sorted((int(v.setting), v.learner_threads, v.bound) for v in plan.variants))
"""


@pytest.mark.slow
def test_an_unguarded_script_composes_with_calibration_runs(tmp_path):
    """The calibration's workers must not re-run the caller's script (they run in a child without one)."""
    script = tmp_path / "compose_at_top_level.py"
    script.write_text(UNGUARDED)
    env = dict(os.environ, PEARL_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("VARIANTS ")), None)
    assert line is not None, proc.stdout[-3000:]
    variants = ast.literal_eval(line[len("VARIANTS "):])
    threads = sorted(t for s, t, _ in variants if s == 1)
    assert threads and threads == sorted(t for s, t, _ in variants if s == 2) and threads[0] == 1, variants
    assert all(bound == "run" for _, _, bound in variants), variants  # every variant calibrated


def test_cli_sweep_prints_the_table_writes_the_report_and_bounds_the_error(tmp_path, monkeypatch):
    import pearl_core.composer.sweep as sweep

    seen = {}

    def fake_run_sweep(points, **kwargs):  # the measuring part is tested above; this checks the command
        seen.update(kwargs, n=len(points))
        return SweepReport((_result(_row("setting 1", 1.3e-3, 1.0e-3, True),
                                    _row("setting 2", 1.2e-3, 1.1e-3, False)),),
                           kwargs["window_s"], kwargs["repeats"], "test machine")

    monkeypatch.setattr(sweep, "run_sweep", fake_run_sweep)
    out = tmp_path / "sub" / "fidelity.md"
    res = CliRunner().invoke(app, ["validate", "--sweep", "quick", "--window", "2", "--repeats", "3", "--report",
                                   str(out)])
    assert res.exit_code == 0, res.output
    assert seen["n"] == 8 and seen["window_s"] == 2.0 and seen["repeats"] == 3
    assert "+30.0%" in res.output and "right" in res.output and "1 of 1 workloads validated" in res.output
    assert out.read_text(encoding="utf-8").startswith("# Composer fidelity sweep")
    res = CliRunner().invoke(app, ["validate", "--sweep", "quick", "--max-error", "0.25"])
    assert res.exit_code == 1 and "worst prediction is off by 30.0%" in res.output


def test_validate_keeps_each_candidates_rounds_spread_and_its_calibration_spread(monkeypatch):
    """The measured rounds' (max - min) / median per candidate, and the calibration rounds' behind its prediction."""
    import dataclasses

    from pearl_core.algorithms import DQN
    from pearl_core.composer import make_plan, workload_for_env
    from pearl_core.composer import validate as validate_mod
    from pearl_core.composer.detect import detect_hardware

    wl = workload_for_env("CartPole-v1", 16, trainer=DQN, trainer_kwargs={"hidden_sizes": (16,)}, capacity=2048,
                          insert_batch=2)
    spec = detect_hardware()
    runs = (RunMeasurement(1, 1, 9e-4, rounds=3, spread=0.06), RunMeasurement(2, 1, 7e-4, rounds=3, spread=0.02))
    plan = make_plan(spec, wl, profiler=lambda dev, w: dataclasses.replace(_host_row(runs), device=dev.name)
                     if dev.name == spec.host else None)
    calibrated = {(int(v.setting), v.learner_threads): v for v in plan.variants if v.bound == "run"}
    assert {(1, 1), (2, 1)} <= set(calibrated)
    rounds = {1: [1.0e-3, 1.2e-3, 0.9e-3], 2: [8e-4, 8e-4, 8e-4]}  # per setting, learner 1 thread

    def fake_measure_run(w, rp, **kwargs):
        times = rounds.get(int(rp.setting)) if rp.learner_threads == 1 else None
        return (times.pop(0), 100) if times else (1e-3, 100)

    monkeypatch.setattr(validate_mod, "measure_run", fake_measure_run)
    report = validate_mod.validate_plan(plan, window_s=1.0, repeats=3)
    rows = {(int(r.setting), r.learner_threads): r for r in report.rows}
    assert rows[(1, 1)].measured_s == pytest.approx(1.0e-3)
    assert rows[(1, 1)].spread == pytest.approx(0.3e-3 / 1.0e-3) and rows[(2, 1)].spread == 0.0
    assert rows[(1, 1)].predicted_spread == pytest.approx(0.06) and rows[(2, 1)].predicted_spread == pytest.approx(0.02)
    one_round = validate_mod.validate_plan(plan, window_s=1.0, repeats=1)
    assert all(math.isnan(r.spread) for r in one_round.rows)  # one round: no spread to give
    console = Console(record=True, width=200)
    validate_mod.render_report(report, console)  # `pearl validate` shows each candidate's rounds' spread
    text = console.export_text()
    assert "rounds' spread" in text
    assert any("setting 1, learner 1 thread(s)" in ln and "30.0%" in ln for ln in text.splitlines()), text


def _measured_again(result, *times):
    """``result`` with a second validation whose candidates (same labels, same order) measured ``times``."""
    import dataclasses

    rows = tuple(dataclasses.replace(r, measured_s=t) for r, t in zip(result.report.rows, times))
    return dataclasses.replace(result, replicate=ValidationReport(rows, 5.0))


def test_a_second_validation_gives_the_measurements_own_repeatability():
    a = _measured_again(_result(_row("setting 1", 1.0, 1.0, True), _row("setting 2", 1.1, 2.0, False)), 1.2, 1.5)
    # b: the first validation's best (setting 2) is more than 3% behind in the second
    b = _measured_again(_result(_row("setting 1", 2.0, 2.5, False), _row("setting 2", 2.0, 2.0, True)), 2.0, 2.2)
    c = _result(_row("setting 1", 1.0, 1.0, True))  # validated once: no figures of its own
    rep = SweepReport((a, b, c), 5.0, 2, "test machine")
    assert sorted(rep.replicate_errors()) == pytest.approx(sorted([0.2, 0.25, 0.2, 0.1]))
    assert a.replicate_pick_ok is True and b.replicate_pick_ok is False and c.replicate_pick_ok is None
    line = rep.replicate_line()
    assert "|error| over 4 candidates median 20.0%, max 25.0%" in line and "in 1 of 2 workloads (50%)" in line
    text = rep.to_markdown()
    assert "The measurement's own repeatability, a second validation" in text
    assert "| 1000.000 | 1000.000 | +0.0% | - | - | * yes | * | - | - | 1200.000 | +20.0% |" in text
    assert text.count("| - | - |\n") >= 1  # c's row: no second measurement
    once = SweepReport((c,), 5.0, 2)
    assert once.replicate_errors() == [] and once.replicate_line() == ""
    assert "2nd measured" not in once.to_markdown() and "repeatability" not in once.to_markdown()


def test_a_second_measurement_that_failed_counts_for_neither_figure():
    a = _measured_again(_result(_row("setting 1", 1.0, 1.0, True), _row("setting 2", 1.1, 2.0, False)), 1.1,
                        math.nan)
    rep = SweepReport((a,), 5.0, 2)
    assert rep.replicate_errors() == pytest.approx([0.1]) and a.replicate_pick_ok is None
    assert rep.replicate_line().endswith("median 10.0%, max 10.0%")  # no workload to judge a pick by
    assert "| 1100.000 | 2000.000 | -45.0% | - | - |   |  | - | - | - | - |" in rep.to_markdown()


def test_run_sweep_validates_twice_when_asked(monkeypatch):
    import types

    import pearl_core.composer.sweep as sweep
    import pearl_core.composer.validate as validate_mod

    calls = []
    reports = iter([ValidationReport((_row("setting 1", 1.0, 1.0, True),), 5.0),
                    ValidationReport((_row("setting 1", 1.0, 1.3, True),), 5.0)] * 2)

    def fake_validate_plan(plan, **kwargs):
        calls.append(kwargs["repeats"])
        return next(reports)

    composer = types.SimpleNamespace(run=lambda profile: types.SimpleNamespace(plan="the plan"))
    monkeypatch.setattr(sweep, "_composer_for", lambda *a: composer)
    monkeypatch.setattr(validate_mod, "validate_plan", fake_validate_plan)
    point = SweepPoint("CartPole-v1", 32, (64, 64), "uniform", 1, 1)
    rep = sweep.run_sweep([point], window_s=1.0, repeats=3, replicate=True)
    assert calls == [3, 3] and rep.replicate_errors() == pytest.approx([0.3])
    calls.clear()
    assert sweep.run_sweep([point], window_s=1.0, repeats=2).results[0].replicate is None and calls == [2]
