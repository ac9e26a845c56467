"""Which built-in trainer a run gets when the user names none, and how it takes hidden sizes.

The composer (``workload_for_env``), ``pearl plan`` and ``pearl compose`` all
ask here, so the choice is written once: the built-in :class:`DQN` for
``Discrete`` action spaces, :class:`DDPG` for every other (``Box``) one.
"""

from __future__ import annotations

from typing import Any, Sequence

from pearl_core.algorithms.ddpg import DDPG
from pearl_core.algorithms.dqn import DQN
from pearl_core.algorithms.sac import SAC
from pearl_core.algorithms.td3 import TD3

__all__ = ["default_trainer", "hidden_kwargs"]


def default_trainer(action_space: Any) -> type:
    """:class:`DQN` for a ``gymnasium.spaces.Discrete`` action space, :class:`DDPG` otherwise."""
    import gymnasium.spaces as spaces

    return DQN if isinstance(action_space, spaces.Discrete) else DDPG


def hidden_kwargs(trainer: type, sizes: Sequence[int]) -> dict[str, Any]:
    """The constructor keywords that give ``trainer``'s networks these hidden sizes.

    ``actor_hidden`` and ``critic_hidden`` for the built-in actor-critics DDPG,
    TD3 and SAC (and their subclasses), ``hidden_sizes`` for every other trainer.
    """
    if isinstance(trainer, type) and issubclass(trainer, (DDPG, TD3, SAC)):
        return {"actor_hidden": sizes, "critic_hidden": sizes}
    return {"hidden_sizes": sizes}
