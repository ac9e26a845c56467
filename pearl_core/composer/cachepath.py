"""Where the composer caches what it measured (profiled rows, the envs a script registers): one folder.

A module of its own, importing nothing of the composer, so that any composer module can find the
cache without importing the profiler (``composer/profiling.py`` re-exports :func:`cache_dir`).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Where profiled rows are cached: ``override``, else ``$PEARL_CACHE_DIR/profiles``, else
    ``$XDG_CACHE_HOME/pearl/profiles``, else ``~/.cache/pearl/profiles``."""
    if override is not None:
        return Path(override)
    if os.environ.get("PEARL_CACHE_DIR"):
        return Path(os.environ["PEARL_CACHE_DIR"]) / "profiles"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pearl" / "profiles"
