import pearl_core
from pearl_core.testing import DQNKernelConformance, StorageConformance, SumTreeConformance, TransportConformance


class TestSumTree(SumTreeConformance):
    backend_name = "numpy-example"


class TestLearnerKernel(DQNKernelConformance):
    def kernel_factory(self):
        return pearl_core.get_backend("numpy-example").learner_kernel("dqn_mlp")


class TestTransport(TransportConformance):
    def make_queue(self, maxsize, ctx):
        return pearl_core.get_backend("numpy-example").make_transport("laq", maxsize, ctx)


class TestStorage(StorageConformance):
    device = "numpy:0"

    def make_storage(self, spec, capacity):
        return pearl_core.get_backend("numpy-example").make_storage(spec, capacity, "numpy:0")
