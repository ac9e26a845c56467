"""The runtime: actors, learner, replay and the host protocol that connects them.

* :class:`SerialRuntime` — one process; the oracle the parallel runtime is tested against.
* :class:`ParallelRuntime` — actor processes, the host loop over DCQ/RRQ/LAQ/LDQ,
  setting 1 (RM and learner through the host) or 2 (co-located), chosen by the plan.
* :class:`RayRuntime` — the actors on a Ray cluster's nodes, replay and learner in the
  driver (optional: ``pip install "pearl-core[ray]"``).

* :func:`main` — what a generated program runs (:mod:`pearl_core.runtime.program`).

Each takes a :class:`RunConfig` (what to train) and a :class:`RuntimePlan` (where
and how) and return a :class:`~pearl_core.runtime.control.RunResult`.
"""

from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, Setting, StopCriteria

__all__ = ["ParallelRuntime", "main", "RayRuntime", "ReplayConfig", "RunConfig", "RuntimePlan", "SerialRuntime",
           "Setting", "StopCriteria"]


def __getattr__(name):
    # The runtimes import torch and gymnasium; load them only when asked for.
    if name == "SerialRuntime":
        from pearl_core.runtime.serial import SerialRuntime

        return SerialRuntime
    if name == "ParallelRuntime":
        from pearl_core.runtime.parallel import ParallelRuntime

        return ParallelRuntime
    if name == "RayRuntime":  # Ray itself is imported only when a run starts
        from pearl_core.runtime.rayrun import RayRuntime

        return RayRuntime
    if name == "main":  # a generated program's entry point (pearl_core.runtime.program)
        from pearl_core.runtime.program import main

        return main
    raise AttributeError(f"module 'pearl_core.runtime' has no attribute {name!r}")
