"""The GPU kernels' algorithm, emulated in numpy, through the conformance kit (runs anywhere)."""

import numpy as np
import pytest

from pearl_core.testing import ReferenceSumTree, SumTreeConformance
from pearl_cuda.emulation import EmulatedSumTree, claim_owners
from pearl_cuda.layout import TreeLayout


class TestEmulatedKernels(SumTreeConformance):
    def make_tree(self, capacity, fanout):
        return EmulatedSumTree(capacity, fanout)


@pytest.mark.parametrize("capacity,fanout", [(1, 2), (2, 2), (3, 2), (16, 16), (17, 16), (2**20, 16), (1000, 7)])
def test_layout_shapes(capacity, fanout):
    lay = TreeLayout.build(capacity, fanout)
    assert fanout ** lay.levels >= capacity and (lay.levels == 1 or fanout ** (lay.levels - 1) < capacity)
    assert lay.nodes[0] == 1 and lay.nodes[-1] == capacity
    assert all(o % fanout == 0 for o in lay.offsets)  # every sibling group aligned
    for lvl in range(lay.levels):  # children of the last node of each level fit in the next level's slots
        assert lay.children_slots(lvl, lay.nodes[lvl] - 1).stop <= (
            lay.offsets[lvl + 2] if lvl + 2 <= lay.levels else lay.size)
    assert lay.ancestor(capacity - 1, 0) == 0


def test_layout_of_the_benchmark_tree():
    lay = TreeLayout.build(2**20, 16)
    assert lay.levels == 5 and lay.leaf_offset % 16 == 0
    assert lay.size == 16 + 16 + 256 + 4096 + 65536 + 2**20
    assert lay.bytes < 13 * 2**20  # ~8.6 MiB tree + 4 MiB scratch


def test_claim_is_last_wins():
    idx = np.array([3, 1, 3, 3, 0, 1])
    assert claim_owners(idx, 4).tolist() == [False, False, False, True, True, True]


def test_internal_nodes_are_exact_sums_of_children():
    rng = np.random.default_rng(0)
    tree = EmulatedSumTree(1000, 7)
    for _ in range(20):
        idx = rng.integers(0, 1000, 300)
        tree.update(idx, rng.random(300))
    lay = tree.layout
    for lvl in range(lay.levels):
        for j in range(lay.nodes[lvl]):
            kids = tree.tree[list(lay.children_slots(lvl, j))]
            s = 0.0
            for v in kids:
                s += v
            assert tree.tree[lay.offsets[lvl] + j] == s


def test_history_independent():
    """A node is a function of the leaves only: two update orders give bit-identical trees."""
    rng = np.random.default_rng(1)
    p = rng.random(500) * 10
    a, b = EmulatedSumTree(500, 4), EmulatedSumTree(500, 4)
    a.update(np.arange(500), p)
    for chunk in np.array_split(rng.permutation(500), 7):
        b.update(chunk, rng.random(chunk.size))
        b.update(chunk, p[chunk])
    np.testing.assert_array_equal(a.tree, b.tree)


def test_large_batch_matches_reference_exactly_on_integers():
    rng = np.random.default_rng(2)
    tree, ref = EmulatedSumTree(65_539, 16), ReferenceSumTree(65_539, 16)
    idx = rng.integers(0, 65_539, 4096)
    prio = rng.integers(0, 5, 4096).astype(np.float64)
    tree.update(idx, prio), ref.update(idx, prio)
    x = rng.integers(0, int(ref.total()), 4096).astype(np.float64)
    np.testing.assert_array_equal(tree.sample(x), ref.sample(x))
