"""One run per log directory: the run lock.

A run owns its ``log_dir`` from the moment it writes anything there until it
ends. It holds the file ``log_dir/run.lock`` locked with ``fcntl.flock``
(exclusive, non-blocking) and writes its owner into it as JSON: pid, host name,
start time. Why ``flock`` and not an ``O_EXCL`` pid file: the kernel drops the
lock when its process dies, however it dies (``SIGKILL``, out of memory), so
whether a lock is live never depends on guessing from a pid that may have been
reused; the file's contents only tell people who holds it. Locks belong to one
open file, so a second run in the *same* process is refused as well.

* :func:`check_free` — refuse at once (:class:`~pearl_core.errors.SpecError`)
  when another run holds the directory; changes nothing (a run calls it before
  it builds anything).
* :meth:`RunLock.acquire` — take the lock before anything is written to the
  directory. A lock file left by a run that ended without releasing it (killed)
  is taken over, with a logged warning naming that run.
* :meth:`RunLock.release` — remove the file and drop the lock (idempotent); the
  run session does it however the run ends (return, exception, ``KeyboardInterrupt``).

The file is removed while still locked, and an acquirer checks, once it holds
the lock, that the file it locked is still the one at ``run.lock`` (else it
retries), so a run that is releasing never lets two others in. On a file system
without ``flock`` (some network or FUSE mounts) the lock falls back to the
owner's pid: a lock whose pid is alive on this host refuses; any other is taken
over with a warning.

The lock file is opened with ``O_NOFOLLOW | O_NONBLOCK`` and must be a regular
file: a symbolic link at ``run.lock`` is refused, never written through (its
target is left as it is), and so are a FIFO (which would block the open
forever), a directory, a device or a socket; the :class:`SpecError` names the
path, what is there and the fix. It is created 0666 less the process umask. An
OS error while writing it (a full disk) is a :class:`~pearl_core.fileio.FileWriteError`
(a ``SpecError``) naming the path, the errno and the fix. Once a run holds the
lock, the temporary files that atomic writes killed before they finished left
in ``log_dir`` (:func:`~pearl_core.fileio.remove_stale_temps`) are removed, each
with a logged line.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import logging
import os
import socket
import stat
import time
from pathlib import Path
from typing import Any

from pearl_core.errors import SpecError
from pearl_core.fileio import SAFE_FLAGS, remove_stale_temps, write_error

__all__ = ["LOCK_NAME", "RunLock", "check_free", "read_owner"]

log = logging.getLogger("pearl_core.runtime")

#: File name of the lock inside ``log_dir``.
LOCK_NAME = "run.lock"
#: Tries at taking a lock that another process is only probing (:func:`check_free` holds it for microseconds).
_TRIES = 10
_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL}

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: the pid fallback
    fcntl = None  # type: ignore[assignment]


def _owner_record() -> dict[str, Any]:
    now = time.time()
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "started": datetime.datetime.fromtimestamp(now).astimezone().isoformat(timespec="seconds"),
            "started_unix": now}


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISDIR, "a directory"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISLNK, "a symbolic link"))


def _not_a_file(path: Path, mode: int) -> SpecError | None:
    """The refusal for a ``run.lock`` that is not a regular file (``mode`` from ``lstat``), else ``None``."""
    found = next((name for test, name in _KINDS if test(mode)), None if stat.S_ISREG(mode) else "not a regular file")
    if found is None:
        return None
    if stat.S_ISLNK(mode):
        with contextlib.suppress(OSError):
            found += f" to {os.readlink(path)!r} (PEARL never writes through a link: its target was not touched)"
    return SpecError(
        f"the run lock {str(path)!r} is {found}, not a regular file; expected no file or PEARL's own lock file "
        "there. Nothing was opened or written. Fix: remove or rename it (it is not PEARL's), or give this run "
        "another log_dir (RunConfig(log_dir=...)).")


def _open(path: Path, flags: int) -> int:
    """Open ``path`` without following a link or blocking (a FIFO); refuse anything but a regular file.

    Raises:
        SpecError: ``path`` is a link, FIFO, directory, device or socket.
        OSError: the open failed otherwise (e.g. ``FileNotFoundError``).
    """
    with contextlib.suppress(FileNotFoundError):
        err = _not_a_file(path, os.lstat(path).st_mode)
        if err is not None:
            raise err
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | SAFE_FLAGS, 0o666)
    except OSError as exc:  # replaced since lstat: ELOOP (a link), EISDIR, ENXIO (a FIFO), ...
        with contextlib.suppress(OSError):
            err = _not_a_file(path, os.lstat(path).st_mode)
            if err is not None:
                raise err from exc
        raise
    err = _not_a_file(path, os.fstat(fd).st_mode)
    if err is not None:
        os.close(fd)
        raise err
    return fd


def _parse(text: str) -> dict[str, Any] | None:
    try:
        d = json.loads(text)
    except ValueError:
        return None
    return d if isinstance(d, dict) and isinstance(d.get("pid"), int) else None


def read_owner(log_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The owner written in ``log_dir``'s lock file (pid, host, started), or ``None`` (no file, unreadable)."""
    try:
        fd = _open(Path(log_dir) / LOCK_NAME, os.O_RDONLY)
    except (OSError, SpecError):
        return None
    try:
        return _parse(os.pread(fd, 1 << 16, 0).decode("utf-8", "replace"))
    except OSError:
        return None
    finally:
        os.close(fd)


