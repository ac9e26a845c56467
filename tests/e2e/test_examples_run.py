"""The DDPG, TD3 and custom-trainer examples compose, write their program and train (tiny budgets: wiring only)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cpu_backend import needs_cpu_backend

pytestmark = needs_cpu_backend

ROOT = Path(__file__).resolve().parents[2]


def run_example(name: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "examples" / name), "--no-profile", "--quiet",
           "--log-dir", str(tmp_path / "run"), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env={**os.environ, "PEARL_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def result(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "run" / "result.json").read_text())


@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
@pytest.mark.parametrize("name, trainer", [("ddpg_pendulum.py", "DDPG"), ("td3_pendulum.py", "TD3")])
def test_pendulum_examples_compose_and_train(tmp_path, name, trainer):
    out = run_example(name, tmp_path, "--max-env-steps", "1300", "--hidden", "32,32")
    assert "Choice:" in out.stdout and "wrote " in out.stdout
    program = (tmp_path / "run" / "runtime.py").read_text()
    assert "'Pendulum-v1'" in program and f":{trainer}'" in program
    res = result(tmp_path)
    assert res["stop_reason"] == "max_env_steps" and res["env_steps"] >= 1300
    assert res["updates"] == res["env_steps"] - 1000  # one update per env step after learning starts


@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
def test_custom_trainer_example_trains_and_loads_its_policy(tmp_path):
    out = run_example("custom_trainer.py", tmp_path, "--max-env-steps", "1500")
    assert "QLearner keeps the trainer contract" in out.stdout
    assert "'pearl_user_script:QLearner'" in (tmp_path / "run" / "runtime.py").read_text()
    res = result(tmp_path)
    assert res["stop_reason"] == "max_env_steps" and res["env_steps"] >= 1500 and res["updates"] > 0
    assert "greedy return of the trained QLearner over 5 episodes" in out.stdout  # load_policy + evaluate_policy


@pytest.mark.slow  # two runs: ~35 s on 2 cores
def test_a_rerun_keeps_the_earlier_run(tmp_path):
    """A second run with the same --log-dir writes <log-dir>-2, its program next to its own files."""
    run_example("td3_pendulum.py", tmp_path, "--max-env-steps", "1100", "--hidden", "16")
    first = (tmp_path / "run" / "result.json").read_bytes()
    run_example("td3_pendulum.py", tmp_path, "--max-env-steps", "1100", "--hidden", "16")
    assert (tmp_path / "run" / "result.json").read_bytes() == first
    assert (tmp_path / "run-2" / "runtime.py").is_file() and (tmp_path / "run-2" / "result.json").is_file()
