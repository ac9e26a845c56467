"""Acting: stepping environments with a policy, staging their transitions, greedy evaluation.

* :class:`Collector` — steps ``n`` environments together with one batched
  ``get_action`` call: the serial runtime's loop body and every actor process's.
* :class:`InsertBuffer` — stages transitions so they reach the replay in batches.
* :class:`Evaluator` — greedy evaluation on separately seeded environments.

Seeds: training env ``i`` is reset first with ``config.seed + i``
(:func:`actor_env_seeds`); evaluation episode ``k`` of evaluation ``j`` with
``config.seed + EVAL_SEED_OFFSET + j * n + k``, so evaluation never replays a
training start state by construction.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from pearl_core.envs import make_env
from pearl_core.errors import SpecError
from pearl_core.replay.base import ReplayManager
from pearl_core.replay.storage import StorageSpec, transition_rows
from pearl_core.runtime.config import RunConfig
from pearl_core.trainer import Trainer

__all__ = [
    "EVAL_SEED_OFFSET",
    "Collector",
    "EpisodeStats",
    "EvalResult",
    "Evaluator",
    "InsertBuffer",
    "StepOutput",
    "actor_env_seeds",
]

#: Evaluation environments are seeded from ``config.seed + EVAL_SEED_OFFSET`` upwards.
EVAL_SEED_OFFSET = 1_000_003


def actor_env_seeds(config: RunConfig, n_envs: int, first: int = 0) -> list[int]:
    """Reset seeds of training environments ``first .. first + n_envs - 1``."""
    return [int(config.seed) + first + i for i in range(n_envs)]


@dataclasses.dataclass(frozen=True)
class EpisodeStats:
    """A finished training or evaluation episode."""

    env_index: int
    episode_return: float
    length: int
    terminated: bool


@dataclasses.dataclass(frozen=True, eq=False)
class StepOutput:
    """One step of every environment of a :class:`Collector`.

    ``done`` is ``terminated`` only: a time-limit truncation is not a terminal
    state, so the learner still bootstraps from ``next_obs`` (the true final
    observation, not the reset one).
    """

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    next_obs: np.ndarray
    done: np.ndarray
    episodes: tuple[EpisodeStats, ...]

    def transition(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The transition fields in :meth:`ReplayManager.add` order."""
        return transition_rows(self)


class Collector:
    """Steps ``n`` environments together with one batched ``get_action`` call (an actor's loop body).

    Args:
        envs: environments with identical spaces (e.g. from :func:`make_env`).
        seeds: reset seed of each environment's first episode.

    The first :meth:`step` resets every environment with its seed; an
    environment whose episode ends is reset (unseeded: its RNG continues) and
    its :class:`EpisodeStats` reported.
    """

    def __init__(self, envs: Sequence[Any], seeds: Sequence[int] | None = None):
        if not envs:
            raise SpecError("Collector needs at least one environment; found none.")
        self.envs = list(envs)
        self.seeds = list(seeds) if seeds is not None else [None] * len(self.envs)
        if len(self.seeds) != len(self.envs):
            raise SpecError(f"Collector: {len(self.envs)} environments but {len(self.seeds)} seeds.")
        space = self.envs[0].action_space
        self._discrete = hasattr(space, "n")
        self._obs: np.ndarray | None = None
        self._returns = np.zeros(len(self.envs), np.float64)
        self._lengths = np.zeros(len(self.envs), np.int64)
        self.episodes_done = 0

    @property
    def n_envs(self) -> int:
        return len(self.envs)

    def _reset_all(self) -> None:
        first = [env.reset(seed=s)[0] for env, s in zip(self.envs, self.seeds)]
        self._obs = np.stack([np.asarray(o) for o in first])

    def step(self, trainer: Trainer, explore: bool = True) -> StepOutput:
        """Act in every environment once with ``trainer.get_action(obs, explore)``."""
        if self._obs is None:
            self._reset_all()
        obs = self._obs
        actions = trainer.get_action(obs, explore)
        n = len(self.envs)
        next_obs = np.empty_like(obs)
        rewards = np.empty(n, np.float32)
        dones = np.zeros(n, np.bool_)
        new_obs = np.empty_like(obs)
        episodes = []
        for i, env in enumerate(self.envs):
            a = int(actions[i]) if self._discrete else actions[i]
            o, r, terminated, truncated, _ = env.step(a)
            next_obs[i] = o
            rewards[i] = r
            dones[i] = terminated
            self._returns[i] += r
            self._lengths[i] += 1
            if terminated or truncated:
                episodes.append(EpisodeStats(i, float(self._returns[i]), int(self._lengths[i]), bool(terminated)))
                self._returns[i] = 0.0
                self._lengths[i] = 0
                o = env.reset()[0]
            new_obs[i] = o
        self._obs = new_obs
        self.episodes_done += len(episodes)
        return StepOutput(obs, actions, rewards, next_obs, dones, tuple(episodes))

    def close(self) -> None:
        for env in self.envs:
            env.close()


