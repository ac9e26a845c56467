"""The example's replay-manager kernel: a two-level n-ary sum tree in numpy."""

import numpy as np

from pearl_core.sdk import SumTree, check_capacity_fanout, check_indices, check_masses, check_priorities


class TwoLevelSumTree(SumTree):
    """Leaves in blocks of `fanout`, one sum per block: a two-level n-ary tree."""

    def __init__(self, capacity, fanout=16):
        self.capacity, self.fanout = check_capacity_fanout(capacity, fanout)
        n_blocks = -(-self.capacity // self.fanout)
        self._leaves = np.zeros((n_blocks, self.fanout))
        self._sums = np.zeros(n_blocks)

    def update(self, indices, priorities):
        idx = check_indices(indices, self.capacity)  # validate everything first:
        prio = check_priorities(priorities, len(idx))  # a bad call changes nothing
        _, last_rev = np.unique(idx[::-1], return_index=True)
        keep = len(idx) - 1 - last_rev  # position of each index's last occurrence
        self._leaves.reshape(-1)[idx[keep]] = prio[keep]
        blocks = np.unique(idx // self.fanout)
        self._sums[blocks] = self._leaves[blocks].sum(axis=1)

    def get(self, indices):
        return self._leaves.reshape(-1)[check_indices(indices, self.capacity)].copy()

    def total(self):
        return float(self._sums.sum())

    def sample(self, masses):
        x = check_masses(masses, self.total())
        cum = np.cumsum(self._sums)
        block = np.minimum(np.searchsorted(cum, x, side="right"), len(cum) - 1)
        rest = np.maximum(x - (cum[block] - self._sums[block]), 0.0)
        inner = np.cumsum(self._leaves[block], axis=1)
        leaf = (inner <= rest[:, None]).sum(axis=1)  # first leaf whose prefix exceeds rest
        out = block * self.fanout + np.minimum(leaf, self.fanout - 1)
        drift = (x >= cum[-1]) | (leaf >= self.fanout)
        out[drift] = np.flatnonzero(self._leaves.reshape(-1))[-1]  # clamp: last non-zero leaf
        return out.astype(np.int64)
