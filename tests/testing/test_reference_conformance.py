"""The conformance suite run on the reference tree itself: proves the kit is self-consistent.

(It cannot prove the reference right; tests/testing/test_reference.py checks it by hand.)
"""

from pearl_core.testing import ReferenceSumTree, SumTreeConformance


class TestReferenceConformance(SumTreeConformance):
    def make_tree(self, capacity, fanout):
        return ReferenceSumTree(capacity, fanout)
