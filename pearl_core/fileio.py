"""Atomic file writes: the one way PEARL replaces a file.

Every output file (checkpoints, plans, generated programs, profile caches,
plots, logs' side files) is written to a temporary file in the destination's
directory, flushed and fsync'ed, then moved over the destination with
``os.replace`` (and the directory fsync'ed, where the platform allows). Either
the whole new file is there afterwards, or (on any error, interrupt included)
the old file is untouched and the temporary file is gone: an existing file is
never removed before its replacement is complete.

* :func:`atomic_write` — one file.
* :func:`atomic_write_all` — several files, all or nothing: every destination is
  checked before any is written, every new file is complete (under a temporary
  name) before any destination is replaced, and a failure while moving them into
  place puts back the files already replaced.
* :func:`check_writable` — the destination checks alone (to refuse bad paths
  before doing expensive work).
* :func:`open_append` — a log file opened for appending rows (never through a
  symlink), whose OS errors are :class:`FileWriteError` errors.
* :func:`remove_stale_temps` — remove the temporary files of writes that were
  killed (``SIGKILL``, power loss) before they could clean up; a run calls it
  when it takes its ``log_dir``'s lock.

Safe creation. A temporary file is created with ``O_EXCL | O_NOFOLLOW`` in the
destination's directory, named ``.<name>.<pid>-<random>.tmp``, private (0600)
and ``flock``-ed while it is written, then given its final mode: ``mode`` (0666
by default) less the process umask, as ``open()`` would give it, so ``umask 077``
means files only their owner can read. A destination that is a symbolic link is
*replaced as a link*: ``os.replace`` renames over the link itself, so the new
file takes the link's place and the file the link pointed to is never opened or
changed (a logged warning names both). Nothing PEARL writes follows a link into
another file. A link to a directory is refused like a directory.

OS errors (a full disk, a used-up quota, a read-only file system) while writing
are raised as :class:`FileWriteError` (a :class:`~pearl_core.errors.SpecError`
and an :class:`OSError` with the original ``errno``), naming the file, the
errno and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import re
import secrets
import threading
from pathlib import Path
from typing import BinaryIO, Callable, Sequence, Union

from pearl_core.errors import InvalidValueError, SpecError

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["Data", "FileWriteError", "LogFile", "atomic_write", "atomic_write_all", "check_writable", "current_umask",
           "open_append", "remove_stale_temps", "write_error"]

log = logging.getLogger("pearl_core.fileio")

#: Flags for creating a file PEARL owns: never through a symlink, never inherited by child processes.
SAFE_FLAGS = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
#: Temporary files of atomic writes: ``.<name>.<pid>-<8 hex>.tmp``, and ``.<name>.<8 chars>.tmp`` as
#: ``tempfile.mkstemp`` named them before (no pid).
_TEMP_RE = re.compile(r"^\..+\.(?:(?P<pid>\d+)-)?[a-z0-9_]{8}\.tmp$")
_UMASK_LOCK = threading.Lock()


class FileWriteError(SpecError, OSError):
    """The operating system failed a write of PEARL's (disk full, quota, read-only file system, permissions).

    The message names the file, the errno (``ENOSPC``, ...), what was kept and the
    fix. Also an :class:`OSError` whose ``errno`` is the original one, so code
    that catches write errors still does.

    Attributes:
        path: the file being written.
    """

    path: str = ""


_WHY = {errno.ENOSPC: "no space left on the disk", errno.EDQUOT: "the disk quota is used up",
        errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
        errno.EPERM: "operation not permitted", errno.EIO: "an I/O error of the disk", errno.EFBIG: "file too large"}


def write_error(path: str | os.PathLike[str], exc: OSError, what: str = "file", *,
                kept: str = "Nothing was changed: the file there is as it was.") -> FileWriteError:
    """The :class:`FileWriteError` for ``exc``, raised while writing ``what`` at ``path``.

    Args:
        kept: what is still sound after the failure (one sentence).
    """
    code = exc.errno if isinstance(exc.errno, int) else None
    name = errno.errorcode.get(code, f"errno {code}") if code is not None else "an OS error"
    where = str(Path(path).parent)
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        fix = (f"free space on the disk holding {where!r} (or raise the quota), or give the run another log_dir "
               "(RunConfig(log_dir=...), --log-dir) on a disk with room")
    elif code in (errno.EROFS, errno.EACCES, errno.EPERM):
        fix = f"make {where!r} writable for this user, or choose another log_dir (RunConfig(log_dir=...), --log-dir)"
    else:
        fix = f"check the disk holding {where!r} (its system log), or choose another log_dir or path"
    err = FileWriteError(f"could not write {what} {str(path)!r}: {name} ({_WHY.get(code, 'OS error')}; "
                         f"{type(exc).__name__}: {exc}). {kept} Fix: {fix}.")
    err.errno, err.path = code, str(path)
    return err


def current_umask() -> int:
    """The process's umask, read without changing it where the platform allows (Linux ``/proc``)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:  # elsewhere: set a strict one for a moment (never a looser one), then put it back
        old = os.umask(0o077)
        os.umask(old)
    return old

