"""Atomic outputs (:mod:`pearl_core.fileio`): ``atomic_write`` / ``atomic_write_all`` leave no temporary file
and change nothing on failure.
"""

from __future__ import annotations

import errno
import os

import pytest

import pearl_core.fileio as fileio
from pearl_core.errors import InvalidValueError
from pearl_core.fileio import atomic_write, atomic_write_all

pytestmark = pytest.mark.usefixtures("no_leaks")


# ================================================================ atomic outputs
def _only(d, *names):
    assert sorted(os.listdir(d)) == sorted(names)


@pytest.mark.parametrize("fault", ["callable", "interrupt", "fsync", "chmod", "replace"])
def test_atomic_write_failure_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch, fault):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")
    data: object = b"new"
    if fault == "callable":
        def data(fh):
            fh.write(b"half")
            raise ValueError("render failed")
    elif fault == "interrupt":
        def data(fh):
            fh.write(b"half")
            raise KeyboardInterrupt
    else:
        real = getattr(os, fault)

        def boom(*a, **k):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(fileio.os, fault, boom)
    with pytest.raises((ValueError, KeyboardInterrupt, OSError)):
        atomic_write(path, data)
    if fault not in ("callable", "interrupt"):
        monkeypatch.setattr(fileio.os, fault, real)
    assert path.read_bytes() == b"old"
    _only(tmp_path, "out.bin")


def test_atomic_write_make_parents_removes_the_directories_it_made_on_failure(tmp_path):
    def data(fh):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError):
        atomic_write(tmp_path / "a" / "b" / "f.txt", data, make_parents=True)
    _only(tmp_path)


def test_atomic_write_all_is_all_or_nothing(tmp_path, monkeypatch):
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    old.write_text("before")

    def bad(fh):
        raise ValueError("render failed")

    with pytest.raises(ValueError):
        atomic_write_all([(old, "after"), (new, bad)])
    assert old.read_text() == "before"
    _only(tmp_path, "old.txt")
    with pytest.raises(InvalidValueError, match="twice"):
        atomic_write_all([(old, "a"), (tmp_path / "." / "old.txt", "b")])
    with pytest.raises(InvalidValueError, match="is a directory"):
        atomic_write_all([(old, "a"), (tmp_path, "b")])
    assert old.read_text() == "before"
    # A failure while moving files into place puts back the ones already moved.
    real = os.replace

    def replace(src, dst):
        if str(dst).endswith("new.txt"):
            raise OSError(errno.EIO, "I/O error")
        return real(src, dst)

    monkeypatch.setattr(fileio.os, "replace", replace)
    with pytest.raises(OSError, match="I/O error"):
        atomic_write_all([(old, "after"), (new, "x")])
    monkeypatch.setattr(fileio.os, "replace", real)
    assert old.read_text() == "before"
    _only(tmp_path, "old.txt")
    assert atomic_write_all([(old, "after"), (new, b"x")]) == [old, new]
    assert (old.read_text(), new.read_text()) == ("after", "x")
    _only(tmp_path, "old.txt", "new.txt")
