"""Smoke test of benchmarks/frame_storage.py: a short run on real Pong frames reads back equal."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_frame_storage_benchmark_runs(capsys):
    pytest.importorskip("ale_py", reason="needs the pixels extra (make test installs it)")
    pytest.importorskip("cv2", reason="needs the pixels extra (make test installs it)")
    spec = importlib.util.spec_from_file_location("frame_storage_bench", ROOT / "benchmarks" / "frame_storage.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rc = mod.main(["--games", "ALE/Pong-v5", "--envs", "2", "--steps", "500", "--capacity", "300", "--batch", "16"])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| ALE/Pong-v5"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "300" and cells[-1] == "yes"
    assert float(cells[3]) <= 1.1 and rc == 0
