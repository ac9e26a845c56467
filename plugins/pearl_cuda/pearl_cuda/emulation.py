"""A numpy emulation of exactly what the CUDA kernels do, step for step.

The kernels cannot run without a GPU, but their *algorithm* can: this module
performs the same phases on the same layout (:class:`~pearl_cuda.layout.TreeLayout`)
with the same summation order, so running it through the conformance kit
(``tests/test_cuda_emulation.py``) proves the algorithm on any machine. On a GPU the
real tree runs the same kit (``tests/test_cuda_gpu.py``) and is compared with this
emulation bit for bit.

Kernel (``kernels/sumtree.cu``)   emulation here
-------------------------------   ------------------------------------------------
``pearl_update_claim``            ``np.maximum.at(owner, idx, k)``: last position wins
``pearl_update_leaves``           the owner of each index writes its leaf, resets owner
``pearl_update_level`` (L times)  each touched ancestor = sum of its children, c = 0..F-1
``pearl_sample``                  per level: first child whose running sum exceeds x,
                                  else the last non-zero child and x = +inf
``pearl_get``                     ``tree[leaf_offset + idx]``

The per-thread loops become vectorised numpy over the batch; the float
operations (``partial + v``, ``x - partial``, ``s + child`` in child order) are
the same IEEE double operations, so results match the device exactly.
"""

from __future__ import annotations

import numpy as np

from pearl_core.sdk import SumTree, check_indices, check_masses, check_priorities
from pearl_cuda.layout import TreeLayout

__all__ = ["EmulatedSumTree", "claim_owners", "descend", "recompute_levels"]


def claim_owners(idx: np.ndarray, capacity: int) -> np.ndarray:
    """Phases 1-2's decision: a boolean mask of the batch positions that write their leaf.

    Emulates ``atomicMax(owner + i, k)`` followed by ``owner[i] == k``: the
    last occurrence of each index wins.
    """
    owner = np.full(capacity, -1, dtype=np.int64)
    k = np.arange(idx.shape[0], dtype=np.int64)
    np.maximum.at(owner, idx, k)
    return owner[idx] == k


def recompute_levels(tree: np.ndarray, layout: TreeLayout, idx: np.ndarray) -> None:
    """Phase 3: for each level L-1 .. 0, recompute the touched ancestors from their children.

    Threads of the kernel that share an ancestor store identical values, so
    touching each ancestor once (``np.unique``) is the same result.
    """
    f = layout.fanout
    for level in range(layout.levels - 1, -1, -1):
        nodes = np.unique(idx // layout.spans[level])
        first = layout.offsets[level + 1] + nodes * f
        s = np.zeros(nodes.shape[0], dtype=np.float64)
        for c in range(f):  # the kernel's `for (c = 0; c < F; ++c) s += kids[c]`
            s = s + tree[first + c]
        tree[layout.offsets[level] + nodes] = s


def descend(tree: np.ndarray, layout: TreeLayout, masses: np.ndarray) -> np.ndarray:
    """``pearl_descend`` for a batch of (already validated) masses."""
    f = layout.fanout
    x = masses.astype(np.float64, copy=True)
    j = np.zeros(x.shape[0], dtype=np.int64)
    for level in range(1, layout.levels + 1):
        first = layout.offsets[level] + j * f
        partial = np.zeros_like(x)
        chosen = np.full(x.shape[0], -1, dtype=np.int64)
        last_nonzero = np.zeros(x.shape[0], dtype=np.int64)
        for c in range(f):
            v = tree[first + c]
            last_nonzero = np.where(v > 0.0, c, last_nonzero)
            open_ = chosen < 0
            nxt = partial + v
            hit = open_ & (nxt > x)
            chosen = np.where(hit, c, chosen)
            partial = np.where(open_ & ~hit, nxt, partial)
        missed = chosen < 0
        chosen = np.where(missed, last_nonzero, chosen)
        x = np.where(missed, np.inf, x - partial)
        j = j * f + chosen
    return j


class EmulatedSumTree(SumTree):
    """The GPU tree's algorithm on the host: a :class:`SumTree` over a numpy copy of the device layout.

    Same host-side validation as :class:`pearl_cuda.sumtree.CudaSumTree` (the
    core's ``check_*`` helpers) before any state changes.
    """

    def __init__(self, capacity: int, fanout: int = 16):
        self.layout = TreeLayout.build(capacity, fanout)
        self.capacity, self.fanout = self.layout.capacity, self.layout.fanout
        self.tree = np.zeros(self.layout.size, dtype=np.float64)

    def update(self, indices, priorities) -> None:
        idx = check_indices(indices, self.capacity)
        prio = check_priorities(priorities, idx.shape[0])
        if idx.size == 0:
            return
        win = claim_owners(idx, self.capacity)
        self.tree[self.layout.leaf_offset + idx[win]] = prio[win]
        recompute_levels(self.tree, self.layout, idx)

    def get(self, indices) -> np.ndarray:
        idx = check_indices(indices, self.capacity)
        return self.tree[self.layout.leaf_offset + idx].copy()

    def total(self) -> float:
        return float(self.tree[0])

    def sample(self, masses) -> np.ndarray:
        x = check_masses(masses, self.total())
        return descend(self.tree, self.layout, x)
