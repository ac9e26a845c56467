"""Imported once by the fork server the parallel runtime's workers start from
(:mod:`pearl_core.runtime.procs`): what every actor and learner needs, so that a
forked worker finds it loaded. Besides imports it looks up the CPU plugin's
native DQN step once (plugin discovery and a BLAS scan, ~30 ms), which every
worker building a DQN would otherwise repeat."""

import gymnasium  # noqa: F401
import numpy  # noqa: F401
import torch

try:  # torch's optimizers import torch._dynamo on first use (~1.3 s); absent or broken: load on demand
    import torch._dynamo  # noqa: F401
except Exception:  # noqa: BLE001
    pass

import pearl_core.algorithms  # noqa: F401,E402
from pearl_core.algorithms.mlp_engine import native_factory  # noqa: E402
import pearl_core.replay  # noqa: F401,E402
import pearl_core.runtime.actors  # noqa: F401,E402
import pearl_core.runtime.learner  # noqa: F401,E402

native_factory()  # cached in this process, inherited by every forked worker
# ... but not the plugin registry that lookup built: a worker discovers plugins as of its own start
# (the fork server outlives runs, and plugins may be installed in between).
from pearl_core.plugins import reset_default_registry  # noqa: E402

reset_default_registry()

del torch
