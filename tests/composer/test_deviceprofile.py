"""The composer measures a present accelerator primitive by primitive (``composer/deviceprofile.py``).

A fake measuring backend of a third-party kind records what it is asked: the composer chooses the
primitives and iteration counts, the backend answers :class:`PrimitiveCost` records (with the power it
read, what it tuned and notes), and the device's row is built from them. ``profile_cells`` is deprecated:
a backend that still has only it is measured through it, with a logged warning and a note on its row.
"""

from __future__ import annotations

import logging

import pytest

from backend_registry import registry_with

from pearl_core.backend import Availability, Backend, DeviceInfo
from pearl_core.composer import costs
from pearl_core.composer.costs import PROFILE_CELLS_DEPRECATED, fill_matrix
from pearl_core.composer.deviceprofile import profile_device
from pearl_core.composer.matrix import CostCell, DeviceRow, MeasureRequest, PrimitiveCost
from pearl_core.composer.profiling import profiler_for
from pearl_core.composer.spec import DeviceSpec, HardwareSpec, LinkSpec
from pearl_core.composer.workload import Workload
from pearl_core.errors import SpecError

WL = Workload(batch_size=8, obs_bytes=16, action_bytes=8, capacity=4096, fanout=8)
ACC = DeviceSpec("n0", "acc", 2**32, 5.0, 15.0, mem_bandwidth_Bps=1e11)


def spec() -> HardwareSpec:
    host = DeviceSpec("c", "cpu", 2**30, 10, 50, cores=4, launch_latency_s=5e-6, mem_latency_s=1e-7,
                      peak_flops=100e9, mem_bandwidth_Bps=40e9)
    return HardwareSpec((host, ACC), (LinkSpec("c", "c", 1e-6, 1e10), LinkSpec("c", "n0", 1e-5, 1e10)))


class Meter(Backend):
    """A present accelerator that measures primitives; records each request."""

    name = "acc"
    device_kind = "acc"
    asked: list = []

    def availability(self):
        return Availability.yes()

    def devices(self):
        return [DeviceInfo("n0", "acc", self.name, "a test accelerator")]

    def make_sum_tree(self, capacity, fanout=16, **options):
        raise NotImplementedError

    def measure_primitive(self, device, workload, request):
        type(self).asked.append((request.primitive, request.threads, request.iterations, request.warmup))
        if request.primitive == "replay":
            return PrimitiveCost("replay", 1, 6e-6, sample_s=1e-6, update_s=2e-6, insert_s=3e-6, power_w=40.0,
                                 details={"rm_parallelism": 8}, notes=("power from the board",))
        if request.primitive == "learner":
            return PrimitiveCost("learner", 1, 5e-5, details={"streams": 2}, notes=("power from the board",))
        return PrimitiveCost("worker_loop", 1, 7e-5, sample_s=2e-6, update_s=3e-6, insert_s=4e-6, learner_s=6e-5,
                             power_w=45.0)

    def profile_cells(self, device, workload, *, iterations=1000, warmup=50):
        raise AssertionError("a backend with measure_primitive is never asked profile_cells")


@pytest.fixture
def meter(monkeypatch):
    monkeypatch.setattr(Meter, "asked", [])
    return Meter


def test_the_composer_chooses_the_primitives_and_builds_the_row_from_the_answers(meter):
    row = profile_device("acc", meter(), ACC, WL, iterations=300, warmup=30)
    # the policy: replay at the iterations asked, learner and worker loop at most 200 steps, warmup <= 20
    assert meter.asked == [("replay", 1, 300, 30), ("learner", 1, 200, 20), ("worker_loop", 1, 200, 20)]
    assert (row.device, row.kind) == ("n0", "acc")
    assert [row.rm_sample.latency_s, row.rm_update.latency_s, row.rm_insert.latency_s] == [1e-6, 2e-6, 3e-6]
    assert row.learner.latency_s == 5e-5 and row.co_learner.latency_s == 6e-5  # overlapped: each part its cell
    assert [row.co_rm_sample.latency_s, row.co_rm_update.latency_s, row.co_rm_insert.latency_s] == [2e-6, 3e-6, 4e-6]
    # the power the backend read, else the spec's active power
    assert row.rm_sample.power_w == 40.0 and row.learner.power_w == 15.0 and row.co_learner.power_w == 45.0
    assert {c.source for _, c in row.cells()} == {"profiled"}
    assert row.config == {"rm_parallelism": 8, "streams": 2}
    assert row.notes.count("power from the board") == 1 and "backend 'acc' primitive by primitive" in row.notes[0]


def test_a_backend_that_cannot_measure_here_leaves_the_device_to_its_model(meter):
    class Absent(Meter):
        def measure_primitive(self, device, workload, request):
            type(self).asked.append(request.primitive)
            return None

    assert profile_device("acc", Absent(), ACC, WL, iterations=10, warmup=0) is None
    assert Absent.asked == ["replay", "learner", "worker_loop"]


