"""Whether the pearl-cpu backend is usable here, and the skip marker of the tests that need it."""

from __future__ import annotations

import pytest

import pearl_core


def cpu_backend_ok() -> bool:
    """``pearl_core.get_backend("cpu")`` works (pearl-cpu is built and installed)."""
    try:
        pearl_core.get_backend("cpu")
        return True
    except pearl_core.PearlError:
        return False


needs_cpu_backend = pytest.mark.skipif(not cpu_backend_ok(), reason="the pearl-cpu backend is not built/installed here")
