"""pearl_core.runtime.energy: GPU joules from NVML's total-energy counter, CPU joules from RAPL where readable and
else modelled (labelled so), on fake meters: a fake powercap tree in tmp_path, a fake ``pynvml`` module."""

from __future__ import annotations

import io
import json
import os
import resource
from pathlib import Path

import pytest

from pearl_core.errors import InvalidValueError
from pearl_core.runtime.energy import EnergyMeter, EnergyReading, NvmlCounters, RaplCounters, process_tree_cpu_s

MAX_UJ = 262_143_328_850


def zone(root: Path, name: str, label: str, energy_uj: int, max_uj: int = MAX_UJ) -> Path:
    z = root / name
    z.mkdir(parents=True)
    (z / "name").write_text(label + "\n")
    (z / "energy_uj").write_text(f"{energy_uj}\n")
    (z / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return z


def set_uj(z: Path, value: int) -> None:
    (z / "energy_uj").write_text(f"{value}\n")


@pytest.fixture
def rapl(tmp_path):
    """Two packages (one near its counter's end), a DRAM sub-zone and a psys zone that are not counted."""
    root = tmp_path / "powercap"
    p0 = zone(root, "intel-rapl:0", "package-0", 1_000_000)
    p1 = zone(root, "intel-rapl:1", "package-1", MAX_UJ - 2_000_000)
    dram = zone(root, "intel-rapl:0:2", "dram", 0)
    psys = zone(root, "intel-rapl:2", "psys", 0)
    return root, p0, p1, dram, psys


class Ticks:
    """A clock (or CPU-seconds counter) that answers the given values in turn."""

    def __init__(self, *values: float):
        self.values = list(values)

    def __call__(self) -> float:
        return self.values.pop(0)


class FakeNvml:
    """What EnergyMeter uses of pynvml: counters in millijoules that advance by ``step_mj`` per read; a GPU in
    ``fail_after`` raises NVMLError once it has been read that many times, one in ``unsupported`` at once."""

    class NVMLError(Exception):
        pass

    def __init__(self, count=2, step_mj=(5000.0, 7000.0), fail_after=None, unsupported=(), init_error=None):
        self.count, self.step_mj = count, step_mj
        self.fail_after, self.unsupported, self.init_error = dict(fail_after or {}), set(unsupported), init_error
        self.reads = [0] * count
        self.counter = [1e9] * count
        self.calls: list[str] = []

    def nvmlInit(self):
        self.calls.append("init")
        if self.init_error:
            raise self.NVMLError(self.init_error)

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        if not 0 <= i < self.count:
            raise self.NVMLError("Invalid Argument")
        return ("handle", i)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        i = handle[1]
        if i in self.unsupported:
            raise self.NVMLError("Not Supported")
        if i in self.fail_after and self.reads[i] >= self.fail_after[i]:
            raise self.NVMLError("GPU is lost")
        self.reads[i] += 1
        value = self.counter[i]
        self.counter[i] += self.step_mj[i]
        return value


# --------------------------------------------------------------------------- RAPL
def test_rapl_sums_the_packages_and_undoes_a_counter_wrap(rapl):
    root, p0, p1, dram, psys = rapl
    meter = EnergyMeter(nvml=FakeNvml(count=0), rapl_root=str(root), poll_s=None, clock=Ticks(0.0, 10.0),
                        cpu_seconds=Ticks(0.0, 1.0), cores=2)
    meter.start()
    set_uj(p0, 1_000_000 + 300_000_000)  # +300 J
    set_uj(p1, 5_000_000)  # wrapped: 2 J to the end of its range, then 5 J
    set_uj(dram, 99_000_000)  # a sub-zone (inside package-0's figure or beside it): never added
    set_uj(psys, 99_000_000)  # the platform zone overlaps the packages: not counted
    r = meter.stop()
    assert r.parts["cpu"] == pytest.approx(300.0 + 2.0 + 5.0)
    assert r.sources["cpu"] == "measured: RAPL package-0,package-1"
    assert r.seconds == 10.0 and r.joules == pytest.approx(307.0) and r.complete


def test_rapl_polls_count_several_wraps_in_one_window(rapl):
    root, p0, p1, *_ = rapl
    counters = RaplCounters(root)
    counters.start()
    for _ in range(3):  # package-1 goes round its whole range three times, read between
        set_uj(p1, MAX_UJ - 1_000_000)
        counters.poll()
        set_uj(p1, MAX_UJ - 2_000_000)
        counters.poll()
    # each round: up to MAX - 1 J (from MAX - 2 J: +1 J, then +range - 1 J); 3 rounds of a full range
    assert counters.joules() == pytest.approx(3 * MAX_UJ / 1e6)
    assert counters.names == ("package-0", "package-1")


def test_rapl_poller_thread_reads_during_the_window(rapl):
    root, p0, *_ = rapl
    meter = EnergyMeter(nvml=FakeNvml(count=0), rapl_root=str(root), poll_s=0.01)
    meter.start()
    polls = []
    original = meter._rapl.poll
    meter._rapl.poll = lambda: (polls.append(1), original())[1]
    for _ in range(200):  # the poller thread calls poll within a few of its 10 ms periods
        if polls:
            break
        meter._stop.wait(0.01)
    set_uj(p0, 1_000_000 + 2_000_000)
    r = meter.stop()
    assert polls and r.parts["cpu"] == pytest.approx(2.0) and meter._poller is None


def test_unreadable_rapl_falls_back_to_the_model_and_says_why(rapl):
    root, p0, *_ = rapl
    (p0 / "energy_uj").unlink()  # as good as root-only: the counter cannot be read
    meter = EnergyMeter(nvml=FakeNvml(count=0), rapl_root=str(root), poll_s=None, cpu_watts=(10.0, 30.0), cores=1,
                        clock=Ticks(0.0, 2.0), cpu_seconds=Ticks(0.0, 1.0))
    meter.start()
    r = meter.stop()
    assert r.parts["cpu"] == pytest.approx((10.0 + 20.0 * 0.5) * 2.0)
    assert r.sources["cpu"].startswith("modelled: utilisation x spec watts (idle 10 W, active 30 W)")
    assert "RAPL not readable: FileNotFoundError" in r.sources["cpu"]


def test_rapl_failing_during_the_window_falls_back_to_the_model(rapl):
    root, p0, *_ = rapl
    meter = EnergyMeter(nvml=FakeNvml(count=0), rapl_root=str(root), poll_s=None, cpu_watts=(10.0, 30.0), cores=1,
                        clock=Ticks(0.0, 2.0), cpu_seconds=Ticks(0.0, 0.0))
    meter.start()
    set_uj(p0, 0)
    (p0 / "energy_uj").write_text("garbage\n")
    r = meter.stop()
    assert r.parts["cpu"] == pytest.approx(20.0) and "RAPL failed during the window: ValueError" in r.sources["cpu"]


# --------------------------------------------------------------------------- NVML
def test_nvml_counters_give_each_gpu_its_delta_and_shut_down(tmp_path):
    nvml = FakeNvml(count=2)
    meter = EnergyMeter(nvml=nvml, rapl_root=str(tmp_path), cpu_watts=(0.0, 0.0), clock=Ticks(0.0, 4.0),
                        cpu_seconds=Ticks(0.0, 0.0))
    with meter:
        pass
    r = meter.reading
    assert dict(r.parts) == {"gpu:0": 5.0, "gpu:1": 7.0, "cpu": 0.0}
    assert r.sources["gpu:0"] == r.sources["gpu:1"] == "measured: NVML total-energy counter"
    assert r.joules == 12.0 and r.watts == 3.0 and r.per_joule(24) == 2.0
    assert nvml.calls == ["init", "shutdown"]


def test_an_nvml_error_during_the_window_marks_that_gpu_unavailable_not_a_crash(tmp_path):
    nvml = FakeNvml(count=3, step_mj=(5000.0, 7000.0, 1000.0), fail_after={1: 1}, unsupported={2})
    meter = EnergyMeter(gpus=[0, 1, 2], nvml=nvml, rapl_root=str(tmp_path), cpu_watts=(0.0, 0.0))
    meter.start()
    r = meter.stop()
    assert dict(r.parts) == {"gpu:0": 5.0, "cpu": 0.0} and not r.complete
    assert r.sources["gpu:1"].startswith("unavailable: NVML total-energy counter failed during the window")
    assert "NVMLError: GPU is lost" in r.sources["gpu:1"]
    assert r.sources["gpu:2"] == "unavailable: NVML total-energy counter not readable (NVMLError: Not Supported)"
    assert r.to_json()["complete"] is False and nvml.calls[-1] == "shutdown"


def test_nvml_counters_meter_only_the_gpus_asked_for():
    nvml = FakeNvml(count=2)
    c = NvmlCounters(nvml, [1])
    assert c.joules() == {"gpu:1": 7.0}
    c = NvmlCounters(nvml, [5])  # no such GPU: unavailable, said so
    assert c.joules() == {} and "Invalid Argument" in c.unavailable["gpu:5"]


@pytest.mark.parametrize("nvml", [FakeNvml(init_error="Driver Not Loaded"), FakeNvml(count=0)])
def test_no_gpu_means_no_gpu_parts_not_zeros(nvml, tmp_path):
    meter = EnergyMeter(nvml=nvml, rapl_root=str(tmp_path), cores=4, clock=Ticks(0.0, 1.0),
                        cpu_seconds=Ticks(0.0, 0.0))
    meter.start()
    r = meter.stop()
    assert set(r.parts) == {"cpu"} and not any(k.startswith("gpu:") for k in r.sources)
    assert r.sources["gpu"].startswith("none metered: NVML")
    # no spec watts: the composer's per-core guess (2 W idle, 6 W active) x 4 cores, labelled a generic default
    assert r.parts["cpu"] == pytest.approx(8.0)
    assert r.sources["cpu"].startswith("modelled: utilisation x generic default watts (idle 8 W, active 24 W")


def test_without_pynvml_the_meter_says_nvml_is_not_usable(tmp_path, monkeypatch):
    import pearl_core.runtime.energy as energy

    def missing():
        raise ModuleNotFoundError("No module named 'pynvml'")

    monkeypatch.setattr(energy, "_import_nvml", missing)
    with EnergyMeter(rapl_root=str(tmp_path)) as meter:
        pass
    assert meter.reading.sources["gpu"] == "none metered: NVML not usable (ModuleNotFoundError: No module named " \
                                           "'pynvml')"


# --------------------------------------------------------------------------- the CPU model
def test_the_modelled_cpu_part_is_spec_watts_at_the_process_trees_utilisation(tmp_path):
    # 5 CPU s over 10 s on 2 cores: utilisation 0.25, 40 + (150 - 40) * 0.25 = 67.5 W, 675 J
    meter = EnergyMeter(nvml=FakeNvml(count=0), rapl_root=str(tmp_path), cpu_watts=(40, 150), cores=2,
                        clock=Ticks(100.0, 110.0), cpu_seconds=Ticks(1.0, 6.0))
    meter.start()
    r = meter.stop()
    assert r.parts["cpu"] == pytest.approx(675.0) and r.seconds == 10.0
    assert r.sources["cpu"].startswith("modelled: utilisation x spec watts (idle 40 W, active 150 W); "
                                       "utilisation 0.250 = 5.00 CPU s")
    assert r.per_joule(1350) == pytest.approx(2.0)
    busy = EnergyMeter(nvml=FakeNvml(count=0), rapl_root=str(tmp_path), cpu_watts=(40, 150), cores=2,
                       clock=Ticks(0.0, 1.0), cpu_seconds=Ticks(0.0, 9.0))  # more CPU s than cores: capped at 1
    busy.start()
    assert busy.stop().parts["cpu"] == pytest.approx(150.0)


def test_process_tree_cpu_seconds_follow_descendants_only(tmp_path):
    def stat(pid, ppid, utime, stime, cutime=0, cstime=0):
        d = tmp_path / str(pid)
        d.mkdir()
        fields = ["S", ppid, 0, 0, 0, 0, 0, 0, 0, 0, 0, utime, stime, cutime, cstime, 20, 0, 1]
        (d / "stat").write_text(f"{pid} (py thon) " + " ".join(map(str, fields)) + "\n")

    stat(100, 1, 100, 50, 30, 20)  # this process: its own and its reaped children's ticks
    stat(101, 100, 40, 10)  # a live child
    stat(102, 101, 5, 5)  # its child
    stat(200, 1, 999, 999)  # not in the tree
    (tmp_path / "self").mkdir()  # not a pid
    tick = os.sysconf("SC_CLK_TCK")
    assert process_tree_cpu_s(100, tmp_path) == pytest.approx((200 + 50 + 10) / tick)
    own = resource.getrusage(resource.RUSAGE_SELF)
    assert process_tree_cpu_s() >= own.ru_utime + own.ru_stime - 0.05  # the real tree holds at least this process


# --------------------------------------------------------------------------- the reading, bad input
def test_a_reading_with_no_joules_has_no_rate_and_round_trips_to_json():
    r = EnergyReading(0.0, 0.0, {}, {"cpu": "unavailable: test"})
    assert r.per_joule(100) is None and r.watts is None and not r.complete
    assert r.to_json() == {"seconds": 0.0, "joules": 0.0, "watts": None, "parts": {},
                           "sources": {"cpu": "unavailable: test"}, "complete": False}


@pytest.mark.parametrize("kw, match", [({"cpu_watts": (150, 40)}, "cpu_watts = \\(150, 40\\)"),
                                       ({"cpu_watts": (-1, 40)}, "0 <= idle <= active"),
                                       ({"cpu_watts": "lots"}, "cpu_watts = 'lots'"),
                                       ({"cores": 0}, "cores = 0 is invalid"),
                                       ({"gpus": "0"}, "gpus = '0' is invalid"),
                                       ({"gpus": [-1]}, "expected NVML indices")])
def test_bad_settings_are_refused_with_the_fix(kw, match):
    with pytest.raises(InvalidValueError, match=match):
        EnergyMeter(**kw)


def test_stop_before_start_is_refused():
    with pytest.raises(InvalidValueError, match="before start"):
        EnergyMeter().stop()


# --------------------------------------------------------------------------- a run's result.json
@pytest.mark.slow  # a parallel run's start-up: about 3 s on 2 cores
def test_a_runs_result_json_carries_its_energy_and_env_steps_per_joule(tmp_path):
    from run_kinds import config, plan_for

    from pearl_core.runtime.program import run_plan

    out = io.StringIO()
    rc = run_plan(config(tmp_path / "run", steps=160), plan_for(1), None, plan_hash="0" * 64, pearl_version="test",
                  quiet=True, out=out)
    assert rc == 0, out.getvalue()
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    energy = result["energy"]
    assert energy["env_steps"] == result["env_steps"] >= 160 and energy["seconds"] > 0
    assert energy["joules"] == pytest.approx(sum(energy["parts"].values())) and energy["joules"] > 0
    assert result["env_steps_per_joule"] == pytest.approx(result["env_steps"] / energy["joules"])
    assert energy["sources"]["cpu"].startswith(("measured: RAPL", "modelled: utilisation x generic default watts"))
    assert set(energy["parts"]) <= set(energy["sources"]) and "window" in energy
    assert "env steps/J" in out.getvalue()


# --------------------------------------------------------------------------- the composer's host cells
class Heater:
    """A measuring backend whose every probe 'draws' the joules given for its primitive from a fake package."""

    def __init__(self, package: Path, joules: dict[str, float]):
        self.package, self.joules = package, joules

    def measure_primitive(self, device, workload, request):
        from pearl_core.composer.matrix import PrimitiveCost

        now = int((self.package / "energy_uj").read_text())
        set_uj(self.package, now + int(self.joules[request.primitive] * 1e6))
        t = request.threads
        if request.primitive == "replay":
            return PrimitiveCost("replay", t, 3e-5, sample_s=1e-5, update_s=1e-5, insert_s=1e-5)
        if request.primitive == "worker_loop":
            return PrimitiveCost("worker_loop", t, 4e-4, sample_s=1e-5, update_s=1e-5, insert_s=1e-5, learner_s=3e-4)
        return PrimitiveCost(request.primitive, t, 5e-4 if request.primitive == "learner" else 1e-5)


def test_the_composers_host_cells_draw_the_power_rapl_measured_over_their_probes(rapl, monkeypatch):
    from pearl_core.composer import hostprofile
    from pearl_core.composer.spec import DeviceSpec
    from pearl_core.composer.workload import Workload

    monkeypatch.setattr(hostprofile.os, "cpu_count", lambda: 3)
    monkeypatch.setattr(hostprofile, "learner_threads_yield", lambda wl: False)
    root, p0, *_ = rapl
    host = DeviceSpec("cpu0", "cpu", 2**30, 5.0, 20.0, cores=3)
    wl = Workload(batch_size=8, obs_bytes=16, action_bytes=8, n_actors=1, insert_batch=2)
    heater = Heater(p0, {"actor_step": 1.0, "learner": 20.0, "replay": 30.0, "worker_loop": 45.0, "message_hop": 1.0})
    clock = iter(range(0, 1000, 1)).__next__  # each probe takes 1 "second" of the injected clock
    row = hostprofile.profile_host("heat", heater, host, wl, iterations=20, warmup=1, rapl_root=str(root),
                                   clock=lambda: float(clock()))
    assert row.rm_sample.power_w == row.rm_insert.power_w == pytest.approx(30.0)  # the replay probe's watts
    assert row.learner.power_w == pytest.approx(20.0)
    assert row.co_learner.power_w == row.co_rm_sample.power_w == pytest.approx(45.0)
    note = next(n for n in row.notes if n.startswith("cell power"))
    assert note.startswith("cell power: measured, RAPL package-0,package-1 averaged over each probe: replay")

    spec_row = hostprofile.profile_host("heat", heater, host, wl, iterations=20, warmup=1,
                                        rapl_root=str(root / "absent"))
    # no RAPL: the spec's 5-20 W scaled by busy threads (actor + learner + RM threads of 3), as before
    busy = 1 + spec_row.config["learner_threads"] + spec_row.config["rm_threads"]
    assert spec_row.rm_sample.power_w == pytest.approx(5.0 + 15.0 * min(1.0, busy / 3))
    note = next(n for n in spec_row.notes if n.startswith("cell power"))
    assert "the spec's watts (idle 5 W, active 20 W)" in note and "RAPL not used: OSError" in note


# --------------------------------------------------------------------------- the CUDA plugin's GPU cells
def test_gpu_probe_watts_are_the_nvml_energy_counters_average_over_the_timed_loops():
    profile = pytest.importorskip("pearl_cuda.profile")
    ran = []
    out, watts, how = profile.average_board_watts(0, lambda: ran.append(1) or "cells", lambda: 300.0, "spec",
                                                  nvml=FakeNvml(count=1, step_mj=(90_000.0,)),
                                                  clock=Ticks(5.0, 5.5))
    assert (out, ran, watts) == ("cells", [1], pytest.approx(90.0 / 0.5))
    assert how == "the NVML energy counter over the timed loops"
    # a loop too short for the counter, a GPU without it, no NVML at all: the fallback's watts, and from where
    for nvml, clock in ((FakeNvml(count=1), Ticks(0.0, 0.01)), (FakeNvml(count=1, unsupported={0}), Ticks(0.0, 1.0)),
                        (FakeNvml(init_error="Driver Not Loaded"), Ticks(0.0, 1.0))):
        assert profile.average_board_watts(0, lambda: "cells", lambda: 300.0, "spec", nvml=nvml, clock=clock) == (
            "cells", 300.0, "spec")
    failing = FakeNvml(count=1, fail_after={0: 1})  # NVMLError during the loop: the fallback, NVML shut down
    assert profile.average_board_watts(0, lambda: 1, lambda: 250.0, "nvml", nvml=failing, clock=Ticks(0.0, 1.0)) == (
        1, 250.0, "nvml")
    assert failing.calls == ["init", "shutdown"]


def test_a_gpu_replay_cost_carries_the_measured_watts_and_says_so(monkeypatch):
    import importlib.util
    import sys

    profile = pytest.importorskip("pearl_cuda.profile")
    from pearl_core.composer.workload import Workload
    from pearl_cuda import kernels
    from pearl_core.sdk import MeasureRequest

    path = Path(profile.__file__).resolve()
    fake = Path(__file__).resolve().parents[2] / "plugins" / "pearl_cuda" / "tests" / "fake_cupy.py"
    if not fake.is_file():
        pytest.skip(f"no fake cupy at {fake} (pearl_cuda installed from {path})")
    spec = importlib.util.spec_from_file_location("pearl_energy_fake_cupy", fake)
    fake_cupy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake_cupy)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(count=1, step_mj=(50_000.0,)))
    monkeypatch.setattr(profile, "NVML_MIN_WINDOW_S", 0.0)
    measure = profile.average_board_watts  # the timed loops take a quarter of a second of the injected clock
    monkeypatch.setattr(profile, "average_board_watts", lambda *a, **kw: measure(*a, clock=Ticks(10.0, 10.25), **kw))
    wl = Workload(batch_size=16, obs_bytes=16, action_bytes=8, capacity=4096, fanout=16, insert_batch=4)
    kernels.load.cache_clear()  # the kernels compiled for the fake cupy are not kept for other tests
    try:
        cost = profile.GpuSession(0, wl, 300.0).replay(MeasureRequest("replay", 1, iterations=2, warmup=0))
    finally:
        kernels.load.cache_clear()
    assert cost.notes[0] == "power from the NVML energy counter over the timed loops"
    assert cost.power_w == pytest.approx(50.0 / 0.25) and cost.sample_s >= 0


