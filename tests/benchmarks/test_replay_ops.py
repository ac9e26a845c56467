"""Smoke test: ``benchmarks/replay_ops.py --quick`` runs and prints its tables."""

from __future__ import annotations

import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "replay_ops.py"


def test_replay_ops_quick_runs_and_prints_a_table(tmp_path):
    out = tmp_path / "bench.md"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "| contestant | M items/s | vs best peer |" in proc.stdout
    assert "## Summary" in proc.stdout
    assert out.read_text(encoding="utf-8").startswith("# PEARL replay-ops benchmark")
