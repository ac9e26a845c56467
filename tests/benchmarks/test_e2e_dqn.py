"""Smoke test: ``benchmarks/e2e_dqn.py --quick`` trains a few thousand steps and prints its table.

Only the PEARL serial contestant runs, so the test needs the ``rl`` extra but not
stable-baselines3 (``make test`` installs ``.[rl,test,envs]``, not ``bench``).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "e2e_dqn.py"


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


def _load_e2e():
    import importlib.util

    spec = importlib.util.spec_from_file_location("e2e_dqn_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(name, sps, wall=None, seed=0):
    return {"contestant": name, "seed": seed, "solved_at": None if wall is None else 20_000,
            "wall_to_solved_s": wall, "env_steps": 20_000, "env_steps_per_s": sps, "updates_per_s": sps / 2,
            "samples_per_s": sps * 32}


def test_summary_adds_sbx_ratio_columns_only_when_sbx_ran():
    e2e = _load_e2e()
    rows = [_row("sb3-uniform", 500.0, 60.0), _row("sbx-uniform", 1000.0, 40.0),
            _row("pearl-serial-uniform", 3000.0, 10.0), _row("pearl-par2-per", 2000.0, None)]
    lines = e2e.summary(rows).splitlines()
    assert lines[0].endswith("| env steps/s vs SB3 (target >= 3x) | wall-to-solved vs SB3 (target <= 0.5) | "
                             "env steps/s vs SBX (target >= 3x) | wall-to-solved vs SBX (target <= 0.5) |")
    assert lines[1] == "|" + "---|" * 11
    cells = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[8:12]] for ln in lines[2:]}
    assert cells["pearl-serial-uniform"] == ["6.00x (met)", "0.17 (met)", "3.00x (met)", "0.25 (met)"]
    assert cells["sbx-uniform"] == ["2.00x (not met)", "0.67 (not met)", "-", "-"]
    assert cells["sb3-uniform"] == ["-", "-", "0.50x (not met)", "1.50 (not met)"]
    # never solved: no wall ratio against either baseline
    assert cells["pearl-par2-per"] == ["4.00x (met)", "-", "2.00x (not met)", "-"]

    without = e2e.summary([r for r in rows if r["contestant"] != "sbx-uniform"]).splitlines()
    assert "SBX" not in without[0] and without[1] == "|" + "---|" * 9
    assert without[2].split("|")[8:10] == [" - ", " - "]  # sb3 against itself


def test_ratio_cells_threshold_and_missing_baseline():
    e2e = _load_e2e()
    assert e2e.ratio_cells({"sps": 2999.0, "wall": 5.0}, {"sps": 1000.0, "wall": 10.0}) == \
        ("3.00x (not met)", "0.50 (met)")  # 2.999 rounds to 3.00 but is below the target
    assert e2e.ratio_cells({"sps": 3000.0, "wall": 5.1}, {"sps": 1000.0, "wall": 10.0}) == \
        ("3.00x (met)", "0.51 (not met)")
    assert e2e.ratio_cells({"sps": 3000.0, "wall": 5.0}, None) == ("-", "-")
    assert e2e.ratio_cells({"sps": 3000.0, "wall": 5.0}, {"sps": 1000.0, "wall": None}) == ("3.00x (met)", "-")


def test_sbx_contestant_is_skipped_with_a_report_line_when_sbx_is_missing(tmp_path):
    import importlib.util

    if importlib.util.find_spec("sbx") is not None:
        pytest.skip("sbx-rl is installed here; the skip path needs an environment without it")
    out = tmp_path / "e2e.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--seeds", "0", "--contestants", "sbx-uniform",
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "skipped sbx-uniform: sbx-rl is not importable (ModuleNotFoundError" in proc.stdout
    assert "| sbx-uniform |" not in proc.stdout  # no run, no row
    assert "skipped sbx-uniform" in out.read_text(encoding="utf-8")
