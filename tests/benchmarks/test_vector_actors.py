"""Smoke test: ``benchmarks/vector_actors.py --quick --no-pong`` prints a row per back end (EnvPool's
only where it is installed)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "vector_actors.py"


def test_vector_actors_quick_prints_a_row_per_back_end(tmp_path):
    from pearl_core.runtime.vector import envpool_available

    out = tmp_path / "vec.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--no-pong", "--out", str(out)],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "| case | back end | median env steps/s | min-max | vs loop |" in proc.stdout
    rows = [line.split("|") for line in proc.stdout.splitlines() if line.startswith("| CartPole")]
    want = {"loop", "gym-sync", "gym-async"} | ({"envpool"} if envpool_available() else set())
    for n in ("x1", "x8"):
        assert {r[2].strip() for r in rows if r[1].strip().endswith(n)} == want
    for r in rows:
        assert float(r[3].replace(",", "")) > 0  # a measured rate, not a placeholder
    if not envpool_available():
        assert "EnvPool is not installed" in proc.stdout
    assert out.read_text(encoding="utf-8").strip() in proc.stdout
