"""Imported once by the fork server the parallel runtime's workers start from
(:mod:`pearl_core.runtime.procs`): what every actor and learner needs, so that a
forked worker finds it loaded. Besides imports it asks the CPU backend for its
native DQN step once, so the backend's scan of numpy's BLAS is inherited by
every forked worker."""

import gymnasium  # noqa: F401
import numpy  # noqa: F401
import torch

try:  # torch's optimizers import torch._dynamo on first use; absent or broken: load on demand
    import torch._dynamo
except Exception:  # noqa: BLE001 - any failure importing it only defers the import to first use
    pass

import pearl_core.algorithms
import pearl_core.replay
import pearl_core.runtime.actors
import pearl_core.runtime.learner  # noqa: F401
from pearl_core.plugins import kernel_lookup, reset_default_registry

kernel_lookup("cpu")("dqn_mlp")  # the backend's BLAS scan, cached in this process, inherited by every worker
# ... but not the plugin registry that lookup built: a worker discovers plugins as of its own start
# (the fork server outlives runs, and plugins may be installed in between).

reset_default_registry()

del torch
