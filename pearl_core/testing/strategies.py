"""Hypothesis strategies for sum-tree tests (ours and third-party plugins').

They aim at the places trees go wrong: capacities that are not powers of the
fanout, odd fanouts, priorities with zeros and huge dynamic ranges, index
batches with duplicates, and masses that sit exactly on prefix-sum boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from pearl_core.errors import InvalidValueError

__all__ = [
    "TreeProgram",
    "WIDEST_FANOUT",
    "capacities",
    "fanouts",
    "priority_values",
    "exact_priority_values",
    "index_batches",
    "update_batches",
    "tree_programs",
    "boundary_masses",
]


#: The widest fanout drawn when no ``max_fanout`` caps it.
WIDEST_FANOUT = 33


def fanouts(max_fanout: int | None = None) -> st.SearchStrategy[int]:
    """Fanouts ``2..max_fanout`` (odd ones included); ``2..WIDEST_FANOUT`` when ``max_fanout`` is ``None``.

    Never draws a fanout above ``max_fanout``: pass the backend's
    :attr:`~pearl_core.backend.Backend.max_fanout` as it is.

    Raises:
        InvalidValueError: ``max_fanout`` is not ``None`` or an int ``>= 2``.
    """
    if max_fanout is not None and (isinstance(max_fanout, bool) or not isinstance(max_fanout, int)
                                   or max_fanout < 2):
        raise InvalidValueError(f"fanouts(max_fanout={max_fanout!r}): expected None or an int >= 2 (a sum tree "
                                "needs fanout >= 2). Fix: pass the backend's max_fanout, e.g. 32, or None.")
    hi = WIDEST_FANOUT if max_fanout is None else min(WIDEST_FANOUT, max_fanout)
    common = [f for f in (2, 3, 4, 5, 7, 8, 16, 32) if f <= hi]
    return st.one_of(st.sampled_from(common), st.integers(2, hi))


@st.composite
def capacities(draw, fanout: int | None = None, max_capacity: int = 5000) -> int:
    """Capacities ``>= 1``: tiny ones, powers of ``fanout`` and their neighbours."""
    choices = [st.integers(1, min(70, max_capacity))]
    if fanout is not None:
        powers: list[int] = []
        p = 1
        while p <= max_capacity:
            powers.extend(c for c in (p - 1, p, p + 1) if 1 <= c <= max_capacity)
            p *= fanout
        choices.append(st.sampled_from(sorted(set(powers))))
    choices.append(st.integers(1, max_capacity))
    return draw(st.one_of(*choices))


def priority_values() -> st.SearchStrategy[float]:
    """Priorities with many zeros and a huge dynamic range (1e-30 .. 1e30)."""
    return st.one_of(
        st.just(0.0),
        st.integers(0, 10).map(float),
        st.floats(1e-30, 1e30, allow_nan=False, allow_infinity=False),
        st.floats(0.0, 1.0),
    )


def exact_priority_values() -> st.SearchStrategy[float]:
    """Small integer priorities (zeros included): every sum of them is exact in float64,
    so results must match the reference exactly, even on boundaries."""
    return st.integers(0, 1000).map(float)


@st.composite
def index_batches(draw, capacity: int, max_size: int = 64) -> np.ndarray:
    """``int64`` index batches in ``[0, capacity)``, often with duplicates."""
    base = draw(st.lists(st.integers(0, capacity - 1), min_size=0, max_size=max_size))
    if base and draw(st.booleans()):
        base = base + draw(st.lists(st.sampled_from(base), max_size=8))  # force repeats
    return np.asarray(base, dtype=np.int64)


@st.composite
def update_batches(draw, capacity: int, exact: bool = False, max_size: int = 64):
    """One ``(indices, priorities)`` batch for ``tree.update``."""
    idx = draw(index_batches(capacity, max_size))
    values = exact_priority_values() if exact else priority_values()
    prio = np.asarray(draw(st.lists(values, min_size=len(idx), max_size=len(idx))), dtype=np.float64)
    return idx, prio


@dataclass(frozen=True)
class TreeProgram:
    """A tree shape and a sequence of update batches to apply to it."""

    capacity: int
    fanout: int
    batches: tuple
    exact: bool


@st.composite
def tree_programs(draw, max_fanout: int | None = None, max_capacity: int = 5000, max_batches: int = 6):
    """A random tree shape (fanout ``<= max_fanout``, see :func:`fanouts`) plus update batches;
    ``exact`` programs use integer priorities."""
    fanout = draw(fanouts(max_fanout))
    capacity = draw(capacities(fanout, max_capacity))
    exact = draw(st.booleans())
    batches = draw(st.lists(update_batches(capacity, exact), min_size=1, max_size=max_batches))
    return TreeProgram(capacity, fanout, tuple(batches), exact)


@st.composite
def boundary_masses(draw, priorities: np.ndarray, max_size: int = 64) -> np.ndarray:
    """Masses in ``[0, total]``: exact prefix-sum boundaries, their float neighbours,
    0, the total itself and uniform draws. Needs a non-zero ``priorities`` vector."""
    cum = np.cumsum(np.asarray(priorities, dtype=np.float64))
    total = float(cum[-1])
    bounds = np.unique(cum[cum < total])
    picks = []
    n = draw(st.integers(1, max_size))
    for _ in range(n):
        kind = draw(st.sampled_from(("boundary", "below", "above", "zero", "total", "uniform")))
        if kind in ("boundary", "below", "above") and bounds.size:
            b = float(bounds[draw(st.integers(0, bounds.size - 1))])
            if kind == "below":
                b = float(np.nextafter(b, -np.inf))
            elif kind == "above":
                b = float(np.nextafter(b, np.inf))
            picks.append(max(b, 0.0))
        elif kind == "zero":
            picks.append(0.0)
        elif kind == "total":
            picks.append(total)
        else:
            picks.append(draw(st.floats(0.0, total, exclude_max=True)) if total > 0 else 0.0)
    return np.asarray(picks, dtype=np.float64)