#: What can be written: bytes, text (UTF-8), or a callable that writes into a binary file object.
Data = Union[bytes, bytearray, memoryview, str, Callable[[BinaryIO], None]]


def check_writable(path: str | os.PathLike[str], *, make_parents: bool = False) -> Path:
    """Raise :class:`InvalidValueError` unless a file can be created or replaced at ``path``.

    Checks (changing nothing): ``path`` is not a directory; its directory exists
    and is a directory (with ``make_parents``: its nearest existing ancestor is a
    directory), and this process may create files in it.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    out = Path(path)
    if out.is_dir():
        raise InvalidValueError(f"cannot write {str(out)!r}: it is a directory; expected a file path. "
                                "Fix: name a file inside it instead.")
    parent = out.parent
    if make_parents:
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
    if not parent.exists():
        raise InvalidValueError(f"cannot write {str(out)!r}: directory {str(parent)!r} does not exist. "
                                "Fix: create it first or choose another path.")
    if not parent.is_dir():
        raise InvalidValueError(f"cannot write {str(out)!r}: {str(parent)!r} is a file, not a directory; "
                                "expected a directory to hold the file. Fix: choose another path.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InvalidValueError(f"cannot write {str(out)!r}: no permission to create files in directory "
                                f"{str(parent)!r}. Fix: choose a writable directory or change its permissions.")
    return out


def _make_parents(parent: Path) -> list[Path]:
    """Create ``parent`` and its missing ancestors; returns those created, outermost first."""
    missing = []
    p = parent
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    created = []
    try:
        for d in reversed(missing):
            d.mkdir()
            created.append(d)
    except BaseException:
        _remove_dirs(created)
        raise
    return created


def _remove_dirs(created: list[Path]) -> None:
    for d in reversed(created):
        with contextlib.suppress(OSError):
            d.rmdir()  # only if still empty


def _create_temp(out: Path) -> tuple[int, str]:
    """Create a new private temporary file next to ``out`` (``O_EXCL | O_NOFOLLOW``, 0600); ``(fd, path)``."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | SAFE_FLAGS
    for _ in range(100):
        name = str(out.parent / f".{out.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(name, flags, 0o600)
        except FileExistsError:
            continue
        if fcntl is not None:  # held while it is written: remove_stale_temps leaves it alone
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd, name
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(out.parent))


def _write_temp(out: Path, data: Data, mode: int | None) -> str:
    """Write ``data`` to a new temporary file next to ``out`` (flushed, fsync'ed); returns its path.

    Its mode is ``mode`` (default 0666) less the process umask. On any failure the
    temporary file is removed before the error propagates.
    """
    tmp = None
    try:
        fd, tmp = _create_temp(out)
        try:
            os.chmod(fd, (0o666 if mode is None else mode) & ~current_umask() & 0o7777)
            fh = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            raise
        with fh:
            if callable(data):
                data(fh)
            else:
                fh.write(data.encode("utf-8") if isinstance(data, str) else bytes(data))
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    return tmp


