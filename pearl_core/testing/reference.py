"""The reference sum tree: the oracle every backend is compared with.

It is deliberately not a tree at all: a flat ``float64`` array of priorities,
an exactly rounded total (``math.fsum``) and a cumulative sum searched with
``np.searchsorted``. It is obviously correct and slow (``O(capacity)`` per
sample batch); never use it as a backend.
"""

from __future__ import annotations

import math

import numpy as np

from pearl_core.sumtree import (
    SumTree,
    check_capacity_fanout,
    check_indices,
    check_masses,
    check_priorities,
)


class ReferenceSumTree(SumTree):
    """Flat-array oracle with the :class:`~pearl_core.sumtree.SumTree` contract."""

    def __init__(self, capacity: int, fanout: int = 2):
        self.capacity, self.fanout = check_capacity_fanout(capacity, fanout)
        self._p = np.zeros(self.capacity, dtype=np.float64)

    @property
    def priorities(self) -> np.ndarray:
        """A read-only view of all leaf priorities."""
        view = self._p.view()
        view.flags.writeable = False
        return view

    def update(self, indices, priorities) -> None:
        idx = check_indices(indices, self.capacity)
        prio = check_priorities(priorities, idx.shape[0])
        # Fancy assignment applies elements in order, so the last duplicate wins;
        # spelled out as a loop to make the oracle's rule impossible to misread.
        for i, p in zip(idx.tolist(), prio.tolist()):
            self._p[i] = p

    def get(self, indices) -> np.ndarray:
        return self._p[check_indices(indices, self.capacity)].copy()

    def total(self) -> float:
        try:
            return math.fsum(self._p.tolist())
        except OverflowError:  # the exact sum is past the largest float (an update the contract refuses)
            return math.inf

    def sample(self, masses) -> np.ndarray:
        x = check_masses(masses, self.total())
        cum = np.cumsum(self._p)
        out = np.searchsorted(cum, x, side="right").astype(np.int64)
        past = out >= self.capacity
        if past.any():
            out[past] = int(np.flatnonzero(self._p)[-1])
        return out

    def prefix_sums(self) -> np.ndarray:
        """Inclusive prefix sums of the priorities (``float64``), for boundary checks."""
        return np.cumsum(self._p)
