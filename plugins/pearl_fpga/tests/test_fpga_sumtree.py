"""The pipelined sum tree through the same conformance kit as every backend, on the emulation device.

Found through its entry point like any plugin. CI installs ``pearl-fpga[emulator]``, so
these tests run (never skip) there; without the extra they fail with the backend's reason.
"""

import pearl_core
from pearl_core.testing import SumTreeConformance


class TestFpgaPipelinedTree(SumTreeConformance):
    def make_tree(self, capacity, fanout):
        return pearl_core.get_backend("fpga").make_sum_tree(capacity, fanout)
