"""The CPU backend through the conformance kit, found via its entry point like any plugin.

Run with one thread and with all cores (the large-batch tests take the threaded paths).
"""

import os

import pearl_core
from pearl_core.testing import SumTreeConformance


class TestCpuSingleThread(SumTreeConformance):
    def make_tree(self, capacity, fanout):
        return pearl_core.get_backend("cpu").make_sum_tree(capacity, fanout, threads=1)


class TestCpuAllThreads(SumTreeConformance):
    def make_tree(self, capacity, fanout):
        return pearl_core.get_backend("cpu").make_sum_tree(capacity, fanout, threads=max(2, os.cpu_count() or 2))
