"""``benchmarks/actor_scaling.py``: the dry run measures 1 and 2 actors for real, env-only and with a learner,
and writes the table and the JSON; the window callback and the count parser on their own."""

from __future__ import annotations

import importlib.util
import json
import math
import pathlib
import subprocess
import sys
from types import SimpleNamespace

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "actor_scaling.py"


def _module():
    spec = importlib.util.spec_from_file_location("actor_scaling", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["actor_scaling"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_parse_counts():
    m = _module()
    assert m.parse_counts("1-4") == [1, 2, 3, 4] and m.parse_counts("8,1-2,8") == [1, 2, 8]
    for bad in ("0-3", "3-1", "x", "1,,2"):
        with pytest.raises(SystemExit):
            m.parse_counts(bad)


def test_the_window_measures_the_steady_slope_and_stops_the_run(monkeypatch):
    m = _module()
    clock = iter([10.0, 10.5, 11.0, 12.0, 13.0, 14.5])
    monkeypatch.setattr(m.time, "perf_counter", lambda: next(clock))
    stops = []
    run = SimpleNamespace(env_steps=0, updates=0, stop=stops.append)
    w = m.Window(warmup_s=1.0, window_s=3.0)
    for steps, updates in [(100, 0), (600, 0), (1_000, 10), (2_000, 510), (3_000, 1_010), (4_500, 1_760)]:
        run.env_steps, run.updates = steps, updates
        w.on_step(run)
    # warm-up ends at t=11 (1,000 steps), the window at t=14.5 (4,500 steps): 3,500 / 3.5 s
    assert w.rates() == (1_000.0, 500.0) and len(stops) == 1
    assert all(math.isnan(x) for x in m.Window(1.0, 3.0).rates())  # a run that ended before its window


@pytest.mark.slow  # four short ParallelRuntime runs (about 25 s on the 2-core VM)
def test_dry_run_measures_one_and_two_actors(tmp_path):
    out = tmp_path / "scaling.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(out)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "| actors | envs/actor | env-only env steps/s | speed-up vs 1 actor |" in proc.stdout
    assert out.read_text(encoding="utf-8").strip() in proc.stdout
    data = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    assert data["dry_run"] is True and [r["actors"] for r in data["rows"]] == [1, 2]
    one, two = data["rows"]
    assert one["speedup"] == 1.0 and two["speedup"] == two["env_only"] / one["env_only"]
    for r in data["rows"]:
        assert r["env_only"] > 0 and r["learner"] > 0 and r["updates"] > 0  # measured
        assert r["rounds"]["env-only"][0][1] == 0  # env-only: no update ran
