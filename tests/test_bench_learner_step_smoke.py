"""Smoke test: ``benchmarks/learner_step.py --quick`` times PEARL's DQN engines and prints its table."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "learner_step.py"


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
