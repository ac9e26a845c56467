"""Built-in trainers implementing :class:`pearl_core.trainer.Trainer`.

* :class:`DQN` — ``Discrete`` actions: target network, double-DQN option,
  importance-weighted Huber loss, ε-greedy schedule; defaults mirror
  stable-baselines3's tuned CartPole-v1 DQN (see :mod:`pearl_core.algorithms.dqn`).
* :class:`DDPG` — ``Box`` actions: tanh actor scaled to the bounds, Polyak
  targets, Gaussian exploration clipped into the Box.
* :class:`TD3` — ``Box`` actions: DDPG with twin critics, target policy
  smoothing and delayed actor/target updates (see :mod:`pearl_core.algorithms.td3`).
* :class:`SAC` — ``Box`` actions: squashed Gaussian actor, twin soft critics
  with Polyak targets, automatic entropy tuning (see :mod:`pearl_core.algorithms.sac`).

All return one TD error per sample from ``update_policy``. In a run config
they are named ``"pearl_core.algorithms:DQN"``, ``"pearl_core.algorithms:DDPG"``,
``"pearl_core.algorithms:TD3"`` and ``"pearl_core.algorithms:SAC"``; TD3 and SAC
default to rl-baselines3-zoo's Pendulum-v1 settings. :func:`default_trainer`
picks DQN or DDPG for an action space (what a run gets when the user names no
trainer).

Native learner steps come from the caller, never from a backend looked up by
name: ``DQN(..., learner_kernels=lookup)`` takes a function ``name -> kernel
factory or None`` (the runtime passes :func:`pearl_core.plugins.kernel_lookup`
for the plan's learner device). This package imports no plugin machinery.
"""

from pearl_core.algorithms.ddpg import DDPG
from pearl_core.algorithms.defaults import default_trainer, hidden_kwargs
from pearl_core.algorithms.dqn import DQN
from pearl_core.algorithms.sac import SAC
from pearl_core.algorithms.td3 import TD3

__all__ = ["DDPG", "DQN", "SAC", "TD3", "default_trainer", "hidden_kwargs"]
