"""``benchmarks/fidelity_leads.py``: reads the sweep's own report format and counts right picks by lead."""

from __future__ import annotations

import importlib.util
import math
import pathlib
import sys
import types
from collections.abc import Iterator

import pytest

from pearl_core.composer.sweep import SweepPoint, SweepReport, SweepResult
from pearl_core.composer.validate import ValidationReport, ValidationRow
from pearl_core.runtime.config import Setting

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "fidelity_leads.py"


@pytest.fixture(scope="module")
def leads() -> Iterator[types.ModuleType]:
    spec = importlib.util.spec_from_file_location("fidelity_leads_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while the class is made
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def _result(batch, *rows):
    """A validated workload: rows are (setting, predicted s, measured s, chosen)."""
    vr = tuple(ValidationRow(f"setting {s}, learner 1 thread(s)", Setting(s), 1, 1, p, m, 100, c)
               for s, p, m, c in rows)
    return SweepResult(SweepPoint("CartPole-v1", batch, (64, 64), "uniform", 1, 1), ValidationReport(vr, 5.0))


def test_reads_a_sweep_report_and_buckets_the_picks_by_lead(leads, tmp_path, capsys):
    report = SweepReport((
        _result(32, (1, 1.00, 1.00, True), (2, 1.01, 0.90, False)),    # lead 1%, pick 11% behind: wrong
        _result(128, (1, 1.00, 1.02, True), (2, 1.05, 1.00, False)),   # lead 5%, within 3%: right
        _result(512, (1, 1.00, 1.00, True), (2, 1.50, 1.40, False)),   # lead 50%: right
        _result(64, (1, 1.02, 1.00, True), (2, 1.00, 1.10, False)),    # a tie rule's pick (lead -2%): right
        _result(256, (1, 1.00, math.nan, True), (2, 1.10, 1.00, False)),  # pick not measured: left out
    ), 5.0, 1, "test machine")
    path = tmp_path / "report.md"
    path.write_text(report.to_markdown())
    got = {wl.split()[1]: (lead, ok) for wl, lead, ok in leads.leads(leads.read_report(path))}
    assert set(got) == {"b32", "b128", "b512", "b64"}
    assert got["b32"][0] == pytest.approx(0.01, abs=1e-3) and got["b32"][1] is False
    assert got["b128"][0] == pytest.approx(0.05, abs=1e-3) and got["b128"][1] is True
    assert got["b64"][0] < 0 and got["b64"][1] is True
    assert leads.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "| < 0% (a tie rule's pick) | 1 | 1 | 100% |" in out
    assert "| 0% to 3% | 1 | 0 | 0% |" in out and "| 3% to 10% | 1 | 1 | 100% |" in out
    assert "| >= 20% | 1 | 1 | 100% |" in out and "| all | 4 | 3 | 75% |" in out


def test_a_file_without_a_report_table_is_refused_by_name(leads, tmp_path, capsys):
    path = tmp_path / "notes.md"
    path.write_text("# notes\n\nno table here\n")
    assert leads.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "notes.md: no candidate table" in err and "composer_fidelity.py" in err
