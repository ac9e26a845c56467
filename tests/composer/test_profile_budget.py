"""The profiling budget (issue 40, point 2; ``composer/budget.py``): shared among the probes, honoured, and what
does not fit is modelled and noted. Every test runs on an injected clock (no test waits on, or asserts on,
wall time) with fake measuring backends.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from backend_registry import registry_with
from test_deviceprofile import ACC
from test_deviceprofile import spec as acc_spec

from pearl_core.backend import Availability, Backend, DeviceInfo
from pearl_core.composer import budget as budget_mod
from pearl_core.composer import hostprofile, timing
from pearl_core.composer.budget import BUDGET_NOTE, OverBudget
from pearl_core.composer.costs import fill_matrix
from pearl_core.composer.deviceprofile import profile_device
from pearl_core.composer.hostprofile import profile_host, thread_candidates
from pearl_core.composer.matrix import PrimitiveCost, RunMeasurement
from pearl_core.composer.profiling import profiler_for
from pearl_core.composer.spec import DeviceSpec
from pearl_core.composer.timing import MIN_TIMED, ProfileBudget, median_time, profile_budget
from pearl_core.composer.tuning import host_variants
from pearl_core.composer.workload import Workload
from pearl_core.errors import SpecError

WL = Workload(batch_size=8, obs_bytes=16, action_bytes=8, n_actors=1, insert_batch=2, capacity=4096, fanout=8)
HOST = DeviceSpec("cpu0", "cpu", 2**30, 5.0, 20.0, cores=16)


class Clock:
    """A clock that only moves when told (``advance``)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    """The injected clock, also behind ``timing.median_time`` (its ``time.perf_counter``)."""
    c = Clock()
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=c, monotonic=c))
    return c


class SlowHost:
    """A host backend whose every call costs ``per_call`` seconds on the clock; it times with the core's
    ``median_time`` and its request's ``budget_s``, as the CPU backend does."""

    name = "slow"

    def __init__(self, clock, per_call=0.01, honour=True):
        self.clock, self.per_call, self.honour = clock, per_call, honour
        self.asked: list[MeasureRequestLog] = []

    def measure_primitive(self, device, workload, request):
        start = self.clock()
        budget = request.budget_s if self.honour else None
        seconds = median_time(lambda: self.clock.advance(self.per_call), request.iterations, request.warmup,
                              budget_s=budget)
        self.asked.append(MeasureRequestLog(request, self.clock() - start))
        t = request.threads
        if request.primitive == "replay":
            return PrimitiveCost("replay", t, 3 * seconds, sample_s=seconds, update_s=seconds, insert_s=seconds)
        if request.primitive == "worker_loop":
            return PrimitiveCost("worker_loop", t, 4 * seconds, sample_s=seconds, update_s=seconds,
                                 insert_s=seconds, learner_s=seconds)
        return PrimitiveCost(request.primitive, t, seconds)


class MeasureRequestLog:
    def __init__(self, request, took):
        self.request, self.took = request, took


@pytest.fixture
def host_env(monkeypatch, clock):
    """16 cores, no calibration child: the calibration's call is recorded and spends its share on the clock."""
    calls = []

    def calibrate(wl, variants, **kw):
        calls.append((list(variants), kw))
        clock.advance(kw["budget_s"])
        return tuple(RunMeasurement(s, t, 2e-3 * (1 + 0.1 * t), rounds=1) for s, t in variants)

    monkeypatch.setattr(hostprofile, "calibrate_host_variants", calibrate)
    monkeypatch.setattr(hostprofile, "learner_threads_yield", lambda wl: False)
    monkeypatch.setattr(hostprofile.os, "cpu_count", lambda: 16)
    monkeypatch.setenv("PEARL_CALIBRATE_WINDOW_S", "1")
    return calls


def test_the_learner_is_measured_at_fewer_thread_counts_on_many_cores():
    assert thread_candidates(15, 15) == (1, 2, 4, 8, 15)
    assert thread_candidates(16, 15) == (1, 2, 4, 8, 15, 16)
    assert thread_candidates(1, 1) == (1,) and thread_candidates(2, 2) == (1, 2)


