"""Smoke test: ``benchmarks/learner_step.py --quick`` times PEARL's DQN engines and prints its table."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
from cpu_backend import needs_cpu_backend

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "learner_step.py"


def test_learner_step_quick_prints_a_row_per_engine(tmp_path):
    out = tmp_path / "step.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "| contestant | median us/step | min-max us | steps/s | vs sb3 |" in proc.stdout
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| pearl-")]
    assert {r.split("|")[1].strip() for r in rows} >= {"pearl-numpy", "pearl-torch"}
    for r in rows:
        assert float(r.split("|")[2]) > 0  # a measured time, not a placeholder
    assert out.read_text(encoding="utf-8").strip() in proc.stdout


def test_learner_step_rejects_an_unknown_contestant():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--contestants", "pearl-jax"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown contestants ['pearl-jax']" in proc.stderr


def _load_learner_step():
    import importlib.util

    spec = importlib.util.spec_from_file_location("learner_step_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_table_has_a_vs_sbx_column_only_when_sbx_ran():
    ls = _load_learner_step()
    times = {"pearl-native": [500.0, 600.0, 700.0], "sb3": [2400.0], "sbx": [1000.0, 1200.0]}
    lines = ls.table(times)
    assert lines[:2] == ["| contestant | median us/step | min-max us | steps/s | vs sb3 | vs sbx |",
                         "|---|---|---|---|---|---|"]
    assert lines[2] == "| pearl-native | 600 | 500-700 | 1667 | 4.00x faster | 1.83x faster |"
    assert lines[3] == "| sb3 | 2400 | 2400-2400 | 417 | - | 0.46x faster |"
    assert lines[4] == "| sbx | 1100 | 1000-1200 | 909 | 2.18x faster | - |"
    without = ls.table({"pearl-numpy": [800.0]})
    assert without == ["| contestant | median us/step | min-max us | steps/s | vs sb3 |", "|---|---|---|---|---|",
                       "| pearl-numpy | 800 | 800-800 | 1250 | - |"]


def test_sbx_contestant_is_skipped_with_a_line_when_sbx_is_missing():
    import importlib.util

    if importlib.util.find_spec("sbx") is not None:
        pytest.skip("sbx-rl is installed here; the skip path needs an environment without it")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--contestants", "pearl-numpy,sbx", "--rounds", "1",
                           "--steps", "2", "--warmup", "0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "skipped sbx: sbx-rl is not importable (ModuleNotFoundError" in proc.stdout
    assert "| pearl-numpy |" in proc.stdout and "vs sbx" not in proc.stdout


@needs_cpu_backend
@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_learner_step_quick_times_the_actor_critics(algo):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--algo", algo, "--quick"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"{algo.upper()} step (uniform sample of 256 + one update" in proc.stdout
    rows = {line.split("|")[1].strip(): line for line in proc.stdout.splitlines() if line.startswith("| pearl-")}
    assert set(rows) == {"pearl-native", "pearl-torch", "pearl-kernel"}
    for r in rows.values():
        assert float(r.split("|")[2]) > 0
