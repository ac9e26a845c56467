"""Allocation failures of the replay's storage as a :class:`StorageMemoryError` naming the size and the fix.

Under a ``ulimit -v`` (or a cgroup limit) below what the replay needs, numpy raises a bare
``MemoryError`` when the storage is allocated (a frame storage's pool too: it is allocated at
its bound at the start, never later); the storages turn it into :class:`StorageMemoryError`
(also a ``MemoryError``), with the bytes needed, the limit that stopped it and the fix. The
start-up check (:func:`pearl_core.runtime.machine.check_machine`) refuses such a run before
that, as a ``SpecError``, where it can read the limit. A frame storage also raises
:class:`StorageMemoryError` for an ``add`` whose frames would pass its pool's bound.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from pearl_core.errors import PearlError

__all__ = ["StorageMemoryError", "allocation_error", "allocate_fields", "zeros"]


class StorageMemoryError(PearlError, MemoryError):
    """The replay's storage could not allocate its memory (the machine, or a ``ulimit -v`` / cgroup limit,
    has less than it needs). Also a :class:`MemoryError`. Nothing was changed."""


def allocation_error(what: str, nbytes: int, why: str = "") -> StorageMemoryError:
    """The :class:`StorageMemoryError` for a failed allocation of ``nbytes`` for ``what``."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    limit = (f" (this process's address-space limit, ulimit -v, is {soft / 2**30:.2f} GiB)"
             if soft != resource.RLIM_INFINITY else "")
    return StorageMemoryError(
        f"{what} needs {nbytes / 2**30:.3f} GiB ({nbytes:,} bytes){why}, which could not be allocated here"
        f"{limit}; expected it to fit in the memory this process may use. Nothing was changed. Fix: a smaller "
        "replay capacity (ReplayConfig.capacity), frame storage for stacked image observations "
        "(ReplayConfig.frame_storage='on'), or run where more memory may be used (raise ulimit -v).")


def zeros(shape: tuple, dtype: Any, what: str, why: str = "") -> np.ndarray:
    """``np.zeros(shape, dtype)``, a failure raised as :class:`StorageMemoryError`."""
    try:
        return np.zeros(shape, dtype=dtype)
    except MemoryError as exc:
        raise allocation_error(what, math.prod(shape) * np.dtype(dtype).itemsize, why) from exc


def allocate_fields(allocate: Callable[[], Any], storage: Any, layout: dict, capacity: int) -> Any:
    """``allocate()`` (a storage's :meth:`allocate`), a ``MemoryError`` raised as :class:`StorageMemoryError`
    with the bytes of ``capacity`` rows of ``layout`` (field -> (shape, dtype))."""
    try:
        return allocate()
    except StorageMemoryError:
        raise
    except MemoryError as exc:
        need = capacity * sum(math.prod(shape) * np.dtype(dt).itemsize for shape, dt in layout.values())
        raise allocation_error(f"{type(storage).__name__} of capacity {capacity:,} ({storage.spec})", need) from exc
