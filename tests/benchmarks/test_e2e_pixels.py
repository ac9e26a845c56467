"""Smoke test: ``benchmarks/e2e_pixels.py --quick`` trains PEARL's DQN on MinAtar and Atari briefly and
prints its tables.

Only PEARL contestants run, so the test needs the ``rl`` and ``pixels`` extras (``make test`` installs
both) but not stable-baselines3 or SBX (the ``bench`` extra); without them the peers are skipped with a
line in the report. Without the ``pixels`` extra (ale-py, minatar) the runs are skipped with that reason.
The helpers that turn a run's evaluations and clock into the table's figures are checked on made-up numbers.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "e2e_pixels.py"
PEARL_CONTESTANTS = ("pearl-serial-uniform", "pearl-par1-uniform", "pearl-par2-uniform")
HEADER = ("| contestant | seed | env steps | updates | wall s | eval s | env steps/s | updates/s | "
          "window env steps/s | window updates/s | return @300 | return @600 |")


def _need(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"the pixels extra is not installed here ({', '.join(missing)} missing): "
                    "pip install -e '.[pixels]' (make test installs it)")


def _run(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    out = tmp_path / "e2e_px.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--seeds", "0", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc, out.read_text(encoding="utf-8")


def _section(text: str, env_id: str) -> str:
    return text.split(f"## {env_id}\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.slow  # ~12-20 s on 2 cores: `make test` runs it, `make test-fast` does not
def test_quick_minatar_has_a_row_per_pearl_contestant(tmp_path):
    _need("minatar")
    proc, written = _run(tmp_path, "--envs", "MinAtar/Breakout-v1", "--contestants", ",".join(PEARL_CONTESTANTS))
    section = _section(proc.stdout, "MinAtar/Breakout-v1")
    assert HEADER in section
    for name in PEARL_CONTESTANTS:
        assert f"| {name} | 0 | 600 | 100 |" in section  # the run's row: the whole budget, (600 - 200) / 4 updates
        assert f"| {name} | 1 |" in section                # its summary row: one run
    assert "vs SB3" not in section  # no peer ran: no ratio columns
    # the hyper-parameter table: the zoo's target interval in PEARL's updates, PEARL's Q-network size
    assert "| 1000 / 250 |" in proc.stdout and "| 132,179 |" in proc.stdout
    assert HEADER in written and "status: complete" in written


@pytest.mark.slow  # ~12-20 s on 2 cores: `make test` runs it, `make test-fast` does not
def test_quick_atari_serial_row(tmp_path):
    _need("ale_py", "cv2")
    proc, _ = _run(tmp_path, "--envs", "ALE/Pong-v5", "--contestants", "pearl-serial-uniform")
    section = _section(proc.stdout, "ALE/Pong-v5")
    assert "| pearl-serial-uniform | 0 | 600 | 100 |" in section
    row = next(ln for ln in section.splitlines() if ln.startswith("| pearl-serial-uniform | 0 |"))
    assert -21.0 <= float(row.split("|")[-2]) <= 21.0  # return @600: a whole game's real (unclipped) score
    assert "| 1,687,206 |" in proc.stdout  # Nature-DQN encoder, FC 512, 6 actions


def test_missing_peers_are_skipped_with_a_report_line(tmp_path):
    _need("minatar")
    if importlib.util.find_spec("stable_baselines3") is not None or importlib.util.find_spec("sbx") is not None:
        pytest.skip("stable-baselines3 or sbx-rl is installed here; the skip path needs an environment without them")
    proc, written = _run(tmp_path, "--envs", "MinAtar/Breakout-v1", "--contestants", "sb3,sbx")
    assert "skipped sb3: stable-baselines3 is not installed" in proc.stdout
    assert "skipped sbx: sbx-rl is not importable (ModuleNotFoundError" in proc.stdout
    assert "| sb3 |" not in proc.stdout and "| sbx |" not in proc.stdout  # no run, no row
    assert "skipped sbx" in written


def _load():
    spec = importlib.util.spec_from_file_location("e2e_pixels_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_cases_marks_and_window():
    e2e = _load()
    case = e2e.make_case("MinAtar/Breakout-v1", quick=False)
    assert (case.budget, case.learning_starts, case.marks, case.window_start, case.buffer) == (
        50_000, 5_000, (10_000, 20_000, 30_000, 40_000, 50_000), 6_000, 100_000)
    pong = e2e.make_case("ALE/Pong-v5", quick=False, budget=30_000, learning_starts=2_000, mark_every=10_000)
    assert (pong.budget, pong.learning_starts, pong.marks, pong.window_start, pong.atari) == (
        30_000, 2_000, (10_000, 20_000, 30_000), 3_000, True)
    quick = e2e.make_case("ALE/Pong-v5", quick=True)
    assert (quick.budget, quick.learning_starts, quick.marks, quick.eval_episodes) == (600, 200, (300, 600), 1)


def test_measures_from_evaluations_and_clock():
    e2e = _load()
    case = e2e.make_case("MinAtar/Breakout-v1", quick=False, budget=30_000, mark_every=10_000)
    # the parallel runtime evaluates at the first message past a mark; a mark with no evaluation stays empty
    evals = [(10_032, 1.5), (30_000, 7.25)]
    out = e2e.measures(case, evals, start=(6_000, 250, 20.0), end=(30_000, 6_250, 80.0), env_steps=30_000,
                       updates=6_250, wall=100.0, eval_s=4.0)
    assert out["returns_at"] == {"10000": 1.5, "20000": None, "30000": 7.25}
    assert out["window"] == [6_000, 30_000]
    assert out["window_env_steps_per_s"] == pytest.approx(24_000 / 60) and out["window_updates_per_s"] == 100.0
    assert (out["env_steps_per_s"], out["updates_per_s"], out["eval_s"]) == (300.0, 62.5, 4.0)
    assert e2e.measures(case, [], None, None, 10, 0, 1.0, 0.0)["window_env_steps_per_s"] is None


def test_pearl_gets_the_zoo_values():
    e2e = _load()
    case = e2e.make_case("ALE/Pong-v5", quick=False)
    kw = e2e.pearl_trainer_kwargs(case)
    assert kw["target_update_every"] == 250  # SB3's 1000 env steps at train_freq 4, gradient_steps 1
    assert (kw["lr"], kw["eps_final"], kw["eps_fraction"], kw["max_grad_norm"], kw["total_env_steps"]) == (
        1e-4, 0.01, 0.1, 10.0, case.budget)
    cfg = e2e.pearl_config("pearl-par2-uniform", case, 0, "/tmp/unused")
    assert (cfg.batch_size, cfg.replay_ratio, cfg.train_every, cfg.learning_starts) == (32, 0.25, 4, 10_000)
    assert (cfg.replay.kind, cfg.replay.capacity, cfg.env_wrappers) == ("uniform", 100_000, None)
    assert (cfg.stop.max_env_steps, cfg.stop.eval_every, cfg.stop.eval_episodes) == (100_000, 25_000, 5)
