"""Testing kit for PEARL backends: the reference sum tree, Hypothesis strategies
and the :class:`SumTreeConformance` suite a plugin subclasses.

``pytest`` and ``hypothesis`` are needed to import the conformance suite
(``pip install pearl-core[test]``); the reference tree needs only numpy.
"""

from pearl_core.testing.reference import ReferenceSumTree

__all__ = ["ReferenceSumTree", "SumTreeConformance", "strategies"]


def __getattr__(name):
    # Import lazily so that `pearl_core.testing.ReferenceSumTree` needs neither
    # pytest nor hypothesis.
    if name == "SumTreeConformance":
        from pearl_core.testing.conformance import SumTreeConformance

        return SumTreeConformance
    if name == "strategies":
        import importlib

        return importlib.import_module("pearl_core.testing.strategies")
    raise AttributeError(f"module 'pearl_core.testing' has no attribute {name!r}")
