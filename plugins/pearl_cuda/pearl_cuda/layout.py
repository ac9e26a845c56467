"""Index math of the GPU sum tree's memory layout (pure Python, no device).

The kernels (``kernels/sumtree.cu``) and the numpy emulation
(:mod:`pearl_cuda.emulation`) both take their offsets from here, so one piece of
code decides where every node lives::

    level 0 (root)   [ r  0  0 ... 0 ]                       F slots (padded)
    level 1          [ c0 c1 ... c(F-1) ]                     n_0 * F slots
    ...
    level L (leaves) [ p0 p1 ... p(capacity-1) 0 ... 0 ]     n_(L-1) * F slots

``n_L = capacity``, ``n_l = ceil(n_(l+1) / F)``; ``L`` is the smallest ``L >= 1``
with ``F**L >= capacity`` (the same depth as
:attr:`pearl_core.composer.workload.Workload.tree_levels`). Node ``j`` of level
``l`` owns slots ``off[l+1] + j*F ... + F-1`` of level ``l+1``; leaf ``i``'s
ancestor at level ``l`` is ``i // F**(L-l)`` (``spans[l]``). Every level starts
on a multiple of ``F``, and padding slots stay ``0.0``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pearl_core.sdk import check_capacity_fanout

__all__ = ["TreeLayout"]


@dataclass(frozen=True)
class TreeLayout:
    """Where the nodes of a ``capacity``-leaf, ``fanout``-ary tree live in one flat array.

    Attributes:
        capacity, fanout: the tree's.
        levels: ``L``, levels below the root.
        nodes: ``nodes[l]`` = real nodes of level ``l`` (``nodes[L] = capacity``).
        offsets: ``offsets[l]`` = first slot of level ``l`` (``len = L + 1``).
        spans: ``spans[l] = fanout ** (L - l)`` leaves under one node of level ``l`` (``len = L``).
        size: slots of the whole array (float64 each).
    """

    capacity: int
    fanout: int
    levels: int
    nodes: tuple[int, ...]
    offsets: tuple[int, ...]
    spans: tuple[int, ...]
    size: int

    @classmethod
    def build(cls, capacity: int, fanout: int) -> "TreeLayout":
        capacity, fanout = check_capacity_fanout(capacity, fanout)
        levels, reach = 1, fanout
        while reach < capacity:
            levels, reach = levels + 1, reach * fanout
        nodes = [capacity]
        for _ in range(levels):
            nodes.append(-(-nodes[-1] // fanout))
        nodes.reverse()  # nodes[0] == 1 (the root)
        assert nodes[0] == 1, nodes
        # Slots per level: the root's level padded to F, level l+1 to n_l * F.
        slots = [fanout] + [nodes[lvl] * fanout for lvl in range(levels)]
        offsets, pos = [], 0
        for s in slots:
            offsets.append(pos)
            pos += s
        spans = tuple(fanout ** (levels - lvl) for lvl in range(levels))
        return cls(capacity, fanout, levels, tuple(nodes), tuple(offsets), spans, pos)

    @property
    def leaf_offset(self) -> int:
        return self.offsets[self.levels]

    @property
    def bytes(self) -> int:
        """Device memory of the tree (float64 slots) plus the int32 dedupe scratch."""
        return 8 * self.size + 4 * self.capacity

    def ancestor(self, leaf: int, level: int) -> int:
        """Index within level ``level`` of the ancestor of leaf ``leaf``."""
        return leaf // self.spans[level] if level < self.levels else leaf

    def children_slots(self, level: int, node: int) -> range:
        """Array slots of the ``fanout`` children of node ``node`` of level ``level`` (< L)."""
        first = self.offsets[level + 1] + node * self.fanout
        return range(first, first + self.fanout)