def _describe(owner: dict[str, Any] | None) -> str:
    if owner is None:
        return "owner unknown: its lock file is being written or is unreadable"
    return f"pid {owner['pid']} on host {owner.get('host', '?')}, started {owner.get('started', '?')}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    except OSError:
        return False
    return True


def _busy(log_dir: Path, owner: dict[str, Any] | None) -> SpecError:
    return SpecError(
        f"log_dir {str(log_dir)!r} is in use by another run ({_describe(owner)}; lock file "
        f"{str(log_dir / LOCK_NAME)!r}); expected a log_dir no other run is using, since two runs in one directory "
        "would mix their logs and overwrite each other's checkpoint. Nothing was written. Fix: give this run "
        "another log_dir (RunConfig(log_dir=...)), or wait until that run ends.")


def _alive_here(owner: dict[str, Any] | None) -> bool:
    return owner is not None and owner.get("host") == socket.gethostname() and _pid_alive(owner["pid"])


def check_free(log_dir: str | os.PathLike) -> None:
    """Raise :class:`SpecError` if another run holds ``log_dir``, or ``run.lock`` there is not a regular file
    (a link, FIFO, directory, device); creates and changes nothing."""
    log_dir = Path(log_dir)
    path = log_dir / LOCK_NAME
    try:
        fd = _open(path, os.O_RDONLY)
    except SpecError:
        raise  # a link, FIFO, directory or device where the lock belongs
    except (OSError, ValueError):
        return  # no lock file (or none readable, or no valid path): acquire() decides
    try:
        if fcntl is None:
            held = _alive_here(read_owner(log_dir))
        else:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                held = False
            except BlockingIOError:
                held = True
            except OSError as exc:
                if exc.errno not in _NO_FLOCK:
                    raise
                held = _alive_here(read_owner(log_dir))
    finally:
        os.close(fd)
    if held:
        raise _busy(log_dir, read_owner(log_dir))