class InsertBuffer:
    """Staging rows before they go to the replay in batches (fewer, larger ``add`` calls).

    Flush before sampling so the learner sees every collected transition.

    Args:
        spec: the storage layout.
        size: rows per batch (``plan.insert_batch``); a push that fills it flushes.
    """

    def __init__(self, spec: StorageSpec, size: int):
        if size < 1:
            raise SpecError(f"InsertBuffer size must be >= 1; found {size}.")
        self.size = int(size)
        # one staging array per transition field, in add() order (the schema's)
        self._cols = tuple(np.empty((size, *shape), dtype) for shape, dtype in spec.fields().values())
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def push(self, replay: ReplayManager, obs, action, reward, next_obs, done) -> None:
        """Stage ``k`` rows; whenever the buffer fills it is flushed into ``replay``."""
        given = (obs, action, reward, next_obs, done)
        k = len(reward)
        start = 0
        while start < k:
            take = min(self.size - self._n, k - start)
            sl, dst = slice(start, start + take), slice(self._n, self._n + take)
            for col, values in zip(self._cols, given):
                col[dst] = values[sl]
            self._n += take
            start += take
            if self._n == self.size:
                self.flush(replay)

    def flush(self, replay: ReplayManager) -> int:
        """Add the staged rows to ``replay``; returns how many."""
        n = self._n
        if n:
            replay.add(*(col[:n] for col in self._cols))
            self._n = 0
        return n


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """Greedy evaluation of ``len(returns)`` episodes."""

    returns: tuple[float, ...]
    lengths: tuple[int, ...]

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std_return(self) -> float:
        return float(np.std(self.returns))


class Evaluator:
    """Greedy evaluation on separately seeded environments, batched across ``n_envs`` of them.

    Each call of :meth:`evaluate` plays ``n_episodes`` whole episodes with
    ``get_action(obs, explore=False)``, one batched call per step over the
    environments still running. Episode ``k`` of the ``j``-th evaluation resets
    with seed ``seed + j * n_episodes + k``.

    Args:
        env_id: gymnasium id, or ``env_fn`` to build the environments.
        n_episodes: episodes per evaluation.
        seed: base seed (:func:`Evaluator.for_config` uses ``config.seed + EVAL_SEED_OFFSET``).
        n_envs: environments stepped together (default ``n_episodes``).
        env_fn: ``callable(seed) -> env`` overriding ``make_env(env_id, seed)``.
    """

    def __init__(self, env_id: str | None, n_episodes: int, seed: int, n_envs: int | None = None,
                 env_fn: Callable[[int], Any] | None = None):
        if n_episodes < 1:
            raise SpecError(f"Evaluator: n_episodes must be >= 1; found {n_episodes}.")
        self.n_episodes = int(n_episodes)
        self.seed = int(seed)
        n = min(self.n_episodes, n_envs or self.n_episodes)
        make = env_fn if env_fn is not None else (lambda s: make_env(env_id, s))
        self.envs = [make(self.seed + i) for i in range(n)]
        self._discrete = hasattr(self.envs[0].action_space, "n")
        self.evaluations = 0

    @classmethod
    def for_config(cls, config: RunConfig, n_envs: int | None = None) -> "Evaluator":
        """The evaluator of a run: ``stop.eval_episodes`` episodes, seeds from ``config.seed``."""
        return cls(config.env_id, config.stop.eval_episodes, config.seed + EVAL_SEED_OFFSET, n_envs)

    def evaluate(self, trainer: Trainer) -> EvalResult:
        """Play ``n_episodes`` greedy episodes; returns their returns and lengths."""
        base = self.seed + self.evaluations * self.n_episodes
        self.evaluations += 1
        started = 0
        active: list[int] = []
        obs: dict[int, np.ndarray] = {}
        for i, env in enumerate(self.envs):
            if started < self.n_episodes:
                obs[i] = np.asarray(env.reset(seed=base + started)[0])
                started += 1
                active.append(i)
        rets = {i: 0.0 for i in active}
        lens = {i: 0 for i in active}
        returns: list[float] = []
        lengths: list[int] = []
        while active:
            batch = np.stack([obs[i] for i in active])
            actions = trainer.get_action(batch, False)
            still = []
            for j, i in enumerate(active):
                a = int(actions[j]) if self._discrete else actions[j]
                o, r, terminated, truncated, _ = self.envs[i].step(a)
                rets[i] += float(r)
                lens[i] += 1
                if terminated or truncated:
                    returns.append(rets[i])
                    lengths.append(lens[i])
                    if started < self.n_episodes:
                        obs[i] = np.asarray(self.envs[i].reset(seed=base + started)[0])
                        started += 1
                        rets[i], lens[i] = 0.0, 0
                        still.append(i)
                else:
                    obs[i] = np.asarray(o)
                    still.append(i)
            active = still
        return EvalResult(tuple(returns), tuple(lengths))

    def close(self) -> None:
        for env in self.envs:
            env.close()