def test_a_runs_meter_takes_the_plans_host_watts_and_counts_this_segments_steps(tmp_path):
    from types import SimpleNamespace

    from pearl_core.runtime.energy import RunEnergy

    spec = {"host": "cpu0", "device": [
        {"name": "gpu0", "kind": "cuda", "idle_power_w": 30.0, "active_power_w": 250.0},
        {"name": "cpu0", "kind": "cpu", "idle_power_w": 32.0, "active_power_w": 96.0, "cores": 16,
         "assumed": ["idle_power_w", "active_power_w"]}]}
    run = RunEnergy(spec, nvml=FakeNvml(count=1), rapl_root=str(tmp_path), clock=Ticks(0.0, 10.0),
                    cpu_seconds=Ticks(0.0, 40.0))
    run.on_start(SimpleNamespace(env_steps=1000))  # a resumed run: 1,000 steps were taken before this segment
    run.on_end(None, None)
    got = run.fields(env_steps=4000)
    energy = got["energy"]
    # 40 CPU s / (10 s x 16 cores) = 0.25: 32 + 64 x 0.25 = 48 W for 10 s; the GPU's 5 J
    assert energy["parts"] == {"gpu:0": 5.0, "cpu": pytest.approx(480.0)} and energy["env_steps"] == 3000
    assert got["env_steps_per_joule"] == pytest.approx(3000 / 485.0)
    assert "spec watts (idle 32 W, active 96 W; host 'cpu0' of the plan's hardware spec, figures assumed by " \
           "detection)" in energy["sources"]["cpu"]
    assert "env steps/J" in run.summary(4000) and "gpu:0 measured" in run.summary(4000)
    unmetered = RunEnergy(None)  # a run that never started its window: no figures, not zeros
    assert unmetered.fields(10) == {"energy": None, "env_steps_per_joule": None}


def test_a_meter_that_cannot_start_leaves_the_run_unmetered_not_failed(tmp_path, rapl, caplog):
    from types import SimpleNamespace

    from pearl_core.runtime.energy import RunEnergy

    def broken():
        raise OSError("no /proc here")

    nvml = FakeNvml(count=1)
    run = RunEnergy(None, nvml=nvml, rapl_root=str(rapl[0]), poll_s=0.01, cpu_seconds=broken)
    run.on_start(SimpleNamespace(env_steps=0))
    run.on_end(None, None)
    assert run.fields(100) == {"energy": None, "env_steps_per_joule": None}
    assert run.meter._poller is None and nvml.calls == ["init", "shutdown"]  # the poller and NVML were let go
    assert "starting the meter failed (OSError: no /proc here)" in caplog.text
