"""Safe run files (issue 43, the run-file items).

1. A FIFO, directory or device where ``run.lock`` belongs is refused at once (never a hang) with a
   ``SpecError`` naming the path, what is there and the fix.
2. No run file is written through a symlink: a linked ``run.lock`` is refused and its target untouched;
   an atomic write replaces a linked destination as a link (the link's target is untouched).
3. Files PEARL creates (atomic writes, the lock, the logs) respect the process umask.
4. OS errors (``ENOSPC``) while writing the lock, a checkpoint or log rows are ``PearlError`` errors naming
   the path, the errno and the fix.
5. Temporary files of atomic writes killed by ``SIGKILL`` are removed when the next run takes the lock.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

import pearl_core.fileio as fileio
import pearl_core.runtime.runlock as runlock
from pearl_core.errors import PearlError, SpecError
from pearl_core.fileio import atomic_write, atomic_write_all
from pearl_core.runtime.control import RunLogger
from pearl_core.runtime.runlock import LOCK_NAME, RunLock, check_free, read_owner

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX file semantics")


def _in_subprocess(code: str, timeout: float = 20.0) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with a deadline (a hang is a failure, not a stuck suite)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout)


# ================================================================ 1. FIFO / directory / device at run.lock
def test_fifo_at_run_lock_is_refused_at_once_naming_it(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    os.mkfifo(d / LOCK_NAME)
    # In a child with a deadline: before the fix, check_free's open blocked forever on the FIFO.
    r = _in_subprocess(f"""
        from pearl_core.errors import SpecError
        from pearl_core.runtime.runlock import RunLock, check_free, read_owner
        assert read_owner({str(d)!r}) is None
        for call in (check_free, RunLock.acquire):
            try:
                call({str(d)!r})
            except SpecError as exc:
                print("REFUSED", exc)
            else:
                print("ACCEPTED")
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("REFUSED") for line in lines), r.stdout
    for line in lines:
        assert str(d / LOCK_NAME) in line and "FIFO" in line and "Fix:" in line
    assert stat.S_ISFIFO(os.lstat(d / LOCK_NAME).st_mode)  # left as it was


@pytest.mark.parametrize("kind", ["directory", "device"])
def test_directory_or_device_at_run_lock_is_refused_naming_it(tmp_path, kind, monkeypatch):
    d = tmp_path / "run"
    d.mkdir()
    if kind == "directory":
        (d / LOCK_NAME).mkdir()
        found = "a directory"
    else:  # no mknod without root: a symlink can't stand in (refused as a link), so fake lstat's answer
        (d / LOCK_NAME).write_text("")
        real = os.lstat

        def lstat(p, *a, **k):
            st = real(p, *a, **k)
            if str(p).endswith(LOCK_NAME):
                return os.stat_result((stat.S_IFCHR | 0o666,) + tuple(st)[1:])
            return st

        monkeypatch.setattr(runlock.os, "lstat", lstat)
        found = "a character device"
    for call in (check_free, RunLock.acquire):
        with pytest.raises(SpecError) as info:
            call(d)
        msg = str(info.value)
        assert str(d / LOCK_NAME) in msg and found in msg and "Fix:" in msg


