"""Test-only trainers shared by the runtime tests (tests/runtime/; the leak checks are in tests/conftest.py).

The trainers are tiny (one ``nn.Linear``) so that a parallel run spends its time in
the runtime, not in torch. Spawned processes import them by path
(``"runtime_support:LinearQ"``): pytest puts ``tests/helpers/`` on ``sys.path`` (``pythonpath`` in
pyproject.toml) and ``spawn`` children inherit it. This module holds no tests.
"""

from __future__ import annotations

import os
import time
from typing import Mapping

import numpy as np
from pearl_core.trainer import Trainer, UpdateResult

class LinearQ(Trainer):
    """A linear Q-function with ε-greedy acting and one SGD step per update.

    TD errors are ``|Q(s, a) - (r + γ max Q(s', ·))|`` per sample.
    """

    action_kind = "discrete"

    def __init__(self, observation_space, action_space, *, lr: float = 1e-3, epsilon: float = 0.3,
                 seed: int | None = None):
        import torch  # imported here so that spawned test helpers that need no trainer stay light
        from torch import nn

        self.input_shape = tuple(observation_space.shape)
        self.n_actions = int(action_space.n)
        self.q = nn.Linear(int(np.prod(self.input_shape)), self.n_actions)
        self.opt = torch.optim.SGD(self.q.parameters(), lr=lr)
        self.epsilon = float(epsilon)
        self._rng = np.random.default_rng(seed)
        self.updates = 0

    def get_action(self, obs, explore):
        import torch

        obs = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
        with torch.no_grad():
            greedy = self.q(torch.from_numpy(obs)).argmax(1).numpy().astype(np.int64)
        if not explore:
            return greedy
        rand = self._rng.integers(0, self.n_actions, len(obs))
        return np.where(self._rng.random(len(obs)) < self.epsilon, rand, greedy).astype(np.int64)

    def update_policy(self, batch, weights):
        import torch

        obs = torch.as_tensor(np.asarray(batch.obs, np.float32).reshape(len(batch.reward), -1))
        nxt = torch.as_tensor(np.asarray(batch.next_obs, np.float32).reshape(len(batch.reward), -1))
        act = torch.as_tensor(np.asarray(batch.action, np.int64))
        rew = torch.as_tensor(np.asarray(batch.reward, np.float32))
        done = torch.as_tensor(np.asarray(batch.done, np.bool_))
        w = torch.as_tensor(np.asarray(weights, np.float32))
        with torch.no_grad():
            target = rew + 0.99 * (~done).float() * self.q(nxt).max(1).values
        q = self.q(obs).gather(1, act[:, None]).squeeze(1)
        loss = (w * (q - target) ** 2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.updates += 1
        return UpdateResult((q - target).detach().abs().numpy(), {"loss": float(loss.detach())})

    def get_weights(self):
        return {k: v.detach().numpy().copy() for k, v in self.q.state_dict().items()}

    def set_weights(self, weights: Mapping[str, np.ndarray]):
        import torch

        self.q.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in weights.items()})


class FixedPolicy(LinearQ):
    """Deterministic acting (always action 0, no randomness) for replay-content comparisons."""

    def get_action(self, obs, explore):
        return np.zeros(len(obs), np.int64)


class FailingLearner(LinearQ):
    """``update_policy`` raises on update number ``fail_at`` (1-based)."""

    def __init__(self, observation_space, action_space, *, fail_at: int = 5, **kw):
        super().__init__(observation_space, action_space, **kw)
        self.fail_at = fail_at

    def update_policy(self, batch, weights):
        if self.updates + 1 >= self.fail_at:
            raise RuntimeError(f"boom in update {self.updates + 1}")
        return super().update_policy(batch, weights)


class RaisingActor(LinearQ):
    """``get_action(explore=True)`` raises once ``env_steps >= raise_at`` (every incarnation)."""

    def __init__(self, observation_space, action_space, *, raise_at: int = 50, **kw):
        super().__init__(observation_space, action_space, **kw)
        self.raise_at = raise_at

    def get_action(self, obs, explore):
        if explore and self.env_steps >= self.raise_at:
            raise ValueError(f"actor exploded at env step {self.env_steps}")
        return super().get_action(obs, explore)


class KillOnce(LinearQ):
    """The first actor whose ``env_steps`` passes ``kill_at`` SIGKILLs itself (once per ``marker`` file)."""

    def __init__(self, observation_space, action_space, *, kill_at: int = 100, marker: str = "", **kw):
        super().__init__(observation_space, action_space, **kw)
        self.kill_at = kill_at
        self.marker = marker

    def get_action(self, obs, explore):
        if explore and self.marker and self.env_steps >= self.kill_at:
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.close(fd)
                os.kill(os.getpid(), 9)
        return super().get_action(obs, explore)


class SlowLearner(LinearQ):
    """Sleeps in every update, so a run lasts long enough to be interrupted."""

    def update_policy(self, batch, weights):
        time.sleep(0.002)
        return super().update_policy(batch, weights)


class KillLearner(LinearQ):
    """The learner SIGKILLs itself in update number ``kill_at`` (the smoke check's single update is safe)."""

    def __init__(self, observation_space, action_space, *, kill_at: int = 3, **kw):
        super().__init__(observation_space, action_space, **kw)
        self.kill_at = kill_at

    def update_policy(self, batch, weights):
        if self.updates + 1 >= self.kill_at:
            os.kill(os.getpid(), 9)
        return super().update_policy(batch, weights)


class WeightEcho(LinearQ):
    """Counts its updates in ``q.bias[0]``; an actor that sees a count >= ``seen_at`` writes ``marker``.

    Proves that weights flow learner -> WeightBuffer -> actors during a run.
    """

    def __init__(self, observation_space, action_space, *, seen_at: int = 10, marker: str = "", **kw):
        super().__init__(observation_space, action_space, **kw)
        self.seen_at = seen_at
        self.marker = marker

    def update_policy(self, batch, weights):
        import torch

        result = super().update_policy(batch, weights)
        with torch.no_grad():
            self.q.bias[0] = float(self.updates)
        return result

    def get_action(self, obs, explore):
        if explore and self.marker and float(self.q.bias[0].detach()) >= self.seen_at:
            with open(self.marker, "a") as fh:
                fh.write(f"{float(self.q.bias[0].detach())}\n")
            self.marker = ""
        return super().get_action(obs, explore)
