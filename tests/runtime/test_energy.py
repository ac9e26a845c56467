"""pearl_core.runtime.energy: GPU joules from NVML's total-energy counter, CPU joules from RAPL where readable and
else modelled (labelled so), on fake meters: a fake powercap tree in tmp_path, a fake ``pynvml`` module."""

from __future__ import annotations

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
