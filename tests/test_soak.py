"""The soak benchmark (``benchmarks/soak.py``) for 36 seconds: faults of several kinds, nothing lost.

It kills and stops actors, kills the learner and interrupts the host of real
parallel runs (settings 1 and 2, each segment resumed from the last checkpoint)
and checks every checkpoint, the replay contents, orphan processes and leaked
shared memory (three segments of ~10 s). Slow (about 45 s on 2 cores): deselect with ``-m 'not slow'``.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "soak.py"


def _row(report: str, measure: str) -> str:
    m = re.search(rf"^\| {re.escape(measure)}[^|]* \| (.+) \|$", report, re.M)
    assert m, f"no {measure!r} row in the report:\n{report}"
    return m.group(1)


@pytest.mark.slow
def test_a_short_soak_injects_faults_and_loses_nothing(tmp_path):
    out = tmp_path / "soak.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--minutes", "0.6", "--out", str(out),
                           "--work-dir", str(tmp_path / "work")],
                          capture_output=True, text=True, timeout=900)
    report = out.read_text(encoding="utf-8") if out.exists() else ""
    assert proc.returncode == 0, (report or proc.stdout[-4000:]) + proc.stderr[-4000:]
    assert report and report in proc.stdout
    injected = dict(re.findall(r"([a-z-]+) (\d+)", _row(report, "faults injected")))
    kinds = [k for k in ("actor-kill", "actor-stop", "learner-kill", "sigint", "sighup") if int(injected.get(k, 0)) > 0]
    assert len(kinds) >= 2, report
    assert _row(report, "experiences lost") == "**0**"
    assert _row(report, "progress lost") == "**0**"
    assert _row(report, "orphan processes") == "**0**"
    assert _row(report, "leaked shared-memory segments") == "**0**"
    assert _row(report, "checkpoints loaded OK / failed").endswith("/ **0**")
    produced = int(_row(report, "experiences produced"))
    assert produced > 0 and int(_row(report, "experiences stored")) == produced
    assert _row(report, "verdict") == "**PASS**"
