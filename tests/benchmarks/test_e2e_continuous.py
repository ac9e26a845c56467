"""Smoke test: ``benchmarks/e2e_continuous.py --quick`` trains SAC and TD3 briefly and prints its tables.

Only PEARL contestants run (the serial runtime and setting 2 of the parallel one), so the
test needs the ``rl`` extra but not stable-baselines3 or SBX (``make test`` installs
``.[rl,test]`` only); without them the peers are skipped with a line in the report.
The helpers that turn a run's episodes and clock into the table's figures are checked
on made-up numbers.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "e2e_continuous.py"
HEADER = ("| contestant | seed | env steps | wall s | env steps/s | updates/s | window env steps/s | "
          "window updates/s | return @1k | return @1500 | threshold reached at (env steps) | wall-to-threshold s |")


def _run(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    out = tmp_path / "e2e_cont.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--seeds", "0", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc, out.read_text(encoding="utf-8")


@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
def test_quick_sac_and_td3_run_and_print_a_table_per_case(tmp_path):
    proc, written = _run(tmp_path, "--algos", "sac,td3", "--budget", "1500",
                         "--contestants", "pearl-serial-uniform,pearl-par2-per")
    text = proc.stdout
    for title in ("## SAC on Pendulum-v1", "## TD3 on Pendulum-v1"):
        section = text.split(title, 1)[1].split("\n## ", 1)[0]
        assert HEADER in section
        for name in ("pearl-serial-uniform", "pearl-par2-per"):
            assert f"| {name} | 0 | 1500 |" in section  # the run's row: the whole budget
            assert f"| {name} | 1 | 0/1 |" in section   # its summary row: one run, threshold not reached
        assert "vs SB3" not in section  # no peer ran: no ratio columns
    assert HEADER in written and "status: complete" in written
    assert "warm-up: SB3's off-policy algorithms" in written  # the notes on what PEARL cannot follow


def test_missing_peers_are_skipped_with_a_report_line(tmp_path):
    if importlib.util.find_spec("stable_baselines3") is not None or importlib.util.find_spec("sbx") is not None:
        pytest.skip("stable-baselines3 or sbx-rl is installed here; the skip path needs an environment without them")
    proc, written = _run(tmp_path, "--algos", "sac", "--contestants", "sb3,sbx")
    assert "skipped sb3: stable-baselines3 is not installed" in proc.stdout
    assert "skipped sbx: sbx-rl is not importable (ModuleNotFoundError" in proc.stdout
    assert "| sb3 |" not in proc.stdout and "| sbx |" not in proc.stdout  # no run, no row
    assert "skipped sbx" in written


def _load():
    spec = importlib.util.spec_from_file_location("e2e_continuous_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_marks_window_and_threshold_from_episodes():
    e2e = _load()
    case = e2e.make_case("td3", "Pendulum-v1", quick=False, budget=None, mark_every=None, window_offset=None)
    assert (case.budget, case.marks, case.window_start, case.threshold) == (20_000, (5_000, 10_000, 15_000, 20_000),
                                                                         11_000, -200.0)
    # 100 episodes of 200 steps, one a second; returns climb from -1000 by 10 an episode
    episodes = [(200 * (i + 1), float(i + 1), -1000.0 + 10 * i) for i in range(100)]
    out = e2e.measures(case, episodes, start=(11_000, 1_000, 55.0), end=(20_000, 10_000, 100.0), env_steps=20_000,
                       updates=10_000, wall=110.0)
    assert out["window"] == [11_000, 20_000]
    assert out["window_env_steps_per_s"] == pytest.approx(9_000 / 45) and out["window_updates_per_s"] == 200.0
    assert out["env_steps_per_s"] == pytest.approx(20_000 / 110)
    assert out["returns_at"]["5000"] == pytest.approx(-1000 + 10 * (5 + 24) / 2)  # episodes 5..24 (0-based)
    assert out["returns_at"]["20000"] == pytest.approx(-1000 + 10 * (80 + 99) / 2)
    # the mean of the last 20 first reaches -200 after episode k (0-based) with -1000 + 10 * (k - 9.5) >= -200
    assert (out["reached_at"], out["wall_to_threshold_s"]) == (200 * 91, 91.0)
    assert e2e.first_reach(episodes[:19], -10_000.0) is None  # never a full window of 20
    assert e2e.mean_last([], 1_000) is None


def test_summary_ratios_against_each_peer_that_ran():
    e2e = _load()
    case = e2e.make_case("sac", "Pendulum-v1", quick=True, budget=None, mark_every=None, window_offset=None)

    def row(name, sps, wsps, wall=None):
        return {"contestant": name, "seed": 0, "env_steps_per_s": sps, "updates_per_s": sps,
                "window_env_steps_per_s": wsps, "window_updates_per_s": wsps, "wall_to_threshold_s": wall,
                "reached_at": None if wall is None else 1_000, "returns_at": {"1000": -900.0, "2000": -300.0}}

    rows = [row("sb3", 100.0, 50.0, 40.0), row("sbx", 200.0, 100.0, 20.0), row("pearl-par2-per", 400.0, 140.0, 10.0)]
    lines = e2e.summary(case, rows).splitlines()
    assert "env steps/s vs SB3 (target >= 3x)" in lines[0] and "window env steps/s vs SBX (target >= 1.5x)" in lines[0]
    cells = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[10:16]] for ln in lines[2:]}
    assert cells["pearl-par2-per"] == ["4.00x (met)", "2.80x (not met)", "0.25", "2.00x (met)", "1.40x (not met)",
                                       "0.50"]
    assert cells["sb3"][:3] == ["-", "-", "-"]  # against itself
    assert "SBX" not in e2e.summary(case, rows[:1] + rows[2:]).splitlines()[0]


def test_every_contestant_gets_the_zoo_values():
    e2e = _load()
    for (algo, env_id), hp in e2e.ZOO.items():
        kw = e2e.pearl_trainer_kwargs(algo, hp)
        assert kw["actor_hidden"] == kw["critic_hidden"] == list(hp.net)
        assert (kw["actor_lr"], kw["critic_lr"], kw["gamma"], kw["tau"]) == (hp.lr, hp.lr, hp.gamma, hp.tau)
        assert kw.get("alpha_lr", hp.lr) == hp.lr and kw.get("noise_std") == hp.noise_std
        if algo == "sac":  # SB3's keyword arguments need no SB3 for SAC (TD3's action noise is an SB3 class)
            case = e2e.make_case(algo, env_id, quick=False, budget=None, mark_every=None, window_offset=None)
            peer = e2e.peer_kwargs(case, 0, n_actions=1)
            assert (peer["learning_rate"], peer["batch_size"], peer["buffer_size"], peer["learning_starts"],
                    peer["train_freq"], peer["gradient_steps"]) == (hp.lr, hp.batch, hp.buffer, hp.learning_starts,
                                                                  hp.train_freq, hp.gradient_steps)
            assert peer["policy_kwargs"] == {"net_arch": list(hp.net)}