class RunLock:
    """The lock a run holds on its ``log_dir`` (see the module docstring); make one with :meth:`acquire`.

    Attributes:
        path: the lock file.
        owner: what this run wrote into it (pid, host, started).
        previous: the owner of a stale lock this run took over, else ``None``.
    """

    def __init__(self, path: Path, fd: int | None, owner: dict[str, Any], previous: dict[str, Any] | None):
        self.path, self._fd, self.owner, self.previous = path, fd, owner, previous
        self._held = True

    @property
    def held(self) -> bool:
        return self._held

    @classmethod
    def acquire(cls, log_dir: str | os.PathLike) -> "RunLock":
        """Create ``log_dir`` if needed and lock it for this run.

        Raises:
            SpecError: another run holds it (its pid, host and start time; the fix), or ``run.lock`` there is
                not a regular file (a link, FIFO, directory, device).
            FileWriteError: an OS error while creating or writing the lock (a full disk; a ``SpecError``).
        """
        log_dir = Path(log_dir)
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
        except (OSError, ValueError) as exc:
            raise SpecError(f"log_dir {str(log_dir)!r} cannot be created ({type(exc).__name__}: {exc}); expected a "
                            "directory this process can create and write. Fix: choose another log_dir.") from exc
        path = log_dir / LOCK_NAME
        owner = _owner_record()
        fd: int | None
        for attempt in range(_TRIES * 10):
            try:
                fd = _open(path, os.O_RDWR | os.O_CREAT)
            except FileNotFoundError:
                continue  # removed between lstat and open by a releasing owner
            except SpecError:
                raise
            except OSError as exc:
                raise write_error(path, exc, "the run lock", kept="No run was started.") from exc
            try:
                locked = cls._flock(fd)
            except BlockingIOError:
                os.close(fd)
                if attempt + 1 < _TRIES:
                    time.sleep(0.02)
                    continue
                raise _busy(log_dir, read_owner(log_dir)) from None
            except BaseException:
                os.close(fd)
                raise
            try:
                if not cls._still_there(fd, path):  # a releasing owner unlinked it: lock the new file
                    os.close(fd)
                    continue
                previous = _parse(os.pread(fd, 1 << 16, 0).decode("utf-8", "replace"))
                if not locked and _alive_here(previous):
                    os.close(fd)
                    raise _busy(log_dir, previous)
                if previous is not None:
                    gone = "is not running any more" if not _pid_alive(previous["pid"]) or \
                        previous.get("host") != socket.gethostname() else "no longer holds it"
                    log.warning("log_dir %s: taking over the stale lock of a run that ended without releasing it "
                                "(%s; that process %s).", log_dir, _describe(previous), gone)
                data = (json.dumps(owner, sort_keys=True) + "\n").encode("utf-8")
                try:
                    os.ftruncate(fd, 0)
                    if os.pwrite(fd, data, 0) != len(data):
                        raise OSError(errno.ENOSPC, "short write")
                    os.fsync(fd)
                except OSError as exc:
                    cls(path, fd, owner, None).release()  # removes the half-written file, closes fd
                    fd = None
                    raise write_error(path, exc, "the run lock", kept="No run was started and the lock file "
                                      "was removed.") from exc
            except BaseException:
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                raise
            cls._remove_stale_temps(log_dir, owner["started_unix"])
            return cls(path, fd, owner, previous)
        raise SpecError(f"log_dir {str(log_dir)!r}: could not take the run lock {str(path)!r}: it kept being "
                        "replaced by other runs. Fix: give this run another log_dir.")

    @staticmethod
    def _remove_stale_temps(log_dir: Path, started: float) -> None:
        """Remove what atomic writes killed before they finished left in ``log_dir`` (each logged)."""
        for tmp in remove_stale_temps(log_dir, before=started):
            log.warning("log_dir %s: removed %s, the temporary file of a write that did not finish (its writer was "
                        "killed before it could clean up; the file it was writing is as it was before).",
                        log_dir, tmp.name)

    @staticmethod
    def _flock(fd: int) -> bool:
        """Lock ``fd`` exclusively; ``False`` when this file system has no ``flock`` (the pid fallback)."""
        if fcntl is None:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise
        except OSError as exc:
            if exc.errno not in _NO_FLOCK:
                raise
            return False
        return True

    @staticmethod
    def _still_there(fd: int, path: Path) -> bool:
        mine = os.fstat(fd)
        try:
            now = os.stat(path)
        except FileNotFoundError:
            return False
        return (mine.st_dev, mine.st_ino) == (now.st_dev, now.st_ino)

    def release(self) -> None:
        """Remove the lock file and drop the lock (idempotent; never raises for a file already gone)."""
        if not self._held:
            return
        self._held = False
        fd, self._fd = self._fd, None
        try:
            if fd is None or self._still_there(fd, self.path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
        finally:
            if fd is not None:
                with contextlib.suppress(OSError):
                    if fcntl is not None:
                        fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
