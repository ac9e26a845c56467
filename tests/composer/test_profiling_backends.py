"""A backend's limits and failures as the composer's profiling sees them (:mod:`pearl_core.composer.profiling`):
``max_fanout`` reaches the matrix, a crashing or wrong cost model marks only its device, and the backend's
``settings()`` are part of the profile cache key.
"""

from __future__ import annotations

import json
import logging

import pytest

from backend_registry import registry_with, cpu, full_row, TstBackend

from pearl_core.backend import Availability, DeviceInfo
from pearl_core.composer import DeviceRow, DeviceSpec, HardwareSpec, LinkSpec, Workload
from pearl_core.composer import fill_matrix, make_plan
from pearl_core.composer.profiling import profiler_for


# =========================================================================== composer fixtures


def tst_spec() -> HardwareSpec:
    return HardwareSpec((cpu(), DeviceSpec("n0", "tst", 2**32, 5, 15, mem_bandwidth_Bps=1e11)),
                        (LinkSpec("c", "c", 1e-6, 1e10), LinkSpec("c", "n0", 1e-5, 1e10)))


TINY_WL = dict(batch_size=8, obs_bytes=16, action_bytes=8, capacity=4096)


# =========================================================================== max_fanout reaches the composer
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


# =========================================================================== a crashing backend model
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


# =========================================================================== settings() in the cache key
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
