"""Smoke test: ``benchmarks/runtime_knobs.py --quick`` runs the base plan and one knob change for real and
prints a measured row for each (seconds per update of a ParallelRuntime run)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "runtime_knobs.py"


@pytest.mark.slow
def test_runtime_knobs_quick_measures_the_base_and_a_knob(tmp_path):
    out = tmp_path / "knobs.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "| knob | value | median ms/update | min-max | env steps/s | vs base |" in proc.stdout
    rows = [line.split("|") for line in proc.stdout.splitlines() if line.startswith("| base") or
            line.startswith("| envs_per_actor")]
    assert [r[1].strip() for r in rows] == ["base", "envs_per_actor"]
    for r in rows:
        assert float(r[3]) > 0 and float(r[5].replace(",", "")) > 0  # measured, not placeholders
    assert rows[0][6].strip() == "1.00x"
    assert out.read_text(encoding="utf-8").strip() in proc.stdout
