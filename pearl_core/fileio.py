"""Atomic file writes: the one way PEARL replaces a file.

Every output file (checkpoints, plans, generated programs, profile caches,
plots, logs' side files) is written to a temporary file in the destination's
directory, flushed and fsync'ed, then moved over the destination with
``os.replace``. Either the whole new file is there afterwards, or (on any
error, interrupt included) the old file is untouched and the temporary file is
gone: an existing file is never removed before its replacement is complete.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

from pearl_core.errors import InvalidValueError

__all__ = ["atomic_write"]


def atomic_write(path: str | os.PathLike[str], data: bytes | str | Callable[[BinaryIO], None], *,
                 mode: int = 0o644, make_parents: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically.

    Args:
        path: the destination file.
        data: bytes, text (written as UTF-8 with ``\\n`` line ends), or a
            callable that writes into the binary file object it is given
            (e.g. ``lambda fh: torch.save(obj, fh)``).
        mode: permission bits of the new file.
        make_parents: create missing parent directories first (otherwise a
            missing directory is an error).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        InvalidValueError: the parent directory does not exist (and
            ``make_parents`` is off), or ``path`` is a directory.
        OSError: the write itself failed (disk full, permissions); nothing
            was changed.
    """
    out = Path(path)
    parent = out.parent
    if make_parents:
        parent.mkdir(parents=True, exist_ok=True)
    if not parent.is_dir():
        raise InvalidValueError(f"cannot write {str(out)!r}: directory {str(parent)!r} does not exist. "
                                "Fix: create it first or choose another path.")
    if out.is_dir():
        raise InvalidValueError(f"cannot write {str(out)!r}: it is a directory; expected a file path. "
                                "Fix: name a file inside it instead.")
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            if callable(data):
                data(fh)
            else:
                fh.write(data.encode("utf-8") if isinstance(data, str) else bytes(data))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return out
