"""The pipelined sum tree: host side of ``kernels/sumtree.cl`` (one kernel per tree level).

Layout (pearl-notes §3.3): ``D`` levels below the root, ``K**D >= capacity``;
level ``l`` (1..D) has ``ceil(capacity / K**(D-l))`` nodes in its own device
buffer, node ``j`` of level ``l`` has children ``j*K .. j*K+K-1`` of level
``l+1`` (level-local indexing), and level ``D`` holds the leaves. The root sum
is kept on the host, as in the authors' design.

Per batched call the host does what the FPGA design's producer kernel does:
validate (the shared checks of :mod:`pearl_core.sumtree`, before any device
work, so rejected input changes nothing), build the request packets, enqueue
the level kernels in pipeline order on an in-order queue, read the results.

* ``update``: the last value per index wins (sort + de-duplicate on the host),
  then packets flow leaves -> root; each level writes its nodes and sends the
  re-computed parent sums up. 2 uploads, ``D`` launches, 1 read of the root.
* ``sample``: packets ``{node, mass}`` flow root -> leaves. 1 upload, ``D``
  launches, 1 read.
* ``get``: the leaf level answers. 1 upload, 1 launch, 1 read.
"""

from __future__ import annotations

import numpy as np

from pearl_core.sdk import SumTree, check_capacity_fanout, check_indices, check_masses, check_priorities

from pearl_fpga.runtime import Runtime, kernel_source

__all__ = ["PipelinedSumTree", "SAMPLE_PKT", "UPDATE_PKT", "tree_levels"]

SAMPLE_PKT = np.dtype([("node", "<i8"), ("mass", "<f8")])
UPDATE_PKT = np.dtype([("node", "<i8"), ("value", "<f8")])


def tree_levels(capacity: int, fanout: int) -> int:
    """``D``: levels below the root, the least ``D >= 1`` with ``fanout**D >= capacity``."""
    levels, span = 1, fanout
    while span < capacity:
        levels += 1
        span *= fanout
    return levels


class _Scratch:
    """A device buffer that grows (doubling) to the largest request seen."""

    def __init__(self, rt: Runtime, nbytes: int = 1024):
        self.rt, self.nbytes = rt, nbytes
        self.buf = rt.alloc(nbytes)

    def at_least(self, nbytes: int):
        if nbytes > self.nbytes:
            self.nbytes = max(nbytes, 2 * self.nbytes)
            self.buf = self.rt.alloc(self.nbytes)
        return self.buf