# ================================================================ 2. symlinks are never followed
def test_symlinked_run_lock_is_refused_and_its_target_untouched(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    (d / LOCK_NAME).symlink_to(target)
    for call in (check_free, RunLock.acquire):
        with pytest.raises(SpecError) as info:
            call(d)
        msg = str(info.value)
        assert str(d / LOCK_NAME) in msg and "symbolic link" in msg and str(target) in msg and "Fix:" in msg
    assert target.read_text() == "keep me\n"
    # A dangling link is not created through either.
    (d / LOCK_NAME).unlink()
    (d / LOCK_NAME).symlink_to(tmp_path / "new_file")
    with pytest.raises(SpecError, match="symbolic link"):
        RunLock.acquire(d)
    assert not (tmp_path / "new_file").exists()


def test_atomic_write_replaces_a_linked_destination_as_a_link(tmp_path, caplog):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    link = tmp_path / "config.json"
    link.symlink_to(target)
    with caplog.at_level(logging.WARNING, logger="pearl_core.fileio"):
        atomic_write(link, "new")
    assert not link.is_symlink() and link.read_text() == "new"
    assert target.read_text() == "keep me\n"
    assert any("config.json" in r.getMessage() and "symbolic link" in r.getMessage() for r in caplog.records)
    # atomic_write_all too: the link is replaced, never followed.
    link2 = tmp_path / "plan.json"
    link2.symlink_to(target)
    atomic_write_all([(link2, "p"), (tmp_path / "other.txt", "o")])
    assert not link2.is_symlink() and link2.read_text() == "p" and target.read_text() == "keep me\n"


def test_log_files_are_never_opened_through_a_link(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    (tmp_path / "episodes.csv").symlink_to(target)
    with pytest.raises(PearlError, match="episodes.csv"):
        fileio.open_append(tmp_path / "episodes.csv")
    assert target.read_text() == "keep me\n"


# ================================================================ 3. modes respect the umask
@pytest.mark.parametrize("mask", [0o077, 0o022, 0o002])
def test_created_files_respect_the_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        d = tmp_path / "run"
        with RunLock.acquire(d) as lock:
            lock_mode = stat.S_IMODE(os.stat(lock.path).st_mode)
            logger = RunLogger(d, tensorboard=False)
            logger.close()
        atomic_write(d / "checkpoint.pt", b"x")
        atomic_write_all([(d / "plan.json", "{}")])
        atomic_write(d / "exec.sh", "#!/bin/sh\n", mode=0o755)
    finally:
        os.umask(old)
    want = 0o666 & ~mask
    assert lock_mode == want
    for name in ("checkpoint.pt", "plan.json", "episodes.csv", "evals.csv", "metrics.csv"):
        assert stat.S_IMODE(os.stat(d / name).st_mode) == want, name
    assert stat.S_IMODE(os.stat(d / "exec.sh").st_mode) == 0o755 & ~mask


def test_current_umask_reads_without_changing_it():
    old = os.umask(0o027)
    try:
        assert fileio.current_umask() == 0o027
        assert os.umask(0o027) == 0o027
    finally:
        os.umask(old)


# ================================================================ 4. ENOSPC is a PearlError with path, errno, fix
def _enospc(*a, **k):
    raise OSError(errno.ENOSPC, "No space left on device")


def _assert_names(exc: BaseException, path) -> None:
    msg = str(exc)
    assert isinstance(exc, PearlError) and isinstance(exc, OSError) and exc.errno == errno.ENOSPC
    assert str(path) in msg and "ENOSPC" in msg and "free space" in msg and "log_dir" in msg, msg


@pytest.mark.parametrize("call", ["pwrite", "fsync", "ftruncate"])
def test_full_disk_while_writing_the_lock_is_a_spec_error(tmp_path, monkeypatch, call):
    monkeypatch.setattr(runlock.os, call, _enospc)
    with pytest.raises(SpecError) as info:
        RunLock.acquire(tmp_path / "run")
    monkeypatch.undo()
    _assert_names(info.value, tmp_path / "run" / LOCK_NAME)
    assert not (tmp_path / "run" / LOCK_NAME).exists()  # no half-written lock left
    RunLock.acquire(tmp_path / "run").release()  # and the directory is usable once there is room


def test_full_disk_while_creating_the_lock_is_a_spec_error(tmp_path, monkeypatch):
    real = os.open

    def full(path, flags, *a, **k):
        if str(path).endswith(LOCK_NAME) and flags & os.O_CREAT:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, flags, *a, **k)

    (tmp_path / "run").mkdir()
    monkeypatch.setattr(runlock.os, "open", full)
    with pytest.raises(SpecError) as info:
        RunLock.acquire(tmp_path / "run")
    _assert_names(info.value, tmp_path / "run" / LOCK_NAME)


@pytest.mark.parametrize("fault", ["data", "fsync", "replace"])
def test_full_disk_in_an_atomic_write_is_a_pearl_error(tmp_path, monkeypatch, fault):
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"old")
    def half(fh):
        fh.write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    data: object = half if fault == "data" else b"new"
    if fault != "data":
        monkeypatch.setattr(fileio.os, fault, _enospc)
    with pytest.raises(PearlError) as info:
        atomic_write(path, data)
    monkeypatch.undo()
    _assert_names(info.value, path)
    assert "as it was" in str(info.value)
    assert path.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["checkpoint.pt"]
    with pytest.raises(PearlError):
        monkeypatch.setattr(fileio.os, "replace", _enospc)
        atomic_write_all([(path, b"x"), (tmp_path / "b", b"y")])
    monkeypatch.undo()
    assert path.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["checkpoint.pt"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_disk_while_writing_log_rows_is_a_pearl_error(tmp_path, monkeypatch):
    logger = RunLogger(tmp_path, tensorboard=False)
    logger.episode(10, 1.0, 0, 5.0, 10)
    logger.flush()
    full = os.open("/dev/full", os.O_WRONLY)  # a device whose every write fails with ENOSPC, as a full disk's
    for fh in logger._files.values():
        os.dup2(full, fh.fileno())
    os.close(full)
    logger.episode(20, 2.0, 1, 6.0, 10)
    with pytest.raises(PearlError) as info:
        logger.flush()
    _assert_names(info.value, tmp_path / "episodes.csv")
    with pytest.raises(PearlError, match="evals.csv"):
        logger.evaluation(30, 3.0, [1.0, 2.0])  # flushes at once
    files = list(logger._files.values())
    with pytest.raises(PearlError, match="ENOSPC"):
        logger.close()  # the rows still buffered cannot be written either ...
    assert all(fh.closed for fh in files) and not logger._files  # ... and every log is closed anyway
    monkeypatch.undo()
    logger = RunLogger(tmp_path / "b", tensorboard=False)
    monkeypatch.setattr(fileio.os, "fsync", _enospc)
    with pytest.raises(PearlError, match="ENOSPC"):
        logger.flush(sync=True)
    monkeypatch.undo()
    logger.close()


def test_full_disk_while_checkpointing_is_a_pearl_error_naming_the_errno(tmp_path, monkeypatch):
    import torch

    from pearl_core.runtime.checkpoint import CheckpointWriteError, save_checkpoint
    from pearl_core.runtime.config import RunConfig, RuntimePlan, StopCriteria
    from pearl_core.runtime.control import RunState, StopMonitor

    cfg = RunConfig(env_id="CartPole-v1", trainer="runtime_support:LinearQ", log_dir=str(tmp_path),
                    stop=StopCriteria(max_env_steps=100))
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"previous")

    class Weights:
        def state_dict(self):
            return {"w": torch.zeros(3)}

    monkeypatch.setattr(fileio.os, "fsync", _enospc)
    with pytest.raises(CheckpointWriteError) as info:
        save_checkpoint(path, trainer=Weights(), state=RunState(), monitor=StopMonitor(cfg.stop), config=cfg,
                        plan=RuntimePlan(setting=1, n_actors=1))
    monkeypatch.undo()
    _assert_names(info.value, path)
    assert path.read_bytes() == b"previous" and sorted(os.listdir(tmp_path)) == ["checkpoint.pt"]


