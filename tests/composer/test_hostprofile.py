"""The composer owns the host's measuring policy (``composer/hostprofile.py``); backends answer named records.

A fake measuring backend records what it is asked: the thread counts, the primitives and the calibration
are the composer's choice; its answers are :class:`PrimitiveCost` records and the host's row carries
:class:`DeviceCosts` (no ``run_s_...``/``co_time_sliced`` string keys). The CPU backend decides nothing.
"""

from __future__ import annotations

import json

import pytest

from pearl_core.composer import hostprofile
from pearl_core.composer.hostprofile import measured, profile_host
from pearl_core.composer.matrix import DeviceCosts, DeviceRow, MeasureRequest, PrimitiveCost, RunMeasurement
from pearl_core.composer.spec import DeviceSpec
from pearl_core.composer.tuning import host_variants
from pearl_core.composer.workload import Workload
from pearl_core.errors import SpecError

WL = Workload(batch_size=8, obs_bytes=16, action_bytes=8, n_actors=1, insert_batch=2)


class Recorder:
    """Measures nothing: answers each request from a table and records it."""

    name = "rec"

    def __init__(self, learner_s):
        self.learner_s, self.asked = learner_s, []

    def measure_primitive(self, device, workload, request):
        self.asked.append((request.primitive, request.threads))
        t = request.threads
        if request.primitive == "learner":
            return PrimitiveCost("learner", t, self.learner_s[t])
        if request.primitive == "replay":
            return PrimitiveCost("replay", t, 3e-5, sample_s=1e-5, update_s=1e-5, insert_s=1e-5)
        if request.primitive == "worker_loop":
            return PrimitiveCost("worker_loop", t, 4e-4, sample_s=1e-5, update_s=1e-5, insert_s=1e-5, learner_s=3.7e-4)
        return PrimitiveCost(request.primitive, t, 1e-5)  # actor_step, message_hop


@pytest.fixture
def no_child(monkeypatch):
    """No calibration child: the composer's call is recorded and answered."""
    calls = []

    def fake(wl, variants, **kw):
        calls.append((list(variants), kw))
        return (RunMeasurement(1, 1, 9e-4, rounds=1), RunMeasurement(2, 1, 7e-4, rounds=1, spread=0.0),
                RunMeasurement(1, 2, floor=2e-3), RunMeasurement(2, 2, floor=2e-3))

    monkeypatch.setattr(hostprofile, "calibrate_host_variants", fake)
    monkeypatch.setattr(hostprofile, "learner_threads_yield", lambda wl: False)
    monkeypatch.setattr(hostprofile.os, "cpu_count", lambda: 3)
    return calls


def test_the_composer_chooses_the_threads_and_the_backend_measures_what_it_is_asked(no_child):
    backend = Recorder({1: 5e-4, 2: 3e-4})
    host = DeviceSpec("cpu0", "cpu", 2**30, 5.0, 20.0, cores=3)
    row = profile_host("rec", backend, host, WL, iterations=1000, warmup=5)
    # one actor on three cores: the learner is measured at 1 and 2 threads, the RM at what is left
    assert ("learner", 1) in backend.asked and ("learner", 2) in backend.asked and ("learner", 3) not in backend.asked
    t_l = row.config["learner_threads"]
    assert ("worker_loop", t_l) in backend.asked and ("replay", row.config["rm_threads"]) in backend.asked
    assert no_child and sorted(no_child[0][0]) == [(1, 1), (1, 2), (2, 1), (2, 2)]  # variants: the composer's
    assert isinstance(row.costs, DeviceCosts) and row.costs.learner_s == ((1, 5e-4), (2, 3e-4))
    assert row.costs.worker_loop_threads == t_l and row.costs.run(2, 1).seconds == 7e-4
    assert set(row.config) == {"rm_threads", "learner_threads", "co_rm_threads", "co_learner_threads"}
    by = {(int(v.setting), v.learner_threads): v for v in host_variants(host, row, WL)}
    assert by[2, 1].bound == "run" and by[1, 2].bound == "floor"
    again = DeviceRow.from_dict(json.loads(json.dumps(row.to_dict())))  # the cache round trip
    assert again == row


def test_a_quick_profile_runs_no_calibration(no_child):
    row = profile_host("rec", Recorder({1: 5e-4, 2: 3e-4}), DeviceSpec("c", "cpu", 2**30, 5.0, 20.0, cores=3), WL,
                       iterations=20, warmup=1)
    assert no_child == [] and row.costs.runs == ()


@pytest.mark.parametrize("answer", [None, PrimitiveCost("learner", 2, 1e-3), PrimitiveCost("replay", 1, 1e-3),
                                    {"seconds": 1e-3}])
def test_a_wrong_answer_names_the_backend_and_the_request(answer):
    class Wrong:
        def measure_primitive(self, device, workload, request):
            return answer

    request = MeasureRequest("learner" if answer is None or isinstance(answer, dict) or answer.primitive == "learner"
                             else "replay", 1)
    with pytest.raises(SpecError, match=r"backend 'w'\.measure_primitive answered .* expected a PrimitiveCost"):
        measured("w", Wrong(), None, WL, request)


def test_records_refuse_bad_values():
    with pytest.raises(SpecError, match="primitive"):
        MeasureRequest("gpu_magic")
    with pytest.raises(SpecError, match="seconds"):
        PrimitiveCost("learner", 1, float("inf"))
    with pytest.raises(SpecError, match="threads"):
        DeviceCosts(1e-5, 1e-5, ((0, 1e-3),))


def test_an_old_cache_row_with_string_keys_is_not_read_as_measurements():
    from pearl_core.composer.profiling import CACHE_FORMAT

    old = DeviceRow("cpu0", "cpu", config={"co_time_sliced": True, "actor_step_s": 1e-5, "msg_hop_s": 1e-5,
                                           "learner_s_threads_1": 1e-3, "run_s_setting_2_threads_1": 1e-9})
    assert old.costs is None and host_variants(DeviceSpec("cpu0", "cpu", 2**30, 5.0, 20.0, cores=2), old, WL) == ()
    assert CACHE_FORMAT >= 4  # entries of format 3 carry such rows: their key differs, they are measured again


def test_the_cpu_backend_measures_and_decides_nothing():
    from pearl_cpu.backend import CpuBackend

    assert not hasattr(CpuBackend, "profile_cells") and callable(CpuBackend.measure_primitive)
    assert isinstance(CpuBackend(), hostprofile.MeasuringBackend)
    assert CpuBackend().settings() == {}  # the calibration's settings are the composer's (calibration_settings)