class PipelinedSumTree(SumTree):
    """A :class:`~pearl_core.sumtree.SumTree` whose levels are kernels on an OpenCL device.

    Args:
        capacity: number of leaves (``>= 1``).
        fanout: children per node (``>= 2``).
        runtime: where the kernels run (default: the FPGA Emulation Device, else the
            OpenCL CPU device; see :mod:`pearl_fpga.runtime`).
    """

    def __init__(self, capacity: int, fanout: int = 16, runtime: Runtime | None = None):
        self.capacity, self.fanout = check_capacity_fanout(capacity, fanout)
        if runtime is None:
            from pearl_fpga.runtime import DpctlRuntime

            runtime = DpctlRuntime.default()
        self.runtime = rt = runtime
        self.levels = tree_levels(self.capacity, self.fanout)
        d, k = self.levels, self.fanout
        self.widths = tuple(-(-self.capacity // k ** (d - lvl)) for lvl in range(1, d + 1))
        src = kernel_source("sumtree.cl")
        self._k_init = rt.kernel(src, "rm_level_init")
        self._k_sample = rt.kernel(src, "rm_sample_level")
        self._k_update = rt.kernel(src, "rm_update_level")
        self._k_get = rt.kernel(src, "rm_get_leaf")
        self._level_bufs = []
        for width in self.widths:  # the init packet: every level zeroes its own buffer
            buf = rt.alloc(8 * width)
            rt.launch(self._k_init, [width], [buf, np.int64(width)])
            self._level_bufs.append(buf)
        self._pkts = _Scratch(rt)
        self._segs = _Scratch(rt)
        self._out = _Scratch(rt)
        self._root_buf = rt.alloc(UPDATE_PKT.itemsize)
        self._root = 0.0
        rt.finish()

    # ------------------------------------------------------------------ contract
    def total(self) -> float:
        return self._root

    def update(self, indices, priorities) -> None:
        idx = check_indices(indices, self.capacity)
        prio = check_priorities(priorities, idx.shape[0])
        if idx.size == 0:
            return
        # Last value wins: unique over the reversed batch keeps each index's last occurrence.
        nodes, first = np.unique(idx[::-1], return_index=True)
        values = prio[::-1][first]
        # Per-level packet segments (the host's share of the paper's "per-level index").
        k, d = self.fanout, self.levels
        counts, segs = [], []
        level_nodes = nodes
        for _ in range(d):
            parents = level_nodes // k
            starts = np.flatnonzero(np.r_[True, parents[1:] != parents[:-1]])
            counts.append(level_nodes.size)
            segs.append(np.r_[starts, level_nodes.size].astype(np.int64))
            level_nodes = parents[starts]
        pkt_offsets = np.r_[0, np.cumsum(counts)].astype(np.int64)       # level D first, then D-1, ...
        seg_offsets = np.r_[0, np.cumsum([s.size for s in segs])].astype(np.int64)
        leaf_pkts = np.empty(nodes.size, UPDATE_PKT)
        leaf_pkts["node"], leaf_pkts["value"] = nodes, values
        rt = self.runtime
        pkts = self._pkts.at_least(int(pkt_offsets[-1]) * UPDATE_PKT.itemsize)
        seg_buf = self._segs.at_least(int(seg_offsets[-1]) * 8)
        rt.write(pkts, leaf_pkts)
        rt.write(seg_buf, np.concatenate(segs))
        for step in range(d):  # leaves (level D) up to level 1; level 1 sends the root packet
            lvl = d - step
            groups = segs[step].size - 1
            last = step == d - 1
            rt.launch(self._k_update, [groups], [
                self._level_bufs[lvl - 1], np.int64(self.widths[lvl - 1]), np.int64(k),
                pkts, np.int64(pkt_offsets[step]), seg_buf, np.int64(seg_offsets[step]),
                self._root_buf if last else pkts, np.int64(0 if last else pkt_offsets[step + 1]),
                np.int64(groups)])
        root = rt.read(self._root_buf, np.empty(1, UPDATE_PKT))
        self._root = float(root["value"][0])

    def get(self, indices) -> np.ndarray:
        idx = check_indices(indices, self.capacity)
        out = np.empty(idx.size, np.float64)
        if idx.size:
            rt = self.runtime
            ibuf = self._pkts.at_least(idx.nbytes)
            obuf = self._out.at_least(out.nbytes)
            rt.write(ibuf, idx)
            rt.launch(self._k_get, [idx.size], [self._level_bufs[-1], ibuf, obuf, np.int64(idx.size)])
            rt.read(obuf, out)
        return out

    def sample(self, masses) -> np.ndarray:
        x = check_masses(masses, self.total())
        n = x.size
        if n == 0:
            return np.empty(0, np.int64)
        pkts = np.zeros(n, SAMPLE_PKT)
        pkts["mass"] = x
        rt = self.runtime
        buf = self._pkts.at_least(pkts.nbytes)
        rt.write(buf, pkts)
        for lvl in range(1, self.levels + 1):  # root -> leaves
            scale = 1 if lvl == self.levels else self.fanout
            rt.launch(self._k_sample, [n], [self._level_bufs[lvl - 1], np.int64(self.widths[lvl - 1]),
                                            np.int64(self.fanout), np.int64(scale), buf, np.int64(n)])
        rt.read(buf, pkts)
        return pkts["node"].astype(np.int64, copy=True)

    def __repr__(self) -> str:
        return (f"PipelinedSumTree(capacity={self.capacity}, fanout={self.fanout}, levels={self.levels}, "
                f"device={self.runtime.description!r})")
