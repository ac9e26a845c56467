"""The sum-tree contract every backend implements, and the input checks that enforce it.

A sum tree keeps one non-negative priority per slot ``0 <= i < capacity`` and
answers three batched operations on numpy arrays:

* ``update(indices, priorities)`` sets leaf priorities. Within one call a
  repeated index takes the *last* priority given for it.
* ``get(indices)`` returns the leaves' priorities as ``float64``.
* ``sample(masses)`` returns, for each mass ``x`` with ``0 <= x < total()``, the
  smallest index ``i`` whose inclusive prefix sum ``p[0] + ... + p[i]`` exceeds
  ``x``. A zero-priority leaf is therefore never returned. Masses at or just past
  the total (float drift, up to ``total() * (1 + MASS_DRIFT_RTOL)``) clamp to the
  last leaf with non-zero priority.

Bad input raises and changes nothing:

============================================  ================================
input                                         error
============================================  ================================
``capacity < 1`` or ``fanout < 2``            :class:`InvalidValueError`
a tree larger than the available memory       :class:`InvalidValueError` (the
                                              size in GiB, before allocating)
indices/priorities/masses not 1-D             :class:`InvalidValueError`
non-integer indices, non-real priorities      :class:`InvalidDTypeError`
index ``< 0`` or ``>= capacity``              :class:`InvalidIndexError`
negative, NaN or infinite priority            :class:`InvalidValueError` (names
                                              the first bad position)
``len(indices) != len(priorities)``           :class:`InvalidValueError`
an update after which ``total()`` would not   :class:`InvalidValueError` (the
be finite (the sum overflows ``float64``)     total, the batch's sum and the fix)
mass negative, NaN or past total + drift      :class:`InvalidValueError`
sampling when every priority is zero          :class:`EmptyTreeError`
============================================  ================================

The helpers ``check_*`` below implement exactly these rules in Python; a
pure-Python backend calls them, a compiled backend reimplements them natively
(the conformance kit in :mod:`pearl_core.testing` checks that it does).

The finite-total rule needs no code in a backend written in Python: every
``update`` a subclass of :class:`SumTree` defines is wrapped (at class
creation) by :func:`keep_total_finite`, which refuses such a batch and puts the
old leaves back. A backend that binds a native ``update`` per instance (the CPU
tree) enforces the rule natively.
"""

from __future__ import annotations

import abc
import functools
import math
import operator

import numpy as np

from pearl_core.errors import (
    EmptyTreeError,
    InvalidDTypeError,
    InvalidIndexError,
    InvalidValueError,
)
from pearl_core.validation import gib, memory_available_bytes, memory_total_bytes

#: Masses in ``[total, total * (1 + MASS_DRIFT_RTOL)]`` are float drift and clamp
#: to the last non-zero leaf instead of raising.
MASS_DRIFT_RTOL = 1e-6

__all__ = [
    "MASS_DRIFT_RTOL",
    "SumTree",
    "check_capacity_fanout",
    "check_indices",
    "check_priorities",
    "check_masses",
    "keep_total_finite",
    "tree_bytes",
]

#: Trees smaller than this are not checked against the free memory (no /proc read per small tree).
_CHECK_MEMORY_FROM = 64 * 2**20


