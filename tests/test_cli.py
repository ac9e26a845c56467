"""``pearl --version``: pearl-core's version and each installed plugin distribution's, without importing a plugin."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from pearl_core._version import __version__
from pearl_core.cli import app


def test_version_names_the_core_and_every_installed_plugin():
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert lines[0] == f"pearl-core {__version__}"
    names = {line.split()[0] for line in lines[1:]}
    assert {"pearl-cpu", "pearl-cuda", "pearl-fpga"} <= names, lines


def test_version_imports_no_plugin_and_the_commands_still_run():
    code = ("import sys; from typer.testing import CliRunner; from pearl_core.cli import app; "
            "r = CliRunner().invoke(app, ['-V']); assert r.exit_code == 0, r.output; "
            "bad = [m for m in ('pearl_cpu', 'pearl_cuda', 'pearl_fpga', 'cupy', 'dpctl') if m in sys.modules]; "
            "assert not bad, bad")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    res = CliRunner().invoke(app, ["plugins"])
    assert res.exit_code == 0 and "cpu" in res.output