# ================================================================ 5. stale temp files of killed writes
def test_temp_file_of_a_write_killed_by_sigkill_is_removed_at_the_next_start(tmp_path, caplog):
    d = tmp_path / "run"
    d.mkdir()
    (d / "checkpoint.pt").write_bytes(b"previous")
    ready = d / "ready"
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import pathlib, time
        from pearl_core.fileio import atomic_write
        def slow(fh):
            fh.write(b"half a checkpoint")
            fh.flush()
            pathlib.Path({str(ready)!r}).write_text("")
            time.sleep(60)
        atomic_write({str(d / "checkpoint.pt")!r}, slow)
    """)])
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert child.poll() is None and time.monotonic() < deadline, "writer did not start"
            time.sleep(0.02)
        ready.unlink()
        temps = [n for n in os.listdir(d) if n.endswith(".tmp")]
        assert len(temps) == 1 and temps[0].startswith(".checkpoint.pt.")
        # While its writer lives, a new run leaves the temp file alone (it is held).
        past = time.time() - 10
        os.utime(d / temps[0], (past, past))
        RunLock.acquire(d).release()
        assert (d / temps[0]).exists()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    legacy = d / ".plan.json.ab_cd123.tmp"  # tempfile.mkstemp's naming, from before
    legacy.write_text("old")
    os.utime(legacy, (past, past))
    fresh = d / ".config.json.99999999-deadbeef.tmp"  # written after the run started: kept
    fresh.write_text("")
    os.utime(fresh, (time.time() + 60, time.time() + 60))
    mine = d / "notes.tmp"  # not an atomic write's name: kept
    mine.write_text("")
    os.utime(mine, (past, past))
    with caplog.at_level(logging.WARNING, logger="pearl_core.runtime"):
        lock = RunLock.acquire(d)
    lock.release()
    assert sorted(os.listdir(d)) == sorted(["checkpoint.pt", fresh.name, "notes.tmp"])
    assert (d / "checkpoint.pt").read_bytes() == b"previous"
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert temps[0] in logged and legacy.name in logged and "removed" in logged


def test_stale_temp_cleanup_never_follows_links(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    link = d / ".checkpoint.pt.123-abcdef01.tmp"
    link.symlink_to(outside)
    os.utime(link, (1, 1), follow_symlinks=False)
    assert fileio.remove_stale_temps(d, before=time.time()) == []
    assert link.is_symlink() and outside.read_text() == "keep"


def test_read_owner_of_a_regular_lock_still_works(tmp_path):
    with RunLock.acquire(tmp_path / "d"):
        assert read_owner(tmp_path / "d")["pid"] == os.getpid()
