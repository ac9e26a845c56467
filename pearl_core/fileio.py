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
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable, Sequence, Union

from pearl_core.errors import InvalidValueError

__all__ = ["Data", "atomic_write", "atomic_write_all", "check_writable"]

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


def _write_temp(out: Path, data: Data, mode: int) -> str:
    """Write ``data`` to a new temporary file next to ``out`` (flushed, fsync'ed); returns its path.

    On any failure the temporary file is removed before the error propagates.
    """
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
        try:
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
        os.chmod(tmp, mode)
    except BaseException:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    return tmp


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


def atomic_write(path: str | os.PathLike[str], data: Data, *, mode: int = 0o644,
                 make_parents: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically.

    Args:
        path: the destination file.
        data: bytes, text (written as UTF-8 with ``\\n`` line ends), or a
            callable that writes into the binary file object it is given
            (e.g. ``lambda fh: torch.save(obj, fh)``).
        mode: permission bits of the new file.
        make_parents: create missing parent directories first (otherwise a
            missing directory is an error); the ones created are removed again
            if the write fails.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        InvalidValueError: the parent directory does not exist (and
            ``make_parents`` is off), or ``path`` is a directory.
        OSError: the write itself failed (disk full, permissions); nothing
            was changed and no temporary file is left.
    """
    out = check_writable(path, make_parents=make_parents)
    created = _make_parents(out.parent) if make_parents else []
    try:
        tmp = _write_temp(out, data, mode)
        try:
            os.replace(tmp, out)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except BaseException:
        _remove_dirs(created)
        raise
    _fsync_dir(out.parent)
    return out


def atomic_write_all(items: Sequence[tuple[str | os.PathLike[str], Data]], *, mode: int = 0o644) -> list[Path]:
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
        mode: permission bits of the new files.

    Returns:
        The paths written, in order.

    Raises:
        InvalidValueError: a destination cannot be written, or one is named twice.
        OSError: a write failed; nothing was changed.
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
    try:
        for p, (_, data) in zip(paths, items):
            temps.append(_write_temp(p, data, mode))
        for p in paths:
            backups.append(_backup(p))
        for i, p in enumerate(paths):
            os.replace(temps[i], p)
            temps[i] = None
            done = i + 1
    except BaseException:
        for i in reversed(range(done)):  # put back what was replaced
            with contextlib.suppress(OSError):
                if i < len(backups) and backups[i] is not None:
                    os.replace(backups[i], paths[i])
                    backups[i] = None
                else:
                    os.unlink(paths[i])
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
    if not path.is_file():
        return None
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
