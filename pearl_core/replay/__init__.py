"""Replay: Data Storage (experiences) and replay managers (which slots to train on).

The pieces compose; none subclasses another::

    from pearl_core.replay import DataStorage, PrioritizedReplay, StorageSpec

    spec = StorageSpec.from_spaces(env.observation_space, env.action_space)
    storage = DataStorage(spec, capacity=2**20)
    replay = PrioritizedReplay(storage, tree=backend.make_sum_tree(2**20, fanout=16))

    replay.add(obs, action, reward, next_obs, done)        # batches from the actors
    sampled = replay.sample(256)                           # SampledBatch
    td = learner.step(sampled.batch, sampled.weights)      # per-sample TD errors
    replay.update_priorities(sampled.indices, td)

:class:`UniformReplay` has the same surface and no tree.
"""

from pearl_core.replay.base import ReplayManager, SampledBatch, UniformReplay
from pearl_core.replay.prioritized import PrioritizedReplay
from pearl_core.replay.storage import Batch, DataStorage, StorageSpec

__all__ = [
    "Batch",
    "DataStorage",
    "PrioritizedReplay",
    "ReplayManager",
    "SampledBatch",
    "StorageSpec",
    "UniformReplay",
]
