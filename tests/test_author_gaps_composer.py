"""Gaps a plugin author hit: max_fanout in the conformance kit and the composer, a crashing cost model,
backend settings in the profile cache key, and `pearl validate` measuring more than the chosen candidate."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import types
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings

import pearl_core.testing.strategies as pst
from pearl_core.backend import Availability, Backend, DeviceInfo
from pearl_core.composer import AssignmentMatrix, CostCell, DeviceRow, DeviceSpec, HardwareSpec, LinkSpec, Workload
from pearl_core.composer import fill_matrix, make_plan
from pearl_core.composer.profiling import profiler_for
from pearl_core.errors import InvalidValueError, PearlError
from pearl_core.hookspecs import hookimpl
from pearl_core.plugins import PluginRegistry
from pearl_core.testing import ReferenceSumTree, SumTreeConformance

ROOT = Path(__file__).resolve().parents[1]


def registry_with(*backends) -> PluginRegistry:
    reg = PluginRegistry(autoload=False)
    for cls in backends:
        @hookimpl
        def pearl_register_backends(register, cls=cls):
            register(cls)

        reg.register_plugin(types.SimpleNamespace(pearl_register_backends=pearl_register_backends), name=cls.name)
    return reg


# =========================================================================== 1. the conformance kit
class NarrowTree(ReferenceSumTree):
    """A correct tree whose kernel only supports fanouts up to 32."""

    def __init__(self, capacity, fanout=2):
        super().__init__(capacity, fanout)
        if self.fanout > 32:
            raise InvalidValueError(f"NarrowTree supports fanouts 2..32; found {self.fanout}. Fix: use <= 32.")


class NarrowBackend(Backend):
    name = "narrow"
    device_kind = "cpu"
    max_fanout = 32

    def availability(self):
        return Availability.yes()

    def devices(self):
        return []

    def make_sum_tree(self, capacity, fanout=16, **options):
        return NarrowTree(capacity, fanout)


_KIT_MODULE = '''
from pearl_core.backend import Availability, Backend
from pearl_core.errors import InvalidValueError, PearlError
from pearl_core.testing import ReferenceSumTree, SumTreeConformance


class NarrowTree(ReferenceSumTree):
    def __init__(self, capacity, fanout=2):
        super().__init__(capacity, fanout)
        if self.fanout > 32:
            raise InvalidValueError(f"NarrowTree supports fanouts 2..32; found {self.fanout}")


class Narrow(Backend):
    name = "narrow"
    device_kind = "cpu"
    max_fanout = 32

    def availability(self):
        return Availability.yes()

    def devices(self):
        return []

    def make_sum_tree(self, capacity, fanout=16, **options):
        return NarrowTree(capacity, fanout)


class Undeclared(Narrow):
    max_fanout = None


class TestDeclared(SumTreeConformance):
    def backend_under_test(self):
        return Narrow()


class TestUndeclared(SumTreeConformance):
    def backend_under_test(self):
        return Undeclared()
'''


def _outcomes(junit: Path) -> dict[str, dict[str, int]]:
    """``{class name: {"passed": n, "failed": n}}`` from a junit XML report."""
    out: dict[str, dict[str, int]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        cls = case.get("classname", "").rsplit(".", 1)[-1]
        bad = case.find("failure") is not None or case.find("error") is not None
        counts = out.setdefault(cls, {"passed": 0, "failed": 0})
        counts["failed" if bad else "passed"] += 1
    return out


def test_the_kit_runs_only_the_fanouts_the_backend_declares(tmp_path):
    """The whole suite, run by pytest: a max_fanout=32 backend passes; the same tree undeclared fails at 33+."""
    (tmp_path / "test_generated_kit.py").write_text(_KIT_MODULE, encoding="utf-8")
    junit = tmp_path / "junit.xml"
    env = {**os.environ, "PEARL_CONFORMANCE_EXAMPLES": "8", "PEARL_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                           "test_generated_kit.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    got = _outcomes(junit)
    assert got["TestDeclared"]["failed"] == 0 and got["TestDeclared"]["passed"] >= 30, proc.stdout[-3000:]
    # without the declaration the kit draws fanouts the tree refuses: proof that the first run was bounded
    assert got["TestUndeclared"]["failed"] >= 1, proc.stdout[-3000:]
    assert "supports fanouts 2..32; found" in proc.stdout


def test_the_kit_reads_max_fanout_of_the_backend_named(monkeypatch):
    reg = registry_with(NarrowBackend)
    monkeypatch.setattr("pearl_core.plugins.default_registry", lambda: reg)

    class Suite(SumTreeConformance):
        backend_name = "narrow"  # no make_tree: the kit asks get_backend("narrow")

    suite = Suite()
    assert suite.fanout_limit() == 32
    suite.test_large_batches_match_reference(4096, 64)  # 64 is capped at the declared 32
    suite.test_drift_clamps_to_last_nonzero_leaf(16)
    suite.test_duplicates_last_wins()
    assert isinstance(suite.make_tree(8, 32), NarrowTree)

    class Lower(Suite):
        max_fanout = 8  # a suite may test fewer fanouts than the backend supports

    assert Lower().fanout_limit() == 8

    class Higher(Suite):
        max_fanout = 64

    with pytest.raises(InvalidValueError, match=r"max_fanout = 64 exceeds the max_fanout = 32 .*Fix"):
        Higher().fanout_limit()


def test_a_suite_without_a_backend_keeps_its_own_bound():
    class Plain(SumTreeConformance):
        max_fanout = 5

        def make_tree(self, capacity, fanout):
            return ReferenceSumTree(capacity, fanout)

    assert Plain().fanout_limit() == 5 and Plain()._fanout(16) == 5
    assert type("Any", (Plain,), {"max_fanout": None})().fanout_limit() is None

    class Nothing(SumTreeConformance):
        pass

    with pytest.raises(NotImplementedError, match="backend_name"):
        Nothing().make_tree(4, 2)


def test_fanout_strategy_rejects_impossible_bounds_and_respects_the_cap():
    with pytest.raises(InvalidValueError, match="expected None or an int >= 2"):
        pst.fanouts(1)

    @settings(max_examples=60, deadline=None)
    @given(pst.fanouts(7))
    def check(f):
        assert 2 <= f <= 7

    check()


# =========================================================================== composer fixtures
def cpu(name="c") -> DeviceSpec:
    return DeviceSpec(name, "cpu", 2**30, 10, 50, cores=4, launch_latency_s=5e-6, mem_latency_s=1e-7,
                      peak_flops=100e9, mem_bandwidth_Bps=40e9)


def tst_spec() -> HardwareSpec:
    return HardwareSpec((cpu(), DeviceSpec("n0", "tst", 2**32, 5, 15, mem_bandwidth_Bps=1e11)),
                        (LinkSpec("c", "c", 1e-6, 1e10), LinkSpec("c", "n0", 1e-5, 1e10)))


def full_row(device, source="analytic", latency=1e-6) -> DeviceRow:
    cell = CostCell(latency, device.active_power_w, source)
    return DeviceRow(device.name, device.kind, cell, cell, cell, cell, cell, cell, cell, cell)


TINY_WL = dict(batch_size=8, obs_bytes=16, action_bytes=8, capacity=4096)


class TstBackend(Backend):
    """A third-party kind with its own analytic model and a sum tree no wider than 8."""

    name = "tst"
    device_kind = "tst"
    max_fanout = 8

    def availability(self):
        return Availability.no("no tst device in CI")

    def devices(self):
        return []

    def make_sum_tree(self, capacity, fanout=16, **options):
        raise NotImplementedError

    def analytic_cells(self, device, workload):
        return full_row(device)


# =========================================================================== 2. max_fanout reaches the composer
def test_a_fanout_above_the_backends_max_empties_its_replay_cells_with_the_fix():
    reg = registry_with(TstBackend)
    wide = Workload(fanout=16, **TINY_WL)
    row = fill_matrix(tst_spec(), wide, registry=reg).row("n0")
    assert all(getattr(row, c) is None for c in ("rm_sample", "rm_update", "rm_insert", "co_rm_sample",
                                                 "co_rm_update", "co_rm_insert", "co_learner"))
    assert row.learner is not None  # the learner does not need the tree
    note = row.notes[0]
    assert "backend 'tst'" in note and "up to 8" in note and "fanout is 16" in note and "fanout <= 8" in note

    plan = make_plan(tst_spec(), wide, registry=reg)
    for pair in (("n0", "n0"), ("n0", "c")):
        bad = plan.decision.candidate(*pair)
        assert not bad.feasible and "backend 'tst' supports sum-tree fanouts up to 8" in bad.reason, bad.reason
    assert plan.decision.candidate("c", "n0").feasible and plan.rm_device == "c"

    # within the limit, or without a tree at all, nothing is taken away
    assert fill_matrix(tst_spec(), Workload(fanout=8, **TINY_WL), registry=reg).row("n0").can_colocate
    uniform = Workload(fanout=16, replay="uniform", **TINY_WL)
    assert fill_matrix(tst_spec(), uniform, registry=reg).row("n0").can_rm


class PresentTst(TstBackend):
    """Available, detects n0 and measures it; counts its profile_cells calls."""

    calls: list = []
    SETTINGS: dict = {}
    raises: BaseException | None = None

    def availability(self):
        return Availability.yes()

    def devices(self):
        return [DeviceInfo("n0", "tst", self.name, "a test device")]

    def settings(self):
        return dict(type(self).SETTINGS)

    def profile_cells(self, device, workload, *, iterations=1000, warmup=50):
        type(self).calls.append(workload.fanout)
        if type(self).raises is not None:
            raise type(self).raises
        return full_row(device, "profiled", 2e-6)


@pytest.fixture
def present(monkeypatch):
    monkeypatch.setattr(PresentTst, "calls", [])
    monkeypatch.setattr(PresentTst, "SETTINGS", {})
    monkeypatch.setattr(PresentTst, "raises", None)
    return PresentTst


def test_profiling_a_too_wide_tree_measures_at_the_backends_fanout_and_drops_the_rm(tmp_path, present):
    reg = registry_with(present)
    prof = profiler_for(tst_spec(), registry=reg, iterations=1, warmup=0, cache_dir=tmp_path)
    row = fill_matrix(tst_spec(), Workload(fanout=16, **TINY_WL), registry=reg, profiler=prof).row("n0")
    assert present.calls == [8]  # never asked to build a tree it cannot
    assert row.learner.source == "profiled" and not row.can_rm and not row.can_colocate
    assert "fanout <= 8" in row.notes[0]


# =========================================================================== 3. a crashing backend model
def test_a_crashing_profile_cells_marks_only_its_device(tmp_path, present, caplog):
    present.raises = RuntimeError("driver crashed")
    reg = registry_with(present)
    spec = tst_spec()
    prof = profiler_for(spec, registry=reg, iterations=1, warmup=0, cache_dir=tmp_path)
    wl = Workload(fanout=8, **TINY_WL)
    with caplog.at_level(logging.WARNING, logger="pearl_core.composer.costs"):
        plan = make_plan(spec, wl, registry=reg, profiler=prof)
    row = plan.matrix.row("n0")
    assert all(c is None for _, c in row.cells())
    (note,) = row.notes
    assert "backend 'tst'" in note and "profile_cells" in note and "RuntimeError: driver crashed" in note
    assert "Fix:" in note
    assert any("driver crashed" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert plan.matrix.row("c").can_colocate and (plan.rm_device, plan.learner_device) == ("c", "c")
    assert "RuntimeError: driver crashed" in plan.decision.candidate("n0", "n0").reason
    assert not list(tmp_path.glob("*.json"))  # nothing cached for a failed measurement


def test_a_crashing_analytic_model_is_logged_and_says_the_fix(caplog):
    class Broken(TstBackend):
        def analytic_cells(self, device, workload):
            raise ZeroDivisionError("oops")

    with caplog.at_level(logging.WARNING, logger="pearl_core.composer.costs"):
        plan = make_plan(tst_spec(), Workload(fanout=8, **TINY_WL), registry=registry_with(Broken))
    note = plan.matrix.row("n0").notes[0]
    assert "backend 'tst'" in note and "ZeroDivisionError: oops" in note and "analytic_cells" in note
    assert "Fix:" in note and any("oops" in r.getMessage() for r in caplog.records)
    assert plan.rm_device == "c"


def test_a_wrong_row_from_profile_cells_marks_only_its_device(tmp_path, present, monkeypatch):
    monkeypatch.setattr(present, "profile_cells", lambda self, device, wl, **kw: full_row(cpu("elsewhere")))
    reg = registry_with(present)
    prof = profiler_for(tst_spec(), registry=reg, iterations=1, warmup=0, cache_dir=tmp_path)
    row = fill_matrix(tst_spec(), Workload(fanout=8, **TINY_WL), registry=reg, profiler=prof).row("n0")
    assert not row.can_learn and "expected a DeviceRow with device='n0'" in row.notes[0]


# =========================================================================== 4. settings() in the cache key
def test_a_changed_backend_setting_is_measured_again(tmp_path, present):
    reg = registry_with(present)
    spec = tst_spec()
    wl = Workload(fanout=8, **TINY_WL)

    def profile() -> DeviceRow:
        return profiler_for(spec, registry=reg, iterations=1, warmup=0, cache_dir=tmp_path)(spec.device("n0"), wl)

    present.SETTINGS = {"build": "avx2", "threads": 4}
    first = profile()
    assert len(present.calls) == 1
    assert profile() == first and len(present.calls) == 1           # same settings: from the cache
    present.SETTINGS = {"build": "avx512", "threads": 4}
    profile()
    assert len(present.calls) == 2                                   # changed: measured again
    present.SETTINGS = {"threads": 4, "build": "avx2"}
    profile()
    assert len(present.calls) == 2                                   # back (any key order): the first entry
    inputs = [json.loads(p.read_text(encoding="utf-8"))["inputs"] for p in tmp_path.glob("*.json")]
    assert sorted(i["backend_settings"]["build"] for i in inputs) == ["avx2", "avx512"]
    assert {i["backend"] for i in inputs} == {"tst"} and all(i["backend_version"] for i in inputs)


def test_settings_that_are_not_json_mark_the_row(tmp_path, present):
    present.SETTINGS = {"flags": {1, 2}}
    reg = registry_with(present)
    prof = profiler_for(tst_spec(), registry=reg, iterations=1, warmup=0, cache_dir=tmp_path)
    row = fill_matrix(tst_spec(), Workload(fanout=8, **TINY_WL), registry=reg, profiler=prof).row("n0")
    assert not row.can_learn and present.calls == []
    assert "in settings" in row.notes[0] and "not a JSON object" in row.notes[0]


def test_the_default_backend_settings_are_empty():
    assert TstBackend().settings() == {}


# =========================================================================== 5. pearl validate
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
