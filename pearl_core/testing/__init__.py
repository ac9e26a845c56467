"""Testing kit for PEARL backends: the reference sum tree, Hypothesis strategies and
the conformance suites a plugin subclasses:

* :class:`SumTreeConformance` — a backend's sum tree (``make_sum_tree``);
* :class:`DQNKernelConformance` — its ``"dqn_mlp"`` learner kernel (``learner_kernel``),
  against the torch DQN; :class:`DQNConvKernelConformance` — its ``"dqn_cnn"`` kernel, the same way;
* :class:`ActorCriticKernelConformance` — its ``"td3_mlp"`` and ``"sac_mlp"`` learner kernels,
  against the torch TD3, DDPG and SAC;
* :class:`TransportConformance` — its LAQ/LDQ queue (``make_transport``);
* :class:`StorageConformance` — its device-resident Data Storage (``make_storage``),
  against the host :class:`~pearl_core.replay.storage.DataStorage`.

``pytest`` and ``hypothesis`` are needed to import the suites
(``pip install pearl-core[test]``); the reference tree needs only numpy.
"""

from pearl_core.testing.reference import ReferenceSumTree

__all__ = ["ActorCriticKernelConformance", "DQNConvKernelConformance", "DQNKernelConformance", "ReferenceSumTree",
           "StorageConformance", "SumTreeConformance", "TransportConformance", "strategies"]


def __getattr__(name):
    # Import lazily so that `pearl_core.testing.ReferenceSumTree` needs neither
    # pytest nor hypothesis (nor torch, which the kernel suite's reference runs on).
    if name == "SumTreeConformance":
        from pearl_core.testing.conformance import SumTreeConformance

        return SumTreeConformance
    if name == "ActorCriticKernelConformance":
        from pearl_core.testing.ac_kernels import ActorCriticKernelConformance

        return ActorCriticKernelConformance
    if name in ("DQNKernelConformance", "DQNConvKernelConformance"):
        from pearl_core.testing import learner_kernels

        return getattr(learner_kernels, name)
    if name == "TransportConformance":
        from pearl_core.testing.transports import TransportConformance

        return TransportConformance
    if name == "StorageConformance":
        from pearl_core.testing.storage import StorageConformance

        return StorageConformance
    if name == "strategies":
        import importlib

        return importlib.import_module("pearl_core.testing.strategies")
    raise AttributeError(f"module 'pearl_core.testing' has no attribute {name!r}")
