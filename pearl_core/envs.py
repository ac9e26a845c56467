"""Environments by id: the one place PEARL calls ``gymnasium.make``.

Actors, the learner, the evaluator, the composer's workload model and the
profiler all build their environments here, so an unknown id, a missing
dependency or a broken constructor reads the same wherever it is found.
"""

from __future__ import annotations

import difflib
from typing import Any

from pearl_core.errors import SpecError

__all__ = ["env_spaces", "make_env"]


def make_env(env_id: str, seed: int | None = None, **kwargs: Any):
    """``gymnasium.make(env_id, **kwargs)`` with its action and observation spaces seeded.

    The environment is not reset; reset it with ``seed`` (the runtime's
    collector and evaluator do) so its dynamics are seeded too.

    Raises:
        SpecError: gymnasium is not installed, ``env_id`` is not registered
            (close registered ids are listed), the environment needs a package
            that is not installed, or its constructor failed.
    """
    try:
        import gymnasium as gym
    except ImportError as exc:  # pragma: no cover - the rl extra is installed in dev
        raise SpecError("environments need gymnasium, which is not installed. "
                        "Fix: pip install 'pearl-core[rl]'.") from exc
    if not isinstance(env_id, str) or env_id not in gym.registry:
        close = difflib.get_close_matches(str(env_id), list(gym.registry), n=5, cutoff=0.5)
        hint = f"Close matches: {close}." if close else \
            "Fix: use a registered id such as 'CartPole-v1' (gymnasium.pprint_registry() lists them)."
        raise SpecError(f"environment {env_id!r} cannot be created: {env_id!r} is not a registered gymnasium "
                        f"environment id. {hint} If a package registers it, import that package first.")
    try:
        env = gym.make(env_id, **kwargs)
    except gym.error.DependencyNotInstalled as exc:
        raise SpecError(f"environment {env_id!r} cannot be created: it needs a package that is not installed "
                        f"({exc}). Fix: install that package (see the message) or choose another id.") from exc
    except Exception as exc:  # noqa: BLE001 - environment constructors raise any type
        raise SpecError(f"environment {env_id!r} cannot be created ({type(exc).__name__}: {exc}). "
                        "Fix: check its keyword arguments and dependencies, or choose another id.") from exc
    if seed is not None:
        env.action_space.seed(int(seed))
        env.observation_space.seed(int(seed))
    return env


def env_spaces(env_id: str) -> tuple[Any, Any]:
    """``(observation_space, action_space)`` of ``env_id``; the environment is built and closed.

    Raises:
        SpecError: as :func:`make_env`.
    """
    env = make_env(env_id)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()
