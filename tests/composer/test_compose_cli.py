"""``pearl compose`` and ``pearl plan`` write their outputs all or nothing (:mod:`pearl_core.composer.compose_cli`):
a bad destination is refused before planning, and a pre-existing program or PNG is never deleted.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import pearl_core.composer.compose_cli as compose_cli
import pearl_core.fileio as fileio

pytestmark = pytest.mark.usefixtures("no_leaks")

ROOT = Path(__file__).resolve().parents[2]
THIS_MACHINE = ROOT / "examples" / "hardware" / "this-machine.toml"


def snapshot(d) -> dict[str, bytes]:
    d = Path(d)
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _only(d, *names):
    assert sorted(os.listdir(d)) == sorted(names)


def _compose(*args):
    from pearl_core.cli import app

    return CliRunner().invoke(app, ["compose", "-H", str(THIS_MACHINE), "--no-profile", *args])


@pytest.mark.parametrize("bad", ["png-under-a-file", "png-missing-dir", "json-is-a-directory", "same-path"])
def test_compose_bad_destination_keeps_the_existing_program(tmp_path, monkeypatch, bad):
    prog = tmp_path / "rt.py"
    prog.write_text("# my program\n")
    (tmp_path / "afile").write_text("x")
    (tmp_path / "plan.json").mkdir()
    args = {"png-under-a-file": ["--png", str(tmp_path / "afile" / "grid.png")],
            "png-missing-dir": ["--png", str(tmp_path / "nope" / "grid.png")],
            "json-is-a-directory": ["--json", str(tmp_path / "plan.json")],
            "same-path": ["--json", str(prog)]}[bad]
    before = snapshot(tmp_path)
    res = _compose("-o", str(prog), *args)
    assert res.exit_code == 2 and "error:" in res.output, res.output
    assert snapshot(tmp_path) == before  # the program is still there, unchanged, and no .tmp is left
    assert sorted(os.listdir(tmp_path)) == ["afile", "plan.json", "rt.py"]


def test_compose_checks_destinations_before_planning(tmp_path, monkeypatch):
    monkeypatch.setattr(compose_cli, "composer_from_options", lambda o: pytest.fail("planned"))
    res = _compose("-o", str(tmp_path / "rt.py"), "--json", str(tmp_path))
    assert res.exit_code == 2 and "is a directory" in res.output
    _only(tmp_path)


def test_compose_failure_while_writing_changes_no_output(tmp_path, monkeypatch):
    prog, png, js = tmp_path / "rt.py", tmp_path / "grid.png", tmp_path / "plan.json"
    for p in (prog, png):
        p.write_bytes(b"old " + p.name.encode())
    real = os.replace

    def replace(src, dst):
        if str(dst).endswith("plan.json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(fileio.os, "replace", replace)
    res = _compose("-o", str(prog), "--png", str(png), "--json", str(js))
    assert res.exit_code == 2 and "No space left" in res.output, res.output
    assert prog.read_bytes() == b"old rt.py" and png.read_bytes() == b"old grid.png"
    _only(tmp_path, "rt.py", "grid.png")
    monkeypatch.setattr(fileio.os, "replace", real)
    res = _compose("-o", str(prog), "--png", str(png), "--json", str(js))
    assert res.exit_code == 0, res.output
    assert "RUN_CONFIG = RunConfig(" in prog.read_text()
    assert png.read_bytes()[:4] == b"\x89PNG" and js.read_text().startswith("{")
    _only(tmp_path, "rt.py", "grid.png", "plan.json")


def test_plan_outputs_are_all_or_nothing_and_keep_an_existing_png(tmp_path):
    """`pearl plan --png old.png --json <a directory>` used to write the PNG, fail on the JSON and delete it."""
    from typer.testing import CliRunner

    from pearl_core.cli import app

    png = tmp_path / "grid.png"
    png.write_bytes(b"the user's old grid")
    (tmp_path / "plan.json").mkdir()
    before = snapshot(tmp_path)
    res = CliRunner().invoke(app, ["plan", "-H", str(THIS_MACHINE), "--png", str(png),
                                   "--json", str(tmp_path / "plan.json")])
    assert res.exit_code == 2 and "error:" in res.output, res.output
    assert snapshot(tmp_path) == before and png.read_bytes() == b"the user's old grid"
    ok = CliRunner().invoke(app, ["plan", "-H", str(THIS_MACHINE), "--png", str(png),
                                  "--json", str(tmp_path / "new.json")])
    assert ok.exit_code == 0, ok.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (tmp_path / "new.json").exists()
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]
