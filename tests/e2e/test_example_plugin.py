"""The plugin guide's example is installed like a third party would and passes its own tests.

It is copied out of the repository (so that no build output lands in the source
tree), installed with pip into a temporary folder (not the shared environment),
found through its entry point, and its tests are run from a neutral working
directory, so that they import the installed copy. Its tests run all three
conformance suites (sum tree, dqn_mlp kernel, transport) and a parallel run with
the learner on its device. The guide must quote the example's files verbatim.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "plugin_minimal"
GUIDE = ROOT / "docs" / "writing-a-plugin.md"


@pytest.fixture(scope="module")
def installed_example(tmp_path_factory):
    work = tmp_path_factory.mktemp("example-plugin")
    source, target = work / "source", work / "site"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests"))
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
           "--target", str(target), str(source)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return target


def _env(target):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]))
    env.pop("PEARL_DISABLE_PLUGIN_AUTOLOAD", None)
    return env


@pytest.mark.slow  # ~12-20 s on 2 cores: `make test` runs it, `make test-fast` does not
def test_example_plugin_passes_its_tests(installed_example):
    report = installed_example.parent / "example-tests.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
           str(EXAMPLE / "tests")]
    out = subprocess.run(cmd, env=_env(installed_example), capture_output=True, text=True, timeout=900,
                         cwd=installed_example.parent)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    results: dict[str, list[str]] = {}
    device_face: list[str] = []  # the kit's device-face checks: a host-only plugin skips them, with the reason
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        if case.get("name", "").startswith("test_device_face_"):
            device_face.append(outcome)
            continue
        results.setdefault(case.get("classname", "").rsplit(".", 1)[-1], []).append(outcome)
    for suite in ("TestSumTree", "TestLearnerKernel", "TestTransport", "test_backend"):
        assert results.get(suite) and set(results[suite]) == {"passed"}, f"{suite}: {results.get(suite)}"
    assert device_face and set(device_face) == {"skipped"}, f"device-face checks of a host-only plugin: {device_face}"


def test_the_installed_copy_is_the_one_imported(installed_example):
    code = "import pearl_example_numpy, pearl_core; print(pearl_example_numpy.__file__); " \
           "print(type(pearl_core.get_backend('numpy-example')).__module__)"
    out = subprocess.run([sys.executable, "-c", code], env=_env(installed_example), capture_output=True, text=True,
                         timeout=120, cwd=installed_example.parent)
    assert out.returncode == 0, out.stderr
    path, module = out.stdout.split()
    assert Path(path).is_relative_to(installed_example) and module == "pearl_example_numpy.backend", out.stdout


def test_example_plugin_is_listed_by_cli(installed_example):
    cmd = [sys.executable, "-m", "pearl_core.cli", "plugins"]
    out = subprocess.run(cmd, env=dict(_env(installed_example), COLUMNS="250"), capture_output=True, text=True,
                         timeout=120, cwd=installed_example.parent)
    assert out.returncode == 0, out.stderr
    assert "numpy-example" in out.stdout and "pearl-example-numpy" in out.stdout


def test_guide_shows_the_example_files_verbatim():
    """Every file the guide quotes (a code block whose first line is `# file: PATH`) matches the repo,
    and every file of the example's package and tests is quoted."""
    guide = GUIDE.read_text()
    blocks = re.findall(r"```[a-z]*\n# file: (\S+)\n(.*?)```", guide, flags=re.S)
    quoted = {path for path, _ in blocks}
    for path, body in blocks:
        assert (ROOT / path).read_text() == body, f"docs/writing-a-plugin.md is out of date for {path}"
    files = {str(p.relative_to(ROOT)) for p in EXAMPLE.rglob("*") if p.suffix in (".py", ".toml")
             and not {"build", "__pycache__"} & set(p.parts) and ".egg-info" not in str(p)}
    missing = sorted(files - quoted - {"examples/plugin_minimal/tests/test_backend.py"})
    assert not missing, f"docs/writing-a-plugin.md does not show {missing}"
