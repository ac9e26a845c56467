"""Built-in trainers implementing :class:`pearl_core.trainer.Trainer`.

* :class:`DQN` — ``Discrete`` actions: target network, double-DQN option,
  importance-weighted Huber loss, ε-greedy schedule; defaults mirror
  stable-baselines3's tuned CartPole-v1 DQN (see :mod:`pearl_core.algorithms.dqn`).
* :class:`DDPG` — ``Box`` actions: tanh actor scaled to the bounds, Polyak
  targets, Gaussian exploration clipped into the Box.

Both return one TD error per sample from ``update_policy``. In a run config
they are named ``"pearl_core.algorithms:DQN"`` / ``"pearl_core.algorithms:DDPG"``.
"""

from pearl_core.algorithms.ddpg import DDPG
from pearl_core.algorithms.dqn import DQN

__all__ = ["DDPG", "DQN"]
