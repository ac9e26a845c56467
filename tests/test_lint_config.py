"""The gate's lint and type checks can fail: `make test` runs `make lint` (ruff, mypy, configured in
pyproject.toml) first, and a planted unused import or type error makes each of them exit non-zero."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tool(name: str) -> list[str]:
    if shutil.which(name, path=str(Path(sys.executable).parent)) is None:
        pytest.skip(f"{name} is not installed in this environment (pip install 'pearl-core[test]')")
    return [sys.executable, "-m", name]


def test_make_test_runs_lint_first_and_lint_runs_ruff_and_mypy():
    makefile = (ROOT / "Makefile").read_text()
    assert "\ntest: lint\n" in makefile
    lint = makefile.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "-m ruff check ." in lint and "-m mypy" in lint


def test_ruff_fails_on_a_planted_unused_import_and_passes_without_it(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import os\n\n\ndef f() -> int:\n    return 1\n")
    cmd = [*tool("ruff"), "check", "--config", str(ROOT / "pyproject.toml"), str(planted)]
    found = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert found.returncode != 0 and "F401" in found.stdout
    planted.write_text("def f() -> int:\n    return 1\n")
    assert subprocess.run(cmd, capture_output=True, text=True, timeout=120).returncode == 0


def test_mypy_fails_on_a_planted_type_error_and_passes_without_it(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("def f() -> int:\n    return 'one'\n")
    cmd = [*tool("mypy"), "--config-file", str(ROOT / "pyproject.toml"), "--no-incremental", str(planted)]
    found = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert found.returncode != 0 and "return-value" in found.stdout
    planted.write_text("def f() -> int:\n    return 1\n")
    assert subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path).returncode == 0
