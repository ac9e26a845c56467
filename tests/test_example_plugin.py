"""The plugin guide's minimal example is installed like a third party would and passes the kit.

It is installed into a temporary folder (not the shared environment), found
through its entry point, and its own conformance test module is run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "plugin_minimal"


@pytest.fixture(scope="module")
def installed_example(tmp_path_factory):
    target = tmp_path_factory.mktemp("example-plugin")
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
           "--target", str(target), str(EXAMPLE)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return target


def _env(target):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]))
    env.pop("PEARL_DISABLE_PLUGIN_AUTOLOAD", None)
    return env


def test_example_plugin_passes_conformance(installed_example):
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "tests")]
    out = subprocess.run(cmd, env=_env(installed_example), capture_output=True, text=True, timeout=900, cwd=EXAMPLE)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert re.search(r"\b\d+ passed\b", out.stdout) and " failed" not in out.stdout


def test_example_plugin_is_listed_by_cli(installed_example):
    cmd = [sys.executable, "-m", "pearl_core.cli", "plugins"]
    out = subprocess.run(cmd, env=dict(_env(installed_example), COLUMNS="250"), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "numpy-example" in out.stdout and "pearl-example-numpy" in out.stdout


def test_guide_shows_the_example_files_verbatim():
    """Every file the guide quotes (a code block whose first line is `# file: PATH`) matches the repo."""
    guide = (ROOT / "docs" / "writing-a-plugin.md").read_text()
    blocks = re.findall(r"```[a-z]*\n# file: (\S+)\n(.*?)```", guide, flags=re.S)
    assert len(blocks) >= 5, "the guide should quote the example's files"
    for path, body in blocks:
        assert (ROOT / path).read_text() == body, f"docs/writing-a-plugin.md is out of date for {path}"
