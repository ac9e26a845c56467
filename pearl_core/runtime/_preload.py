"""Imported once by the fork server the parallel runtime's workers start from
(:mod:`pearl_core.runtime.procs`): what every actor and learner needs, so that a
forked worker finds it loaded. Importing is all this module does."""

import gymnasium  # noqa: F401
import numpy  # noqa: F401
import torch

try:  # torch's optimizers import torch._dynamo on first use (~1.3 s); absent or broken: load on demand
    import torch._dynamo  # noqa: F401
except Exception:  # noqa: BLE001
    pass

import pearl_core.algorithms  # noqa: F401,E402
import pearl_core.replay  # noqa: F401,E402
import pearl_core.runtime.actors  # noqa: F401,E402
import pearl_core.runtime.learner  # noqa: F401,E402

del torch
