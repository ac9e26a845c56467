"""Examples run end to end with tiny budgets (they check the wiring, not learning)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_train_dqn_cartpole_runs(tmp_path):
    cmd = [sys.executable, str(ROOT / "examples" / "train_dqn_cartpole.py"),
           "--max-env-steps", "1200", "--log-dir", str(tmp_path / "run")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "composed plan" in out.stdout and "throughput:" in out.stdout
    assert "stopped by max_env_steps" in out.stdout
    assert any((tmp_path / "run").iterdir())


def test_replay_demo_runs():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "replay_demo.py")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "prioritized replay on backend 'cpu'" in out.stdout
