"""Profiled cost cells: the cache, present vs described devices, the host-CPU tuning, validate's measurement."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from pearl_core.algorithms import DQN
from pearl_core.composer import HardwareSpec, Plan, make_plan, workload_for_env
from pearl_core.composer.detect import detect_hardware
from pearl_core.composer.matrix import CostCell, DeviceCosts, DeviceRow
from pearl_core.composer.profiling import median_time, present_device, profiler_for
from pearl_core.composer.spec import DeviceSpec
from pearl_core.composer.tuning import Variant, host_variants, pick_variant
from pearl_core.composer.validate import ValidationReport, ValidationRow, measured_iteration_s
from pearl_core.errors import SpecError


@pytest.fixture(scope="module")
def workload():
    return workload_for_env("CartPole-v1", 32, trainer=DQN, trainer_kwargs={"hidden_sizes": (32, 32)},
                            capacity=4096, insert_batch=2)


@pytest.fixture(scope="module")
def spec():
    return detect_hardware()


def _host(spec):
    return next(d for d in spec.devices if d.name == spec.host)


def test_workload_records_the_trainer_for_profiling(workload):
    assert workload.trainer == "pearl_core.algorithms.dqn:DQN"
    assert workload.trainer_kwargs == {"hidden_sizes": [32, 32]}
    again = type(workload).from_dict(json.loads(json.dumps(workload.to_dict())))
    assert again.trainer == workload.trainer and again.trainer_kwargs == workload.trainer_kwargs


def test_present_device_matches_detected_names_and_aliases(spec):
    host = _host(spec)
    assert present_device(host) is not None
    absent = DeviceSpec("xeon", "cpu", 2**30, 10.0, 20.0, cores=8)
    assert present_device(absent) is None
    alias = DeviceSpec("epyc", "cpu", 2**30, 10.0, 20.0, cores=2, options={"detected_as": host.name})
    assert present_device(alias) is not None


def test_profiled_row_is_cached_and_reused(tmp_path, spec, workload, monkeypatch):
    host = _host(spec)
    prof = profiler_for(spec, iterations=20, warmup=2, cache_dir=tmp_path)
    row = prof(host, workload)
    assert isinstance(row, DeviceRow) and row.device == host.name
    for name, cell in row.cells():
        assert cell is not None and cell.source == "profiled" and cell.latency_s > 0, name
    cfg, costs = row.config, row.costs
    assert cfg["learner_threads"] >= 1 and 1 <= cfg["rm_threads"] <= workload.batch_size
    assert costs.actor_step_s > 0 and costs.msg_hop_s > 0 and costs.worker_loop_threads == cfg["learner_threads"]
    assert costs.learner_at(cfg["learner_threads"]) == row.learner.latency_s
    assert not [k for k in cfg if k.startswith(("run_", "learner_s_", "co_time"))]  # named records, no string keys
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1 and not list(tmp_path.glob("*.tmp"))

    _, backend, _ = present_device(host)

    def boom(*a, **k):
        raise AssertionError("the cache should have answered")

    monkeypatch.setattr(type(backend), "measure_primitive", boom)
    assert profiler_for(spec, iterations=20, warmup=2, cache_dir=tmp_path)(host, workload) == row
    # Another workload is another key: it must measure (and here, fail loudly).
    other = workload_for_env("CartPole-v1", 16, trainer=DQN, trainer_kwargs={"hidden_sizes": (32, 32)},
                             capacity=4096)
    with pytest.raises(AssertionError, match="cache should have answered"):
        profiler_for(spec, iterations=20, warmup=2, cache_dir=tmp_path)(host, other)


def test_damaged_cache_entry_is_measured_again(tmp_path, spec, workload, monkeypatch):
    host = _host(spec)
    prof = profiler_for(spec, iterations=10, warmup=1, cache_dir=tmp_path)
    prof(host, workload)
    (entry,) = tmp_path.glob("*.json")
    entry.write_text("{ not json", encoding="utf-8")
    row = prof(host, workload)
    assert row is not None and json.loads(entry.read_text(encoding="utf-8"))["row"]["device"] == host.name


def test_absent_devices_are_left_to_the_analytic_models(tmp_path, workload):
    what_if = HardwareSpec.load("examples/hardware/cpu-gpu-fpga.toml")
    prof = profiler_for(what_if, iterations=5, cache_dir=tmp_path)
    assert all(prof(d, workload) is None for d in what_if.devices)
    plan = make_plan(what_if, workload, profiler=prof)
    assert {c.source for r in plan.matrix.rows for _, c in r.cells() if c is not None} == {"analytic"}
    assert not list(tmp_path.iterdir())


def test_profiler_rejects_bad_iterations(spec):
    with pytest.raises(SpecError, match="iterations = 0"):
        profiler_for(spec, iterations=0)


def test_median_time_runs_setup_untimed():
    calls = []
    t = median_time(lambda: calls.append("f"), 5, warmup=2, setup=lambda: calls.append("s"))
    assert t >= 0 and calls == ["s", "f"] * 7


# -- host tuning -------------------------------------------------------------------------------


def _row(learner_s_threads_2=0.7e-3):
    s, u, n = CostCell(50e-6, 12, "given"), CostCell(20e-6, 12, "given"), CostCell(20e-6, 12, "given")
    learner = CostCell(1e-3, 12, "given")
    costs = DeviceCosts(30e-6, 40e-6, ((1, 1e-3), (2, learner_s_threads_2)))
    return DeviceRow("cpu0", "cpu", s, u, n, learner, s, u, n, learner, costs=costs)


def test_host_variants_follow_the_documented_model(workload):
    dev = DeviceSpec("cpu0", "cpu", 2**30, 6.0, 12.0, cores=2, threads=2)
    vs = host_variants(dev, _row(), workload)
    # one actor on two cores leaves one core: one learner thread (actors keep their cores)
    assert {(v.setting, v.learner_threads) for v in vs} == {(1, 1), (2, 1)}
    dev = DeviceSpec("cpu0", "cpu", 2**30, 6.0, 12.0, cores=3, threads=3)
    vs = host_variants(dev, _row(), workload)
    assert {(v.setting, v.learner_threads) for v in vs} == {(1, 1), (2, 1), (1, 2), (2, 2)}
    s, u, n, h, A = 50e-6, 20e-6, 20e-6, 40e-6, 2 * 30e-6
    by = {(v.setting, v.learner_threads): v for v in vs}
    # setting 2, one thread: the worker's serial path s+u+n+L+h binds (CPU demand / 2 is smaller).
    assert by[2, 1].predicted_s == pytest.approx(s + u + n + 1e-3 + h)
    assert by[2, 1].bound == "worker"
    # setting 1, two threads on three cores: the whole machine's demand binds.
    demand = (2 * 0.7e-3 + 2 * h + (s + u + n + 2 * h) + A) / 3
    assert by[1, 2].predicted_s == pytest.approx(max(0.7e-3 + 2 * h, demand))
    assert all(v.throughput == pytest.approx(workload.batch_size / v.predicted_s) for v in vs)
    assert by[1, 1].traffic_bytes > 0 and by[2, 1].traffic_bytes == 0


def test_pick_variant_by_metric_and_traffic_tie_break():
    a = Variant(1, 1, 1, 1e-3, 1000.0, 12.0, 500, "learner")
    b = Variant(2, 1, 1, 1e-3, 1000.0, 12.0, 0, "worker")
    c = Variant(2, 2, 2, 0.9e-3, 1100.0, 24.0, 0, "worker")
    assert pick_variant((a, b), "throughput") == 1  # a tie, broken by the lower traffic
    assert pick_variant((a, b, c), "throughput") == 2
    assert pick_variant((a, b, c), "power_efficiency") == 1  # c is faster but burns twice the power
    near = Variant(1, 1, 1, 0.98e-3, 1020.0, 12.0, 500, "learner")  # 2% ahead: within TIE, a tie
    far = Variant(1, 1, 1, 0.95e-3, 1052.0, 12.0, 500, "learner")  # 5% ahead: a measured lead
    assert pick_variant((near, b), "throughput") == 1 and pick_variant((far, b), "throughput") == 0


def test_plan_carries_the_tuning_and_the_runtime_plan_follows_it(workload):
    dev = DeviceSpec("cpu0", "cpu", 2**30, 6.0, 12.0, cores=4, threads=4)
    from pearl_core.composer.matrix import AssignmentMatrix
    from pearl_core.composer.spec import LinkSpec

    spec = HardwareSpec((dev,), (LinkSpec("cpu0", "cpu0", 5e-6, 5e9),), host="cpu0")

    matrix = AssignmentMatrix((_row(learner_s_threads_2=0.4e-3),), comm_inclusive=True)
    plan = make_plan(spec, workload, matrix=matrix)
    assert plan.variants and plan.variant is not None
    best = min(plan.variants, key=lambda v: v.predicted_s)
    assert plan.variant == best and plan.variant.learner_threads == 2
    rp = plan.runtime_plan()
    assert (rp.setting, rp.learner_threads, rp.rm_threads) == (best.setting, best.learner_threads, best.rm_threads)
    again = Plan.from_json(plan.to_json())
    assert again == plan and again.content_hash() == plan.content_hash() and again.variant == plan.variant


def test_plans_without_a_profiled_host_have_no_tuning(workload):
    plan = make_plan(HardwareSpec.load("examples/hardware/cpu-gpu-fpga.toml"), workload)
    assert plan.variants == () and plan.variant is None and plan.setting == plan.decision.setting


# -- validate's measurement --------------------------------------------------------------------


def test_measured_iteration_uses_the_steady_part(tmp_path):
    p = tmp_path / "metrics.csv"
    p.write_text("env_steps,updates,wall_s\n1000,0,1.0\n2000,400,3.0\n3000,900,4.0\n4000,1400,5.0\n5000,1900,6.0\n")
    s, n = measured_iteration_s(p)
    assert n == 1000 and s == pytest.approx(2.0 / 1000)  # from the second row with updates to the last
    p.write_text("env_steps,updates,wall_s\n1000,0,1.0\n2000,400,3.0\n")
    s, n = measured_iteration_s(p)
    assert math.isnan(s) and n == 0


def test_validation_report_errors_and_ranking():
    rows = (ValidationRow("a", 1, 1, 1, 1.0e-3, 1.1e-3, 100, False),
            ValidationRow("b", 2, 1, 1, 0.9e-3, 1.0e-3, 100, True),
            ValidationRow("c", 2, 2, 2, 1.2e-3, 1.04e-3, 100, False))
    rep = ValidationReport(rows, 5.0)
    assert rep.chosen.label == "b" and rep.chosen_error == pytest.approx(0.1)
    assert rep.measured_best.label == "b" and rep.top_agrees
    worse = ValidationReport((rows[0], rows[1].__class__("b", 2, 1, 1, 0.9e-3, 1.3e-3, 100, True)), 5.0)
    assert worse.measured_best.label == "a" and not worse.top_agrees


@pytest.mark.slow
def test_validate_runs_every_variant_and_measures_it(tmp_path):
    """The mechanism only (a tiny network, 3 s windows): every host variant runs and gets a finite measurement."""
    from pearl_core.composer.validate import validate_plan

    wl = workload_for_env("CartPole-v1", 16, trainer=DQN, trainer_kwargs={"hidden_sizes": (16,)}, capacity=2048,
                          insert_batch=2)
    spec = detect_hardware()
    plan = make_plan(spec, wl, profiler=profiler_for(spec, iterations=20, warmup=2, cache_dir=tmp_path))
    assert plan.variants
    lines = []
    report = validate_plan(plan, window_s=3.0, learning_starts=100, progress=lines.append)
    assert len(report.rows) == len(plan.variants) == len(lines)
    assert sum(r.chosen for r in report.rows) == 1 and report.chosen.setting == plan.setting
    for r in report.rows:
        assert math.isfinite(r.measured_s) and r.measured_s > 0 and r.updates > 0, r
        assert math.isfinite(r.error)


def test_editing_the_trainer_source_invalidates_its_cached_cells(tmp_path, monkeypatch):
    from pearl_core.composer import profiling

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    src = pkg / "my_trainer.py"
    src.write_text("from pearl_core.algorithms import DQN\n\nclass Mine(DQN):\n    pass\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    first = profiling._source_digest("my_trainer:Mine".replace("my_trainer", "pkg.my_trainer"))
    src.write_text(src.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    second = profiling._source_digest("pkg.my_trainer:Mine")
    assert first and second and first != second
    assert profiling._source_digest("no_such_module_here:X") == ""


def test_a_lead_within_the_calibration_noise_is_a_tie():
    # The calibration rounds of a variant spread by (max - min) / median: a lead they cover is not measured.
    s1 = Variant(1, 1, 1, 0.94e-3, 1064.0, 12.0, 500, "run", spread=0.08)  # 6% ahead, rounds spread 8%
    s2 = Variant(2, 1, 1, 1e-3, 1000.0, 12.0, 0, "run", spread=0.02)
    assert pick_variant((s1, s2), "throughput") == 1  # tied: the lower traffic wins
    quiet = dataclasses.replace(s1, spread=0.01)
    assert pick_variant((quiet, s2), "throughput") == 0  # the same 6% lead over quiet rounds: measured
    capped = Variant(1, 1, 1, 0.85e-3, 1176.0, 12.0, 500, "run", spread=0.5)  # 15% ahead: beyond NOISE_CAP
    assert pick_variant((capped, s2), "throughput") == 0
    assert Variant.from_dict(s1.to_dict()) == s1  # the spread goes into the plan and back


def test_a_tie_at_equal_traffic_goes_to_the_higher_score_not_to_fewer_threads():
    one = Variant(2, 1, 1, 1e-3, 1000.0, 12.0, 0, "run", spread=0.08)
    two = Variant(2, 2, 2, 0.95e-3, 1053.0, 24.0, 0, "run", spread=0.08)  # 5% ahead, within the 8% spread: tied
    assert pick_variant((one, two), "throughput") == 1
    assert pick_variant((two, one), "throughput") == 0
    # ... and traffic still comes first: a tied setting-1 variant with the higher score loses to setting 2.
    s1 = Variant(1, 2, 1, 0.95e-3, 1053.0, 24.0, 500, "run", spread=0.08)
    assert pick_variant((s1, one), "throughput") == 1
