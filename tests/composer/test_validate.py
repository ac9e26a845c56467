"""``pearl validate`` (:mod:`pearl_core.composer.validate`) measures the top runnable candidates and compares
their order with the model's.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from backend_registry import registry_with, TstBackend

from pearl_core.backend import Availability, DeviceInfo
from pearl_core.composer import AssignmentMatrix, DeviceSpec, HardwareSpec, LinkSpec
from pearl_core.composer import make_plan
from pearl_core.errors import PearlError


# =========================================================================== pearl validate
class Detects(TstBackend):
    """Available; detects n0 but not m0."""

    def availability(self):
        return Availability.yes()

    def devices(self):
        return [DeviceInfo("n0", "tst", self.name, "present")]


def validate_setup():
    """Host h0, detected n0, absent m0; Algorithm 1 ranks (h0, n0) < (h0, m0) < (n0, n0) < ..."""
    from pearl_core.algorithms import DQN
    from pearl_core.composer import workload_for_env

    devices = (DeviceSpec("h0", "cpu", 2**34, 10, 50, cores=4),
               DeviceSpec("n0", "tst", 1000, 5, 15, index=0, mem_bandwidth_Bps=1e11),
               DeviceSpec("m0", "tst", 1000, 5, 15, index=1, mem_bandwidth_Bps=1e11))
    spec = HardwareSpec(devices, (LinkSpec("h0", "h0", 1e-6, 1e10), LinkSpec("h0", "n0", 1e-6, 1e10),
                                  LinkSpec("h0", "m0", 1e-6, 1e10)), host="h0")
    table = {"h0": dict(rm_sample=1, rm_update=1, rm_insert=1, learner=10, co_rm_sample=1, co_rm_update=1,
                        co_rm_insert=1, co_learner=20),
             "n0": dict(rm_sample=5, rm_update=5, rm_insert=5, learner=2, co_rm_sample=5, co_rm_update=4,
                        co_rm_insert=5, co_learner=4),
             "m0": dict(rm_sample=6, rm_update=6, rm_insert=6, learner=2.5, co_rm_sample=6, co_rm_update=6,
                        co_rm_insert=6, co_learner=5)}
    matrix = AssignmentMatrix.from_table(table, kinds={"h0": "cpu", "n0": "tst", "m0": "tst"}, unit_s=1e-3)
    wl = workload_for_env("CartPole-v1", 16, trainer=DQN, trainer_kwargs={"hidden_sizes": (16,)}, capacity=2048,
                          insert_batch=2)
    reg = registry_with(Detects)
    plan = make_plan(spec, wl, matrix=matrix, registry=reg)
    assert [(c.rm_device, c.learner_device) for c in plan.decision.ranking()[:3]] == [
        ("h0", "n0"), ("h0", "m0"), ("n0", "n0")]
    return plan, reg


def fake_runtime(monkeypatch, per_update_s):
    """Replace the ParallelRuntime with one that writes a metrics.csv (no process, no clock)."""
    ran = []

    class FakeRuntime:
        def __init__(self, config, plan, **kwargs):
            self.config, self.plan = config, plan

        def run(self):
            ran.append((int(self.plan.setting), self.plan.learner_device))
            s = per_update_s[int(self.plan.setting)]
            log = Path(self.config.log_dir)
            log.mkdir(parents=True, exist_ok=True)
            rows = [(i * 1000, i * 100, 1.0 + i * 100 * s) for i in range(5)]
            (log / "metrics.csv").write_text("env_steps,updates,wall_s\n"
                                             + "".join(f"{a},{b},{c!r}\n" for a, b, c in rows), encoding="utf-8")

    monkeypatch.setattr("pearl_core.runtime.parallel.ParallelRuntime", FakeRuntime)
    return ran


def test_validate_measures_the_top_two_runnable_candidates_and_compares_the_order(monkeypatch):
    from rich.console import Console

    from pearl_core.composer.validate import render_report, validate_plan

    plan, reg = validate_setup()
    ran = fake_runtime(monkeypatch, {1: 3e-3, 2: 14e-3})  # (h0, n0) runs setting 1, (n0, n0) setting 2
    lines: list[str] = []
    report = validate_plan(plan, window_s=1.0, learning_starts=10, registry=reg, progress=lines.append)
    assert [(r.rm_device, r.learner_device, r.rank, r.chosen) for r in report.rows] == [
        ("h0", "n0", 1, True), ("n0", "n0", 3, False)]
    assert ran == [(1, "tst:0"), (2, "tst:0")] and len(lines) == 2
    assert [r.predicted_s for r in report.rows] == pytest.approx([3e-3, 14e-3])  # Eq. 7 of each candidate
    assert all(math.isfinite(r.measured_s) for r in report.rows)
    # the runner-up on a device this machine lacks is named, with the reason, and not run
    ((label, why),) = report.skipped
    assert label == "RM h0, learner m0" and "'m0' is not on this machine" in why
    assert report.order_agrees is True and report.top_agrees

    console = Console(record=True, width=200)
    render_report(report, console)
    text = console.export_text()
    assert "measured order agrees with the predicted order (2 candidates" in text
    assert "not measured: RM h0, learner m0" in text

    # measured the other way round: validate says so, naming the pair
    fake_runtime(monkeypatch, {1: 20e-3, 2: 14e-3})
    worse = validate_plan(plan, window_s=1.0, learning_starts=10, registry=reg)
    assert worse.order_agrees is False and not worse.top_agrees
    ((a, b),) = worse.inversions
    assert (a.learner_device, b.rm_device) == ("n0", "n0") and a.chosen and not b.chosen
    console = Console(record=True, width=300)
    render_report(worse, console)
    assert "does not agree with the predicted order: predicted RM h0, learner n0" in console.export_text()


def test_validate_with_top_one_or_a_single_candidate_has_no_order(monkeypatch):
    from pearl_core.composer.validate import ValidationReport, ValidationRow, order_line, validate_plan

    plan, reg = validate_setup()
    fake_runtime(monkeypatch, {1: 3e-3, 2: 14e-3})
    report = validate_plan(plan, window_s=1.0, learning_starts=10, top=1, registry=reg)
    assert len(report.rows) == 1 and report.skipped == () and report.order_agrees is None
    assert "fewer than two candidates were measured" in order_line(report)
    with pytest.raises(PearlError, match=r"top = 0; expected an int >= 1"):
        validate_plan(plan, top=0, registry=reg)
    unmeasured = ValidationReport((ValidationRow("a", 1, 1, 1, 1e-3, 1e-3, 10, True),
                                   ValidationRow("b", 1, 1, 1, 2e-3, math.nan, 0, False)), 1.0)
    assert unmeasured.order_agrees is None


def test_validate_command_offers_top():
    import inspect

    from pearl_core.composer.validate import validate_command

    assert inspect.signature(validate_command).parameters["top"].default.default == 2