def test_a_slow_probe_is_cut_at_its_share_and_the_host_stays_within_budget(clock, host_env):
    backend = SlowHost(clock, per_call=0.01)  # 1000 calls would be 10 s per probe
    budget = ProfileBudget(20.0, clock)
    row = profile_host("slow", backend, HOST, WL, iterations=1000, warmup=5, clock=clock, budget=budget)
    for log in backend.asked:
        share = log.request.budget_s
        assert share is not None and 0 < share <= hostprofile.CELL_BUDGET_S
        # median_time stops at its share (past at least MIN_TIMED calls): one call over at most
        assert log.took <= max(share, (MIN_TIMED + log.request.warmup) * backend.per_call) + backend.per_call + 1e-9
    assert [(a.request.primitive, a.request.threads) for a in backend.asked if a.request.primitive == "learner"] == [
        ("learner", t) for t in (1, 2, 4, 8, 15)]
    assert clock() <= budget.total_s + 0.05  # all probes and the calibration within the budget + one call
    [(variants, kw)] = host_env
    assert kw["budget_s"] > 0 and kw["timeout_s"] >= kw["budget_s"]
    sampled = next(n for n in row.notes if "timed samples per probe" in n)
    assert "learner:1 " in sampled and "learner:1 1000" not in sampled  # it recorded what it took, fewer than asked


def test_probes_that_do_not_fit_are_modelled_and_noted(clock, host_env):
    backend = SlowHost(clock, per_call=0.2)  # MIN_TIMED calls of the learner take 2 s: more than its share
    row = profile_host("slow", backend, HOST, WL, iterations=1000, warmup=0, clock=clock,
                       budget=ProfileBudget(6.0, clock))
    learner_threads = [a.request.threads for a in backend.asked if a.request.primitive == "learner"]
    assert learner_threads == [1]  # the other counts did not fit: not asked
    modelled = [n for n in row.notes if BUDGET_NOTE in n]
    assert any("learner at 2 threads" in n for n in modelled) and any("worker loop" in n for n in modelled)
    assert row.costs.learner_s == ((1, pytest.approx(0.2)),)
    assert row.costs.worker_loop_threads == 1 and row.co_rm_sample.latency_s == row.rm_sample.latency_s


def test_a_required_probe_that_does_not_fit_models_the_whole_host(clock, host_env):
    backend = SlowHost(clock, per_call=0.01)
    spent = ProfileBudget(1.0, clock)
    spent.start()
    clock.advance(2.0)  # nothing left
    with pytest.raises(OverBudget, match="actor step did not fit"):
        profile_host("slow", backend, HOST, WL, iterations=1000, budget=spent)
    assert backend.asked == []


def test_calibration_runs_only_the_variants_that_fit_and_the_rest_are_scaled(clock, host_env):
    backend = SlowHost(clock, per_call=0.001)
    row = profile_host("slow", backend, HOST, WL, iterations=1000, warmup=0, clock=clock,
                       budget=ProfileBudget(12.0, clock))
    [(variants, kw)] = host_env
    ranked = sorted(row.costs.learner_s, key=lambda p: p[1])
    assert 0 < len(variants) < 2 * len(ranked)  # not every variant fits 12 s
    assert variants[0][1] == ranked[0][0]  # the fastest learner step's variants first
    assert any("calibration runs of" in n and BUDGET_NOTE in n for n in row.notes)
    bounds = {v.bound for v in host_variants(HOST, row, WL)}
    assert bounds == {"run", "scaled"}


def test_the_accelerator_probes_get_shares_and_a_probe_past_its_deadline_is_modelled(monkeypatch):
    """An old-style plugin ignores budget_s: the composer's deadline around it cuts the probe."""
    release = threading.Event()

    class Old(Backend):
        name = "old"
        device_kind = "acc"
        asked: list = []

        def availability(self):
            return Availability.yes()

        def devices(self):
            return [DeviceInfo("n0", "acc", self.name, "an accelerator whose plugin predates the budget")]

        def make_sum_tree(self, capacity, fanout=16, **options):
            raise NotImplementedError

        def measure_primitive(self, device, workload, request):
            type(self).asked.append(request)
            if request.primitive == "learner":
                release.wait(30)  # ignores its share: runs on until the test ends
            if request.primitive == "replay":
                return PrimitiveCost("replay", 1, 6e-6, sample_s=1e-6, update_s=2e-6, insert_s=3e-6)
            return PrimitiveCost("worker_loop", 1, 7e-5, sample_s=2e-6, update_s=3e-6, insert_s=4e-6, learner_s=6e-5)

    monkeypatch.setattr(budget_mod, "DEADLINE_FACTOR", 0.0)
    monkeypatch.setattr(budget_mod, "DEADLINE_GRACE_S", 0.2)
    acc, spec = ACC, acc_spec()
    reg = registry_with(Old)
    backend = reg.get_backend("old")
    try:
        row = profile_device("old", backend, acc, WL, iterations=50, warmup=0, budget=ProfileBudget(30.0))
    finally:
        release.set()
    assert [r.primitive for r in Old.asked] == ["replay", "learner", "worker_loop"][:len(Old.asked)]
    assert all(r.budget_s is not None and 0 < r.budget_s <= 30.0 for r in Old.asked)
    assert row.rm_sample.source == "profiled"
    assert any(BUDGET_NOTE in n and "'learner'" in n and "overran" in n for n in row.notes)
    # the hook is not called again once it hung: the worker loop is modelled too, and the row still plans
    assert row.learner is None or row.learner.source != "profiled"
    assert fill_matrix(spec, WL, registry=reg, profiler=lambda d, w: row if d.name == "n0" else None).row("n0")


