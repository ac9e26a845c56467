"""A PEARL backend plugin for a pretend accelerator of kind ``numpy``, written as a third party would.

``stats()`` and ``reset_stats()`` read and zero the usage counters (:mod:`pearl_example_numpy.counters`).
"""

from pearl_example_numpy.counters import reset_stats, stats

__all__ = ["reset_stats", "stats"]
