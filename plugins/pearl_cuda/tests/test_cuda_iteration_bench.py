"""scripts/iteration_bench.py (the GPU check's iteration step) run with --dry-run: the CPU at tiny sizes,
so the script that writes benchmarks/results/h200/iteration.json is known to work before a GPU lease.

Its figures here say nothing about a GPU; the test checks the report's shape and that every workload ran
the learner step's device path (the core's torch-tensor replay on the CPU) and finished with finite times.
"""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "iteration_bench.py"
KEYS = ("dqn_mlp256_b64_per", "sac_mlp256_b256_per", "dqn_nature_cnn_b32_per")


def test_dry_run_writes_the_report_with_every_workload_on_the_device_path(tmp_path):
    out_json, out_md = tmp_path / "iteration.json", tmp_path / "check.md"
    run = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--json", str(out_json), "--out", str(out_md),
                          "--e2e-env-steps", "400"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out_json.read_text())
    assert {"date", "commit", "gpu", "iteration_us", "host_syncs_per_iteration",
            "e2e_serial_dqn_cartpole_env_steps_per_s"} <= report.keys()
    assert report["dry_run"] is True and report["device"] == "cpu"
    assert set(report["iteration_us"]) == set(KEYS) == set(report["host_syncs_per_iteration"])
    assert all(math.isfinite(v) and v > 0 for v in report["iteration_us"].values())
    assert all(w["on_device_path"] for w in report["workloads"]), report["workloads"]
    assert report["e2e_serial_dqn_cartpole_env_steps_per_s"] > 0
    table = out_md.read_text()
    assert "DRY RUN" in table and all(k in table for k in KEYS)


def test_without_a_gpu_and_without_dry_run_it_says_so_and_exits_3():
    run = subprocess.run([sys.executable, str(SCRIPT), "--workloads", "dqn_mlp256_b64_per"], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 3, run.stdout + run.stderr
    assert "no usable GPU" in run.stdout