def test_an_old_plugin_that_ignores_the_share_still_composes(clock, host_env):
    backend = SlowHost(clock, per_call=1e-4, honour=False)  # times every iteration it is asked
    row = profile_host("slow", backend, HOST, WL, iterations=300, warmup=0, clock=clock,
                       budget=ProfileBudget(60.0, clock))
    assert row.learner.source == "profiled" and row.costs.actor_step_s == pytest.approx(1e-4)


class Present(Backend):
    """A present accelerator whose measurements cost their share on the test's clock."""

    name = "pacc"
    device_kind = "acc"
    clock: Clock = None  # type: ignore[assignment] - set by the test
    asked: list = []

    def availability(self):
        return Availability.yes()

    def devices(self):
        return [DeviceInfo("n0", "acc", self.name, "a test accelerator")]

    def make_sum_tree(self, capacity, fanout=16, **options):
        raise NotImplementedError

    def measure_primitive(self, device, workload, request):
        type(self).asked.append(request.budget_s)
        type(self).clock.advance(request.budget_s)  # measures until its share is spent
        if request.primitive == "replay":
            return PrimitiveCost("replay", 1, 6e-6, sample_s=1e-6, update_s=2e-6, insert_s=3e-6, samples=12)
        if request.primitive == "learner":
            return PrimitiveCost("learner", 1, 5e-5, samples=11)
        return PrimitiveCost("worker_loop", 1, 7e-5, sample_s=2e-6, update_s=3e-6, insert_s=4e-6, learner_s=6e-5,
                             samples=10)


def test_the_profiler_splits_the_budget_and_a_cut_row_is_measured_again_for_a_larger_budget(tmp_path, clock,
                                                                                            monkeypatch):
    monkeypatch.setattr(Present, "clock", clock)
    monkeypatch.setattr(Present, "asked", [])
    spec = acc_spec()
    reg = registry_with(Present)
    with profile_budget(ProfileBudget(8.0, clock)):
        prof = profiler_for(spec, registry=reg, iterations=50, warmup=0, cache_dir=tmp_path)
    row = prof(spec.device("n0"), WL)
    assert clock() == pytest.approx(8.0)  # the only device to measure got the whole budget, and no more
    assert sum(Present.asked) == pytest.approx(8.0) and Present.asked[1] == pytest.approx(2 * Present.asked[0])
    assert any("replay 12, learner 11, worker_loop 10" in n for n in row.notes)
    again = profiler_for(spec, registry=reg, iterations=50, warmup=0, cache_dir=tmp_path, budget=8.0)
    assert again(spec.device("n0"), WL) == row and len(Present.asked) == 3  # a full row: from the cache
    # a cut row (nothing left for its probes) is modelled, noted, and measured again with a larger budget
    over = ProfileBudget(1.0, clock)
    over.start()
    clock.advance(5.0)
    cut = profiler_for(spec, registry=reg, iterations=50, warmup=0, cache_dir=tmp_path / "cut", budget=over)
    first = cut(spec.device("n0"), WL)
    assert BUDGET_NOTE in " ".join(first.notes) and first.rm_sample is None  # not measured (and no model here)
    assert len(Present.asked) == 3
    bigger = profiler_for(spec, registry=reg, iterations=50, warmup=0, cache_dir=tmp_path / "cut", budget=4.0)
    assert bigger(spec.device("n0"), WL).rm_sample.source == "profiled" and len(Present.asked) == 6


def test_a_budget_must_be_a_positive_number_of_seconds():
    for bad in (0, -1, float("nan"), float("inf"), True, "60"):
        with pytest.raises(SpecError, match="profiling budget"):
            ProfileBudget(bad)
