"""Built-in trainers implementing :class:`pearl_core.trainer.Trainer`.

* :class:`DQN` — ``Discrete`` actions: target network, double-DQN option,
  importance-weighted Huber loss, ε-greedy schedule; defaults mirror
  stable-baselines3's tuned CartPole-v1 DQN (see :mod:`pearl_core.algorithms.dqn`).
* :class:`DDPG` — ``Box`` actions: tanh actor scaled to the bounds, Polyak
  targets, Gaussian exploration clipped into the Box.

Both return one TD error per sample from ``update_policy``. In a run config
they are named ``"pearl_core.algorithms:DQN"`` / ``"pearl_core.algorithms:DDPG"``.
:func:`default_trainer` picks one for an action space (what a run gets when the
user names no trainer).

Native learner steps come from the caller, never from a backend looked up by
name: ``DQN(..., learner_kernels=lookup)`` takes a function ``name -> kernel
factory or None`` (the runtime passes :func:`pearl_core.plugins.kernel_lookup`
for the plan's learner device). This package imports no plugin machinery.
"""

from pearl_core.algorithms.ddpg import DDPG
from pearl_core.algorithms.defaults import default_trainer, hidden_kwargs
from pearl_core.algorithms.dqn import DQN

__all__ = ["DDPG", "DQN", "default_trainer", "hidden_kwargs"]
