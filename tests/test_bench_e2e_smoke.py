"""Smoke test: ``benchmarks/e2e_dqn.py --quick`` trains a few thousand steps and prints its table.

Only the PEARL serial contestant runs, so the test needs the ``rl`` extra but not
stable-baselines3 (``make test`` installs ``.[rl,test]`` only).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "e2e_dqn.py"


def test_e2e_dqn_quick_runs_and_prints_a_table(tmp_path):
    out = tmp_path / "e2e.md"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--seeds", "0", "--contestants", "pearl-serial-uniform",
         "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    header = "| contestant | seed | solved at (env steps) | wall-to-solved s | env steps/s | updates/s | samples/s |"
    assert header in proc.stdout
    assert "| pearl-serial-uniform | 0 | not solved (3000) |" in proc.stdout
    assert header in out.read_text(encoding="utf-8")
