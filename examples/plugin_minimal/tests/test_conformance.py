import pearl_core
from pearl_core.testing import SumTreeConformance


class TestNumpyExampleConformance(SumTreeConformance):
    def make_tree(self, capacity, fanout):
        return pearl_core.get_backend("numpy-example").make_sum_tree(capacity, fanout)
