"""The CUDA backend's probes honour the share of the profiling budget they are given (issue 40, point 2), on the
numpy stand-in for cupy and an injected clock (no GPU, no wall time): a timed loop stops at its share after
``MIN_TIMED`` calls and the cost says how many samples its median is of; the stream search tries at most three
stream counts; the composer's accelerator policy hands each probe its share.
"""

from types import SimpleNamespace as NS

import pytest
import test_cuda_measure

from pearl_core.composer.deviceprofile import profile_device
from pearl_core.composer.timing import ProfileBudget
from pearl_core.sdk import MeasureRequest, PrimitiveCost
from pearl_cuda import profile
from pearl_cuda.learner import promising_streams, stream_candidates

# The fake GPU (the numpy stand-in for cupy as the CUDA backend's device), its workload and device: shared.
GPU, WL, fake_gpu = test_cuda_measure.GPU, test_cuda_measure.WL, test_cuda_measure.fake_gpu

class Ticks:
    """A clock that moves ``step`` seconds at every reading."""

    def __init__(self, step):
        self.now, self.step = 0.0, step

    def __call__(self):
        self.now += self.step
        return self.now


def test_the_replay_probe_stops_at_its_share_and_says_how_many_samples(fake_gpu, monkeypatch):
    monkeypatch.setattr(profile, "time", NS(perf_counter=Ticks(0.01)))  # every call "takes" >= 10 ms
    cut = fake_gpu.measure_primitive(GPU, WL, MeasureRequest("replay", 1, iterations=100_000, warmup=0,
                                                             budget_s=0.15))
    assert isinstance(cut, PrimitiveCost) and cut.samples == profile.MIN_TIMED  # a third of 0.15 s each: the fewest
    whole = fake_gpu.measure_primitive(GPU, WL, MeasureRequest("replay", 1, iterations=30, warmup=0))
    assert whole.samples == 30  # no share: every iteration asked


def test_timed_calls_honours_the_budget_after_the_fewest_calls():
    calls = []
    seconds, n = profile.timed_calls(lambda: calls.append(1), lambda: None, 1000, 5, budget_s=1.0,
                                     clock=Ticks(0.05))
    assert n < 1000 and n >= profile.MIN_TIMED and seconds == pytest.approx(0.05)
    assert len(calls) <= n + 5  # the warm-up stops at a fifth of the budget
    _, all_of_them = profile.timed_calls(lambda: None, lambda: None, 40, 0, clock=Ticks(0.05))
    assert all_of_them == 40


def test_the_stream_search_tries_at_most_three_promising_counts():
    assert promising_streams(32) == (1, 2)  # 4 streams would leave chunks of 8 rows
    assert promising_streams(4096) == (1, 2, 4) and len(stream_candidates(4096)) == 5
    assert promising_streams(1) == (1,)


def test_the_composer_hands_each_gpu_probe_its_share(fake_gpu, monkeypatch):
    shares = {}

    def learner(self, request):
        shares["learner"] = request.budget_s
        self.learner_cost = PrimitiveCost("learner", 1, 2e-4, samples=12)
        return self.learner_cost

    def worker_loop(self, request):
        shares["worker_loop"] = request.budget_s
        return PrimitiveCost("worker_loop", 1, 3e-4, sample_s=1e-5, update_s=2e-5, insert_s=3e-5, learner_s=2.5e-4,
                             samples=11)

    monkeypatch.setattr(profile.GpuSession, "learner", learner)
    monkeypatch.setattr(profile.GpuSession, "worker_loop", worker_loop)
    clock = Ticks(0.0)
    row = profile_device("cuda", fake_gpu, GPU, WL, iterations=50, warmup=1, budget=ProfileBudget(8.0, clock))
    # weights 1 : 2 : 1 of what is left when each starts (the clock stands still: nothing is spent)
    assert shares["learner"] == pytest.approx(8.0 * 2 / 3) and shares["worker_loop"] == pytest.approx(8.0)
    assert any("replay 50, learner 12, worker_loop 11" in n for n in row.notes)
