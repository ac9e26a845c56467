"""The example's backend: a pretend accelerator of kind ``numpy`` (device ``numpy0``, ``"numpy:0"``).

Its "device" is numpy on the host; everything else is what a real accelerator's
plugin provides: a sum tree, a learner kernel (torch does not run on the kind),
a Data Storage, a transport, a cost model and measurements.
"""

from pearl_core.errors import InvalidOptionError
from pearl_core.sdk import Availability, Backend, DeviceInfo

from pearl_example_numpy.sumtree import TwoLevelSumTree


class NumpyExampleBackend(Backend):
    name = "numpy-example"
    device_kind = "numpy"
    torch_device_type = None  # a learner on "numpy:0" keeps torch on the CPU and runs learner_kernel("dqn_mlp")
    max_fanout = None  # any fanout >= 2

    def availability(self):
        try:
            import numpy  # noqa: F401 - a real plugin imports its device library here, and says why it failed
        except ImportError as exc:
            return Availability.no(f"numpy cannot be imported ({exc}); fix: pip install numpy")
        return Availability.yes()

    def devices(self):
        return [DeviceInfo("numpy0", self.device_kind, self.name, "numpy on the host (a pretend accelerator)")]

    def make_sum_tree(self, capacity, fanout=16, **options):
        """A :class:`TwoLevelSumTree`; the runtime's ``threads=`` and ``device=`` are accepted and ignored."""
        unknown = sorted(set(options) - {"threads", "device"})
        if unknown:
            raise InvalidOptionError(f"backend 'numpy-example': unknown sum-tree options {unknown}; expected only "
                                     "'threads' and 'device'. Fix: drop them.")
        return TwoLevelSumTree(capacity, fanout)

    def learner_kernel(self, name):
        if name == "dqn_mlp":
            from pearl_example_numpy.learner import dqn_mlp

            return dqn_mlp
        return None

    def make_storage(self, spec, capacity, device, **options):
        if options:
            raise InvalidOptionError(f"backend 'numpy-example': unknown storage options {sorted(options)}; it takes "
                                     "none. Fix: drop them.")
        from pearl_example_numpy.storage import NumpyStorage

        return NumpyStorage(spec, capacity, device)

    def make_transport(self, role, maxsize, ctx):
        from pearl_example_numpy.transport import CountingQueue

        return CountingQueue(role, maxsize, ctx)

    def analytic_cells(self, device, workload):
        from pearl_example_numpy.costs import device_row

        return device_row(device, workload)

    def measure_primitive(self, device, workload, request):
        from pearl_example_numpy.measure import measure

        return measure(workload, request)
