"""The CPU backend's sum tree: a thin Python face on the native ``pearl_cpu._sumtree``.

All work, including every input check of :mod:`pearl_core.sumtree`, happens in
C++. ``update``, ``get``, ``sample`` and ``total`` are bound as *instance
attributes* to the extension's methods, so a call costs exactly one pybind11
call (the class-level methods below only exist to satisfy the ABC and to carry
the documentation).
"""

from __future__ import annotations

import operator
import os

import numpy as np

from pearl_core.errors import InvalidDTypeError, InvalidValueError
from pearl_core.sdk import SumTree, check_capacity_fanout

from pearl_cpu import _sumtree

__all__ = ["CpuSumTree"]

# Passed to C++ as uint64; any fanout >= capacity behaves as a single group anyway.
_MAX_FANOUT = 2**62
# The native layout's limits: a group's stride is a uint32 (fanout <= 2**31) and indices are int64.
_MAX_GROUP = 2**31
_MAX_CAPACITY = 2**62


def native_bytes(capacity: int, fanout: int) -> int:
    """Bytes the native tree allocates (``memory_bytes``), computed before allocating.

    Mirrors ``SumTree::SumTree`` in ``csrc/sumtree.cpp``: levels of groups of
    ``F = min(fanout, max(capacity, 2))`` nodes padded to a stride (2, 4, 8, then
    multiples of 8), each level's start aligned to 8 doubles after the root's
    cache line, twice (the nodes and their prefix sums), rounded up to the
    allocation's alignment (2 MiB from 4 MiB up, else 64 bytes).
    """
    f = min(fanout, max(capacity, 2))
    stride = 2 if f <= 2 else 4 if f <= 4 else 8 if f <= 8 else (f + 7) // 8 * 8
    doubles, groups = 8, -(-capacity // f)
    while True:
        doubles += (groups * stride + 7) // 8 * 8
        if groups <= 1:
            break
        groups = -(-groups // f)
    nbytes = doubles * 2 * 8
    align = 2 * 2**20 if nbytes >= 4 * 2**20 else 64
    return -(-nbytes // align) * align


def _check_layout(capacity: int, fanout: int) -> int:
    if capacity > _MAX_CAPACITY:
        raise InvalidValueError(f"sum tree capacity must be <= 2**62 (int64 indices); found {capacity:,}. "
                                "Fix: use a replay capacity that fits in memory, e.g. 2**20.")
    f = min(fanout, max(capacity, 2))
    if f > _MAX_GROUP:
        raise InvalidValueError(f"sum tree fanout = {fanout:,} is too wide for the CPU tree with capacity = "
                                f"{capacity:,}; expected a fanout <= 2**31 (or >= the capacity: one group). "
                                "Fix: use a fanout such as 16.")
    return native_bytes(capacity, fanout)


def _check_threads(threads) -> int:
    if threads is None:
        return os.cpu_count() or 1
    if isinstance(threads, bool):
        raise InvalidDTypeError(f"threads must be an int or None; found {threads!r}.")
    try:
        threads = operator.index(threads)
    except TypeError as exc:
        raise InvalidDTypeError(
            f"threads must be an int or None; found {threads!r}. Fix: pass e.g. threads=2."
        ) from exc
    if not 1 <= threads <= 1024:
        raise InvalidValueError(
            f"threads must be in [1, 1024]; found {threads}. Fix: pass None to use every core."
        )
    return threads


class CpuSumTree(SumTree):
    """Native n-ary ``float64`` sum tree (C++), batched and multi-threaded.

    Args:
        capacity: number of leaves (``>= 1``); need not be a power of ``fanout``.
        fanout: children per inner node (``>= 2``); 16 is the measured default
            (see ``scripts/bench_native.py``).
        threads: threads used for large batches; ``None`` means ``os.cpu_count()``.
            Small batches always run on the calling thread.

    Batches of 64 items or more release the GIL; operations on one tree are
    serialised by a mutex, so the tree may be shared between Python threads.
    Batches of >= 1024 items (sample, update) or >= 65536 (get) are split across
    ``threads`` threads of a small pool owned by the tree (created on first use,
    recreated after ``fork``). When the pool sees that its workers do not get a
    core (an oversubscribed machine), it runs batches serially for a while.
    Results never depend on the thread count: node values are recomputed from
    their children, and each node is written by exactly one thread.
    """

    def __init__(self, capacity: int, fanout: int = 16, threads: int | None = None):
        self.capacity, self.fanout = check_capacity_fanout(capacity, fanout, nbytes=_check_layout)
        impl = _sumtree.SumTree(self.capacity, min(self.fanout, _MAX_FANOUT), _check_threads(threads))
        self._impl = impl
        # One pybind11 call per operation: shadow the class methods below with
        # the bound native methods (unless a subclass overrides them).
        cls = type(self)
        for name in ("update", "get", "sample", "total"):
            if getattr(cls, name) is getattr(CpuSumTree, name):
                setattr(self, name, getattr(impl, name))

    # -- the SumTree API (shadowed per instance by the bound native methods) --
    def update(self, indices, priorities) -> None:  # see SumTree
        self._impl.update(indices, priorities)

    def get(self, indices) -> np.ndarray:
        return self._impl.get(indices)

    def sample(self, masses) -> np.ndarray:
        return self._impl.sample(masses)

    def total(self) -> float:
        return self._impl.total()

    # -- extras --------------------------------------------------------------
    @property
    def threads(self) -> int:
        """Threads used for large batches (settable)."""
        return self._impl.threads

    @threads.setter
    def threads(self, threads: int | None) -> None:
        self._impl.set_threads(_check_threads(threads))

    def set_threads(self, threads: int | None) -> None:
        """Set the number of threads used for large batches (``None``: all cores)."""
        self._impl.set_threads(_check_threads(threads))

    @property
    def depth(self) -> int:
        """Number of levels below the root (the leaves are the last)."""
        return self._impl.depth

    @property
    def memory_bytes(self) -> int:
        """Bytes of the node array (all levels, padding included)."""
        return self._impl.memory_bytes

    @property
    def priorities(self) -> np.ndarray:
        """A copy of all leaf priorities (``float64``, ``capacity`` long)."""
        return self._impl.leaves()

    def check_consistency(self) -> bool:
        """True if every inner node equals the sum of its children bit for bit."""
        return self._impl.check_consistency()

    def __repr__(self) -> str:
        return f"CpuSumTree(capacity={self.capacity}, fanout={self.fanout}, threads={self.threads})"
