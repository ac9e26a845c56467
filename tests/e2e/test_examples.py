"""Examples run end to end with tiny budgets (they check the wiring, not learning)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_train_dqn_cartpole_runs(tmp_path):
    cmd = [sys.executable, str(ROOT / "examples" / "train_dqn_cartpole.py"),
           "--max-env-steps", "1200", "--log-dir", str(tmp_path / "run")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "composed plan" in out.stdout and "throughput:" in out.stdout
    assert "stopped by max_env_steps" in out.stdout
    assert any((tmp_path / "run").iterdir())


@pytest.mark.slow
def test_sac_pendulum_example_composes_and_trains(tmp_path):
    cmd = [sys.executable, str(ROOT / "examples" / "sac_pendulum.py"), "--hidden", "32,32", "--no-profile",
           "--log-dir", str(tmp_path / "run"), "--", "--max-env-steps", "1300", "--quiet"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env={**os.environ, "PEARL_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Choice:" in out.stdout and "wrote " in out.stdout
    assert "pearl_core.algorithms.sac:SAC" in (tmp_path / "run" / "runtime.py").read_text()
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["stop_reason"] == "max_env_steps" and result["env_steps"] >= 1300
    assert result["updates"] == result["env_steps"] - 1000  # one update per env step after learning starts


@pytest.mark.slow
def test_dqn_pixels_example_composes_and_trains(tmp_path):
    pytest.importorskip("minatar", reason="the pixels example needs the 'pixels' extra (make test installs it)")
    cmd = [sys.executable, str(ROOT / "examples" / "dqn_pixels.py"), "--steps", "1200", "--hidden", "32",
           "--no-profile", "--log-dir", str(tmp_path / "run"), "--", "--quiet"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env={**os.environ, "PEARL_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "'MinAtar/Breakout-v1'" in (tmp_path / "run" / "runtime.py").read_text()
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["stop_reason"] == "max_env_steps" and result["env_steps"] >= 1200
    assert result["updates"] > 0


def test_replay_demo_runs():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "replay_demo.py")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "prioritized replay on backend 'cpu'" in out.stdout
