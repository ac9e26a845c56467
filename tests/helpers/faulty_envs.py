"""Test-only environments and trainers that misbehave on purpose (the fault-injection tests).

Importing this module registers the environments with gymnasium under the
``PearlFaulty/`` namespace. Worker processes import it through the trainer path
(``"faulty_envs:LinearQ"`` and the others below): the runtime imports a run's
trainer module before it builds the environments, so a worker knows these ids
too. pytest puts ``tests/helpers/`` on ``sys.path`` and the workers inherit it. This
module holds no tests.

Every environment is CartPole-v1 with one fault, counted in steps of the
environment instance (so each actor incarnation, and each evaluation environment,
counts on its own):

==============================  ========================================================
id                              fault
==============================  ========================================================
``PearlFaulty/NaNObs-v0``       the observation of step 40 holds a NaN
``PearlFaulty/NaNReward-v0``    the reward of step 40 is NaN
``PearlFaulty/SomeNaN-v0``      NaN rewards at steps 20, 70, 120, ... (for ``drop``)
``PearlFaulty/AlwaysNaN-v0``    every observation holds a NaN (a broken environment)
``PearlFaulty/RaiseInStep-v0``  step 40 raises ``RuntimeError``
``PearlFaulty/BlockInStep-v0``  step 40 blocks (sleeps an hour)
``PearlFaulty/RaiseInEval-v0``  step 5 raises, in evaluation episodes only
``PearlFaulty/BlockInEval-v0``  step 5 blocks for 20 s, in evaluation episodes only
==============================  ========================================================
"""

from __future__ import annotations

import math
import os
import time

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from pearl_core.runtime.acting import EVAL_SEED_OFFSET
from runtime_support import LinearQ

NAMESPACE = "PearlFaulty"


class FaultyCartPole(CartPoleEnv):
    """CartPole with one fault at instance step ``at`` (and every ``every`` steps after, if ``every``).

    Args:
        fault: ``"nan_obs"``, ``"nan_reward"``, ``"raise"`` or ``"block"``.
        at: the instance's step (1-based, over all its episodes) of the first fault.
        every: repeat the fault every ``every`` steps after ``at`` (``0``: once).
        eval_only: fault only in episodes reset with an evaluation seed.
        block_s: how long ``"block"`` sleeps.
    """

    def __init__(self, fault: str, at: int = 40, every: int = 0, eval_only: bool = False, block_s: float = 3600.0,
                 **kw):
        super().__init__(**kw)
        self.fault, self.at, self.every, self.eval_only, self.block_s = fault, at, every, eval_only, block_s
        self.count = 0
        self.in_eval = False

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.in_eval = seed >= EVAL_SEED_OFFSET
        return super().reset(seed=seed, options=options)

    def _due(self) -> bool:
        if self.eval_only and not self.in_eval:
            return False
        k = self.count - self.at
        return k == 0 or (self.every > 0 and k > 0 and k % self.every == 0)

    def step(self, action):
        self.count += 1
        obs, reward, terminated, truncated, info = super().step(action)
        if self._due():
            if self.fault == "nan_obs":
                obs = np.array(obs, dtype=np.float32)
                obs[2] = np.nan
            elif self.fault == "nan_reward":
                reward = math.nan
            elif self.fault == "raise":
                raise RuntimeError(f"FaultyCartPole: step {self.count} failed on purpose")
            elif self.fault == "block":
                time.sleep(self.block_s)
        return obs, reward, terminated, truncated, info


_ENVS = {
    "NaNObs-v0": {"fault": "nan_obs"},
    "NaNReward-v0": {"fault": "nan_reward"},
    "SomeNaN-v0": {"fault": "nan_reward", "at": 20, "every": 50},
    "AlwaysNaN-v0": {"fault": "nan_obs", "at": 1, "every": 1},
    "RaiseInStep-v0": {"fault": "raise"},
    "BlockInStep-v0": {"fault": "block"},
    "RaiseInEval-v0": {"fault": "raise", "at": 5, "eval_only": True},
    "BlockInEval-v0": {"fault": "block", "at": 5, "eval_only": True, "block_s": 20.0},
}

for _name, _kwargs in _ENVS.items():
    _id = f"{NAMESPACE}/{_name}"
    if _id not in gym.registry:
        gym.register(_id, entry_point="faulty_envs:FaultyCartPole", kwargs=_kwargs, max_episode_steps=500)


# --------------------------------------------------------------------------- trainers
# LinearQ is re-exported so that "faulty_envs:LinearQ" imports (and registers) the environments above.
__all__ = ["FaultyCartPole", "FreezeLearner", "HugeTD", "LinearQ", "NaNAfter", "env_id"]


def env_id(name: str) -> str:
    return f"{NAMESPACE}/{name}"


class NaNAfter(LinearQ):
    """Update number ``nan_at`` (1-based, in this process) fills the weights with NaN after its SGD step.

    Its own TD errors are finite (computed before the step): the NaN shows at the next
    weight publication or in the next update's TD errors.
    """

    def __init__(self, observation_space, action_space, *, nan_at: int = 10, **kw):
        super().__init__(observation_space, action_space, **kw)
        self.nan_at = nan_at

    def update_policy(self, batch, weights):
        import torch

        result = super().update_policy(batch, weights)
        if self.updates >= self.nan_at:
            with torch.no_grad():
                self.q.weight.fill_(float("nan"))
        return result


class HugeTD(LinearQ):
    """Every update returns TD errors of about ``1e307`` (finite, but a sum of twenty overflows)."""

    def update_policy(self, batch, weights):
        result = super().update_policy(batch, weights)
        return type(result)(1e307 * (1.0 + np.asarray(result.td_errors, np.float64)), result.metrics)


class FreezeLearner(LinearQ):
    """Update number ``freeze_at`` (the smoke check's single update is safe) writes ``marker`` and sleeps forever."""

    def __init__(self, observation_space, action_space, *, freeze_at: int = 3, marker: str = "", **kw):
        super().__init__(observation_space, action_space, **kw)
        self.freeze_at = freeze_at
        self.marker = marker

    def update_policy(self, batch, weights):
        if self.updates + 1 >= self.freeze_at:
            if self.marker:
                with open(self.marker, "w") as fh:
                    fh.write(str(os.getpid()))
            while True:
                time.sleep(3600)
        return super().update_policy(batch, weights)