def test_what_the_backend_does_not_measure_comes_from_its_model(meter):
    class ReplayOnly(Meter):
        def measure_primitive(self, device, workload, request):
            return super().measure_primitive(device, workload, request) if request.primitive == "replay" else None

        def analytic_cells(self, device, workload):
            cell = CostCell(9e-5, 12.0, "analytic")
            return DeviceRow(device.name, device.kind, cell, cell, cell, cell, cell, cell, cell, cell,
                             config={"model": 1, "rm_parallelism": 0}, notes=("assumed a clock",))

    row = profile_device("acc", ReplayOnly(), ACC, WL, iterations=10, warmup=0)
    assert (row.rm_sample.source, row.rm_sample.latency_s) == ("profiled", 1e-6)
    assert {row.learner.source, row.co_learner.source, row.co_rm_sample.source} == {"analytic"}
    assert row.learner.latency_s == 9e-5 and row.config == {"model": 1, "rm_parallelism": 8}  # measured wins
    assert "backend 'acc' did not measure ['learner', 'worker_loop'] here: those cells are its analytic " \
           "model's" in row.notes and "assumed a clock" in row.notes

    class NoModel(ReplayOnly):
        analytic_cells = None

    bare = profile_device("acc", NoModel(), ACC, WL, iterations=10, warmup=0)
    assert bare.rm_sample.source == "profiled" and bare.learner is None and bare.co_learner is None
    assert any("it has no analytic model either, so those cells are empty" in n for n in bare.notes)


@pytest.mark.parametrize("answer", [PrimitiveCost("learner", 2, 1e-5), PrimitiveCost("replay", 1, 1e-5),
                                    {"seconds": 1e-5}])
def test_a_wrong_answer_later_is_a_spec_error_naming_the_backend(meter, answer):
    class Wrong(Meter):
        def measure_primitive(self, device, workload, request):
            if request.primitive == "learner":
                return answer
            return super().measure_primitive(device, workload, request)

    with pytest.raises(SpecError, match=r"backend 'acc'\.measure_primitive answered .* expected a PrimitiveCost\("
                                        r"'learner', threads=1"):
        profile_device("acc", Wrong(), ACC, WL, iterations=10, warmup=0)


def test_the_profiler_measures_a_present_accelerator_through_measure_primitive(tmp_path, meter):
    reg = registry_with(meter)
    prof = profiler_for(spec(), registry=reg, iterations=5, warmup=0, cache_dir=tmp_path)
    row = fill_matrix(spec(), WL, registry=reg, profiler=lambda d, w: prof(d, w) if d.kind == "acc" else None).row("n0")
    assert [a[0] for a in meter.asked] == ["replay", "learner", "worker_loop"]
    assert row.learner.source == "profiled" and row.co_learner.latency_s == 6e-5
    assert PROFILE_CELLS_DEPRECATED not in row.notes


def test_a_backend_with_only_profile_cells_is_measured_with_a_deprecation_note_and_one_warning(tmp_path, caplog,
                                                                                               monkeypatch):
    class OldStyle(Backend):
        name = "old"
        device_kind = "acc"
        calls = 0

        def availability(self):
            return Availability.yes()

        def devices(self):
            return [DeviceInfo("n0", "acc", self.name, "an old-style plugin's device")]

        def make_sum_tree(self, capacity, fanout=16, **options):
            raise NotImplementedError

        def profile_cells(self, device, workload, *, iterations=1000, warmup=50):
            type(self).calls += 1
            cell = CostCell(1e-5, device.active_power_w, "profiled")
            return DeviceRow(device.name, device.kind, cell, cell, cell, cell, cell, cell, cell, cell)

    monkeypatch.setattr(costs, "_warned_profile_cells", set())
    reg = registry_with(OldStyle)
    with caplog.at_level(logging.WARNING, logger="pearl_core.composer.costs"):
        for i in range(2):  # a fresh measurement each time (no cache), one warning in all
            prof = profiler_for(spec(), registry=reg, iterations=5, warmup=0, cache_dir=tmp_path / str(i))
            row = prof(spec().device("n0"), WL)
    assert OldStyle.calls == 2 and row.learner.latency_s == 1e-5
    assert row.notes[-1] == PROFILE_CELLS_DEPRECATED and "implement measure_primitive" in row.notes[-1]
    warned = [r for r in caplog.records if "profile_cells, which is deprecated" in r.getMessage()]
    assert len(warned) == 1 and "old" in warned[0].getMessage()


@pytest.mark.parametrize("field, value, expected", [
    ("power_w", -1.0, "power_w = -1.0 is invalid"), ("power_w", float("nan"), "power_w = nan is invalid"),
    ("power_w", True, "power_w = True is invalid"),
    ("details", {"x": [1]}, "details = .* is invalid; expected a mapping of str names to JSON scalars"),
    ("details", {"x": float("inf")}, "details = .* is invalid"), ("details", {1: 2}, "details = .* is invalid"),
    ("notes", ("ok", 3), "notes = .* is invalid; expected a tuple of str"),
])
def test_primitive_cost_refuses_bad_power_details_and_notes(field, value, expected):
    with pytest.raises(SpecError, match=expected):
        PrimitiveCost("learner", 1, 1e-5, **{field: value})


def test_primitive_cost_details_are_frozen_and_notes_a_tuple():
    cost = PrimitiveCost("learner", 1, 1e-5, power_w=3, details={"streams": 4}, notes=["a"])
    assert cost.power_w == 3.0 and isinstance(cost.power_w, float) and cost.notes == ("a",)
    with pytest.raises(TypeError):
        cost.details["streams"] = 5  # type: ignore[index]
    assert hash(cost) == hash(PrimitiveCost("learner", 1, 1e-5, power_w=3, details={"streams": 4}, notes=("a",)))
    assert MeasureRequest("worker_loop").threads == 1