def _note_link(out: Path) -> None:
    """Log that a symlink at ``out`` is about to be replaced by a file (its target is left alone)."""
    if os.path.islink(out):
        with contextlib.suppress(OSError):
            log.warning("%s is a symbolic link (to %r): it is replaced by the new file; the file it pointed to is "
                        "not changed (PEARL never writes through a link).", out, os.readlink(out))


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (best effort: not every platform can open a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike[str], data: Data, *, mode: int | None = None,
                 make_parents: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically.

    Args:
        path: the destination file.
        data: bytes, text (written as UTF-8 with ``\\n`` line ends), or a
            callable that writes into the binary file object it is given
            (e.g. ``lambda fh: torch.save(obj, fh)``).
        mode: permission bits of the new file, less the process umask
            (default 0666 less the umask, as ``open()`` gives).
        make_parents: create missing parent directories first (otherwise a
            missing directory is an error); the ones created are removed again
            if the write fails.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        InvalidValueError: the parent directory does not exist (and
            ``make_parents`` is off), or ``path`` is a directory.
        FileWriteError: the write itself failed in the OS (disk full,
            permissions; also an ``OSError``); nothing was changed and no
            temporary file is left.
    """
    out = check_writable(path, make_parents=make_parents)
    created = _make_parents(out.parent) if make_parents else []
    try:
        tmp = _write_temp(out, data, mode)
        try:
            _note_link(out)
            os.replace(tmp, out)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except BaseException as exc:
        _remove_dirs(created)
        if isinstance(exc, OSError) and not isinstance(exc, FileWriteError):
            raise write_error(out, exc) from exc
        raise
    _fsync_dir(out.parent)
    return out


def atomic_write_all(items: Sequence[tuple[str | os.PathLike[str], Data]], *,
                     mode: int | None = None) -> list[Path]:
    """Write several files, all or nothing.

    1. Every destination is checked (:func:`check_writable`; no path named twice)
       before anything is written.
    2. Every new file is written completely under a temporary name in its
       destination's directory.
    3. Only then are they moved into place, one ``os.replace`` each. An existing
       destination is first hard-linked to a backup name, so that if a later move
       fails the files already replaced are put back (a destination that did not
       exist is removed again). On a file system without hard links the moves are
       still atomic one by one, but a failure in the middle of them cannot be
       undone.

    On any failure, interrupt included, no temporary or backup file is left and
    (but for the case above) every destination is as it was.

    Args:
        items: ``(path, data)`` pairs; ``data`` as in :func:`atomic_write`.
        mode: permission bits of the new files, less the umask (as in :func:`atomic_write`).

    Returns:
        The paths written, in order.

    Raises:
        InvalidValueError: a destination cannot be written, or one is named twice.
        FileWriteError: a write failed in the OS (also an ``OSError``); nothing was changed.
    """
    paths = [check_writable(p) for p, _ in items]
    seen: dict[str, Path] = {}
    for p in paths:
        key = os.path.realpath(p)
        if key in seen:
            raise InvalidValueError(f"cannot write {str(p)!r} twice: it is also named as {str(seen[key])!r}; "
                                    "expected a different file for each output. Fix: give each output its own path.")
        seen[key] = p
    temps: list[str | None] = []
    backups: list[str | None] = []
    done = 0
    current = paths[0] if paths else None
    try:
        for p, (_, data) in zip(paths, items):
            current = p
            temps.append(_write_temp(p, data, mode))
        for p in paths:
            current = p
            backups.append(_backup(p))
        for i, p in enumerate(paths):
            current = p
            _note_link(p)
            os.replace(temps[i], p)
            temps[i] = None
            done = i + 1
    except BaseException as exc:
        for i in reversed(range(done)):  # put back what was replaced
            with contextlib.suppress(OSError):
                if i < len(backups) and backups[i] is not None:
                    os.replace(backups[i], paths[i])
                    backups[i] = None
                else:
                    os.unlink(paths[i])
        if isinstance(exc, OSError) and not isinstance(exc, FileWriteError):
            raise write_error(current, exc, kept="Nothing was changed: every file there is as it was.") from exc
        raise
    finally:
        for leftover in (*temps, *backups):
            if leftover is not None:
                with contextlib.suppress(OSError):
                    os.unlink(leftover)
    for d in {p.parent for p in paths}:
        _fsync_dir(d)
    return paths


def _backup(path: Path) -> str | None:
    """A hard link to an existing ``path`` under a fresh hidden name (``None``: nothing there, or no links)."""
    if not (os.path.islink(path) or path.is_file()):
        return None  # (a link is backed up as a link: os.link does not follow it)
    for _ in range(100):
        name = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.bak")
        try:
            os.link(path, name)
            return name
        except FileExistsError:
            continue
        except OSError:
            return None  # no hard links here: the moves stay atomic one by one
    return None


class _LogFileIO(io.FileIO):
    """A raw file whose OS errors while writing are :class:`FileWriteError` errors naming it."""

    def write(self, b):  # type: ignore[override]
        try:
            return super().write(b)
        except FileWriteError:
            raise
        except OSError as exc:
            raise write_error(self.name, exc, "log", kept="The rows written before are kept; this row may be cut "
                              "short (a resumed run reports it).") from exc


class LogFile(io.TextIOWrapper):
    """A text log opened by :func:`open_append`; :meth:`sync` flushes it to the disk."""

    def sync(self) -> None:
        self.flush()
        try:
            os.fsync(self.fileno())
        except OSError as exc:
            raise write_error(self.name, exc, "log", kept="The rows written before are kept.") from exc


def open_append(path: str | os.PathLike[str]) -> LogFile:
    """Open a UTF-8 text log for appending rows: created (0666 less the umask) if missing, never through a
    symlink; an OS error while writing it (a full disk) raises :class:`FileWriteError`."""
    try:
        raw = _LogFileIO(os.fspath(path), "a", opener=lambda p, flags: os.open(p, flags | SAFE_FLAGS, 0o666))
    except OSError as exc:
        raise write_error(path, exc, "log", kept="Nothing was written to it.") from exc
    return LogFile(io.BufferedWriter(raw), encoding="utf-8", newline="")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except (OSError, OverflowError):
        return False
    return True


def remove_stale_temps(directory: str | os.PathLike[str], *, before: float) -> list[Path]:
    """Remove the temporary files of atomic writes in ``directory`` that were abandoned (their writer was killed).

    A file is removed when its name is an atomic write's temporary name
    (``.<name>.<pid>-<random>.tmp``, or ``.<name>.<random>.tmp`` from older
    versions), it is a regular file (never a link), it was last modified before
    ``before`` (a Unix time: the start of the run that calls this), and no live
    process holds it: a writer holds its ``flock`` while it writes (where the file
    system has no ``flock``, a writer whose pid is alive holds it). Errors are
    skipped; nothing else is touched.

    Returns:
        The paths removed (the caller logs them).
    """
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        m = _TEMP_RE.match(entry.name)
        try:
            if m is None or not entry.is_file(follow_symlinks=False) or \
                    entry.stat(follow_symlinks=False).st_mtime >= before:
                continue
            fd = os.open(entry.path, os.O_RDONLY | os.O_NONBLOCK | SAFE_FLAGS)
        except OSError:
            continue
        try:
            if not _abandoned(fd, m.group("pid")):
                continue
            mine, now = os.fstat(fd), os.lstat(entry.path)
            if (mine.st_dev, mine.st_ino) == (now.st_dev, now.st_ino):  # still the file checked
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue
        finally:
            os.close(fd)  # drops the flock taken by _abandoned
    return removed


def _abandoned(fd: int, pid: str | None) -> bool:
    """No live writer holds this temporary file (on success, ``fd`` holds its ``flock`` until closed)."""
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        except OSError:
            pass  # no flock on this file system: the pid decides
    return pid is None or not _pid_alive(int(pid))
