"""``benchmarks/device/bench.py`` (issue 40, table 4): its ``--dry-run`` runs every contestant on this machine.

The dry run is the device benchmark's own code path with seconds-long windows on the CPU (SB3 on the
CPU, SBX on JAX's CPU backend, PEARL's composed plans for this machine): every (workload, contestant)
row must come out with a positive, finite rate and an energy figure that says where its joules came
from. The window's rules (open after the warm-up on a tick with new updates, close likewise, truncate
at the cap) are checked on a made-up clock.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "device" / "bench.py"
KEYS = {"workload", "contestant", "env_steps_per_s", "updates_per_s", "env_steps_per_joule", "joules_source"}


def _bench():
    """The script as a module (registered first: its dataclasses look their module up)."""
    if "device_bench" not in sys.modules:
        spec = importlib.util.spec_from_file_location("device_bench", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules["device_bench"] = module
        spec.loader.exec_module(module)
    return sys.modules["device_bench"]


class _Meter:
    def __init__(self, log):
        self.log = log

    def start(self):
        self.log.append("start")

    def stop(self):
        self.log.append("stop")
        return _Reading()


class _Reading:
    joules = 10.0
    sources = {"gpu": "none metered: NVML not usable (ImportError)", "cpu": "modelled: utilisation x spec watts"}

    def per_joule(self, n):
        return n / self.joules

    def to_json(self):
        return {"joules": self.joules}


def _window(bench, log, now, **kw):
    args = {"warmup_s": 1.0, "window_s": 2.0, "cap_s": 10.0, **kw}
    return bench.Window(args["warmup_s"], args["window_s"], args["cap_s"], lambda: _Meter(log), clock=lambda: now[0])


def test_the_window_spans_whole_train_bursts():
    bench, log, now = _bench(), [], [0.0]
    w = _window(bench, log, now)
    # (time, env steps, updates): a burst of updates every 4 ticks, as SB3's DQN trains after collecting
    ticks = [(0.5, 10, 0), (1.0, 20, 5), (1.5, 30, 5), (2.2, 40, 5), (2.4, 50, 10), (3.0, 60, 10),
             (4.5, 70, 10), (4.6, 80, 15), (5.0, 90, 15)]
    going = []
    for t, steps, updates in ticks:
        now[0] = t
        going.append(w.tick(steps, updates))
    # learning seen at 1.0; warm-up over at 2.0, but the window opens only at the next burst (2.4);
    # 2 s later (4.4) it waits for the next burst again and closes at 4.6; the run then stops
    assert going == [True, True, True, True, True, True, True, False, False]
    assert w.start == (50, 10, 2.4) and w.end == (80, 15, 4.6) and log == ["start", "stop"]
    r = w.result()
    assert r["env_steps_per_s"] == pytest.approx(30 / 2.2) and r["updates_per_s"] == pytest.approx(5 / 2.2)
    assert r["env_steps_per_joule"] == pytest.approx(3.0) and not r["truncated"]
    assert r["joules_source"] == "gpu none metered (NVML not usable); cpu modelled (utilisation x spec watts)"


def test_the_cap_truncates_an_open_window_and_a_run_that_never_learns_has_none():
    bench, log, now = _bench(), [], [0.0]
    w = _window(bench, log, now, cap_s=3.0)
    for t, updates in ((0.5, 1), (1.6, 2), (3.1, 3)):
        now[0] = t
        going = w.tick(100 * t, updates)
    assert going is False and w.truncated and w.result()["window_s"] == pytest.approx(1.5)
    idle = _window(bench, [], now)
    now[0] = 20.0
    assert idle.tick(5, 0) is False  # past the cap without an update
    idle.finish()
    with pytest.raises(RuntimeError, match="no update was seen"):
        idle.result()


def test_a_dry_run_needs_its_own_out_directory():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry-run"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--dry-run needs --out DIR" in proc.stderr


@pytest.mark.slow  # ~45 s on 2 cores: every contestant starts, learns and is measured for a second
def test_the_dry_run_measures_every_contestant(tmp_path):
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("sbx")
    committed = ROOT / "benchmarks" / "results" / "h200" / "table4.json"
    before = committed.read_bytes() if committed.exists() else None
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / "table4.json").read_text(encoding="utf-8"))
    assert {"date", "commit", "gpu", "cpu_cores", "rows"} <= set(doc) and doc["dry_run"] is True
    assert doc["status"].startswith("complete")
    bench = _bench()
    expected = {(w.key, c) for w in bench.WORKLOADS for c in w.contestants}
    assert {(r["workload"], r["contestant"]) for r in doc["rows"]} == expected and len(doc["rows"]) == len(expected)
    for r in doc["rows"]:
        assert KEYS <= set(r), r
        where = f"{r['workload']} {r['contestant']}: {r.get('errors')}"
        assert math.isfinite(r["env_steps_per_s"]) and r["env_steps_per_s"] > 0, where
        assert math.isfinite(r["updates_per_s"]) and r["updates_per_s"] > 0, where
        assert math.isfinite(r["env_steps_per_joule"]) and r["env_steps_per_joule"] > 0, where
        assert "cpu " in r["joules_source"], where  # every part says how its joules were obtained
    md = (tmp_path / "table4.md").read_text(encoding="utf-8")
    assert "DRY RUN" in md and "| dqn-pong | PEARL composed |" in md
    assert (committed.read_bytes() if committed.exists() else None) == before  # the committed table untouched