class SumTree(abc.ABC):
    """A batched n-ary sum tree over ``capacity`` non-negative priorities.

    Attributes:
        capacity: number of leaves (``>= 1``), not necessarily a power of ``fanout``.
        fanout: children per inner node (``>= 2``).

    Complexity (per item of a batch): ``update`` and ``sample`` are
    ``O(fanout * depth)`` with ``depth = ceil(log_fanout(capacity))``; ``get`` and
    ``total`` are ``O(1)``.

    Every method takes 1-D array-likes and validates them before touching the
    tree; see the module docstring for the rules and the errors raised.
    """

    capacity: int
    fanout: int

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        update = cls.__dict__.get("update")
        if callable(update) and not getattr(update, "__isabstractmethod__", False):
            cls.update = keep_total_finite(update)

    @abc.abstractmethod
    def update(self, indices, priorities) -> None:
        """Set ``p[indices[k]] = priorities[k]``; a repeated index keeps its last value.

        Args:
            indices: 1-D integer array-like, each in ``[0, capacity)``.
            priorities: 1-D real array-like of the same length, finite and ``>= 0``.
        """

    @abc.abstractmethod
    def get(self, indices) -> np.ndarray:
        """Return ``p[indices]`` as a new ``float64`` array of the same length."""

    @abc.abstractmethod
    def sample(self, masses) -> np.ndarray:
        """Return the ``int64`` leaf index found for each mass (see the module docstring).

        Raises:
            EmptyTreeError: every priority is zero.
        """

    @abc.abstractmethod
    def total(self) -> float:
        """Return the sum of all priorities as a Python float."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity={self.capacity}, fanout={self.fanout})"


#: A batch whose sum plus the current total stays below this cannot overflow (n-ary sums round by
#: far less than a factor of 4), so only batches near the limit pay for a read of the old leaves.
_SAFE_TOTAL = np.finfo(np.float64).max / 4


def _total(tree: "SumTree") -> float:
    try:
        return float(tree.total())
    except OverflowError:  # an exactly rounded total (math.fsum) raises instead of returning inf
        return math.inf


def keep_total_finite(update):
    """Wrap a tree's ``update`` so that a batch after which ``total()`` is not finite raises
    :class:`InvalidValueError` and leaves every leaf (and the total) as it was.

    A batch whose sum plus the current total is far below the largest float is applied directly
    (one read of the total); otherwise the old priorities at ``indices`` are read first and written
    back if the new total overflowed. Input the wrapped ``update`` would refuse goes to it unchanged,
    so it raises its own error. Applied to every ``update`` a :class:`SumTree` subclass defines.
    """
    if getattr(update, "_keeps_total_finite", False):
        return update

    @functools.wraps(update)
    def guarded(self, indices, priorities):
        p = np.asarray(priorities)
        if p.ndim != 1 or p.dtype.kind not in "iuf" or p.size == 0:
            return update(self, indices, priorities)
        with np.errstate(over="ignore", invalid="ignore"):
            batch = float(p.sum(dtype=np.float64))
        if not batch >= 0.0 or not np.isfinite(p).all() or (p < 0).any():
            return update(self, indices, priorities)  # bad priorities: the tree's own check raises
        before = _total(self)
        if before + batch <= _SAFE_TOTAL:
            return update(self, indices, priorities)
        old = np.array(self.get(indices), dtype=np.float64)
        update(self, indices, priorities)
        after = _total(self)
        if math.isfinite(after):
            return None
        update(self, indices, old)
        raise InvalidValueError(total_overflow_message(before, batch, after))

    guarded._keeps_total_finite = True
    return guarded


def total_overflow_message(before: float, batch: float, after: float) -> str:
    """The message of a refused update whose new total would not be finite."""
    return (
        f"priorities would make the sum tree's total overflow: the total is {before!r} and the batch adds up to "
        f"{batch!r}, so the new total is not finite ({after!r}); expected a total <= the largest float "
        f"({float(np.finfo(np.float64).max)!r}). Nothing was updated. Fix: scale the priorities down "
        "(clip TD errors)."
    )


def tree_bytes(capacity: int, fanout: int, node_bytes: int = 8) -> int:
    """Bytes of a plain n-ary sum tree: every level's nodes (leaves included) at ``node_bytes`` each.

    A backend with another layout (padding, a second array) passes its own size
    to :func:`check_capacity_fanout`; this is the default estimate.
    """
    nodes, level = 1, capacity
    while level > 1:
        nodes += level
        level = -(-level // fanout)
    return nodes * node_bytes


def check_capacity_fanout(capacity, fanout, *, nbytes=None) -> tuple[int, int]:
    """Validate and return ``(capacity, fanout)`` as ints.

    Also refuses, before anything is allocated, a tree that would not fit in
    the memory available now: ``nbytes`` is its size (a callable
    ``(capacity, fanout) -> bytes``, or ``None`` for :func:`tree_bytes`).
    """
    try:
        capacity = operator.index(capacity)
        fanout = operator.index(fanout)
    except TypeError as exc:
        raise InvalidDTypeError(
            f"sum tree capacity and fanout must be integers; found capacity={capacity!r}, "
            f"fanout={fanout!r}. Fix: pass ints, e.g. capacity=2**20, fanout=16."
        ) from exc
    if capacity < 1:
        raise InvalidValueError(
            f"sum tree capacity must be >= 1; found {capacity}. Fix: pass the replay size, e.g. 2**20."
        )
    if fanout < 2:
        raise InvalidValueError(
            f"sum tree fanout must be >= 2; found {fanout}. Fix: use 2 (binary) or a wider fanout such as 16."
        )
    need = (nbytes or tree_bytes)(capacity, fanout)
    if need >= _CHECK_MEMORY_FROM:
        check_tree_fits(capacity, fanout, need)
    return capacity, fanout


def check_tree_fits(capacity: int, fanout: int, need: int) -> None:
    """Raise :class:`InvalidValueError` if ``need`` bytes (a tree's) exceed the memory available now."""
    avail = memory_available_bytes()
    if avail is None or need <= avail:
        return
    total = memory_total_bytes()
    fits = max(1, int(capacity * avail / need))
    raise InvalidValueError(
        f"sum tree capacity = {capacity:,} (fanout {fanout:,}) needs {gib(need)} of memory; this machine has "
        f"{gib(avail)} available" + (f" ({gib(total)} in all)" if total else "") + ", so nothing was allocated. "
        f"Fix: use a smaller replay capacity (at most about {fits:,} fits now), or run where more memory is free."
    )


def _as_1d(values, what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise InvalidValueError(
            f"{what} must be a 1-D array; found shape {arr.shape}. Fix: pass a flat array (arr.ravel())."
        )
    return arr


def check_indices(indices, capacity: int, what: str = "indices", *, bound: str = "capacity",
                  fix: str = "") -> np.ndarray:
    """Return ``indices`` as a 1-D ``int64`` array in ``[0, capacity)``, or raise without side effects.

    ``bound`` names the upper limit in the out-of-range message and ``fix`` is
    appended to it (callers with a narrower valid range, e.g. filled replay
    slots, pass their own).
    """
    arr = _as_1d(indices, what)
    if arr.size == 0:
        if arr.dtype.kind not in "iuf":
            raise InvalidDTypeError(f"{what} must be integers; found dtype {arr.dtype}.")
        return np.empty(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise InvalidDTypeError(
            f"{what} must be an integer array; found dtype {arr.dtype}. "
            f"Fix: convert explicitly, e.g. np.asarray({what}, dtype=np.int64)."
        )
    out = arr.astype(np.int64, copy=False)
    # One reduction checks both ends: a negative int64 viewed as uint64 is above any capacity
    # (and a uint64 above 2**63 that wrapped to a negative int64 reads as itself again).
    if int(out.view(np.uint64).max()) >= capacity:
        bad = (arr < 0) | (arr >= capacity)
        pos = int(np.argmax(bad))
        raise InvalidIndexError(
            f"{what}[{pos}] = {arr[pos]} is out of range; expected 0 <= index < {bound} = {capacity}.{fix}"
        )
    return out


def check_priorities(priorities, n: int) -> np.ndarray:
    """Return ``priorities`` as a 1-D ``float64`` array of length ``n``, or raise."""
    arr = _as_1d(priorities, "priorities")
    if arr.size and arr.dtype.kind not in "iuf":
        raise InvalidDTypeError(
            f"priorities must be real numbers; found dtype {arr.dtype}. Fix: np.asarray(p, dtype=np.float64)."
        )
    if arr.shape[0] != n:
        raise InvalidValueError(
            f"indices and priorities differ in length: {n} indices, {arr.shape[0]} priorities. "
            "Fix: pass one priority per index."
        )
    arr = arr.astype(np.float64, copy=False)
    bad = ~(np.isfinite(arr) & (arr >= 0.0))
    if bad.any():
        pos = int(np.argmax(bad))
        raise InvalidValueError(
            f"priorities[{pos}] = {arr[pos]!r} is invalid; expected a finite value >= 0. "
            "Fix: clip or replace NaN/inf/negative priorities before updating."
        )
    return arr


def check_masses(masses, total: float) -> np.ndarray:
    """Return ``masses`` as a 1-D ``float64`` array valid for a tree of this total, or raise."""
    arr = _as_1d(masses, "masses")
    if arr.size and arr.dtype.kind not in "iuf":
        raise InvalidDTypeError(
            f"masses must be real numbers; found dtype {arr.dtype}. Fix: np.asarray(x, dtype=np.float64)."
        )
    arr = arr.astype(np.float64, copy=False)
    if not total > 0.0:
        raise EmptyTreeError(
            "cannot sample: every priority in the sum tree is zero (total = 0). "
            "Fix: insert items with a positive priority before sampling."
        )
    limit = total * (1.0 + MASS_DRIFT_RTOL)
    bad = ~((arr >= 0.0) & (arr <= limit))
    if bad.any():
        pos = int(np.argmax(bad))
        raise InvalidValueError(
            f"masses[{pos}] = {arr[pos]!r} is outside [0, total) with total = {total!r}. "
            "Fix: draw masses as u * tree.total() with u in [0, 1)."
        )
    return arr
