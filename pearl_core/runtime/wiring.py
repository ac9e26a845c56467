"""Wiring shared by the serial and the parallel runtime.

Both runtimes build their pieces with these functions, so that the serial
runtime is a faithful oracle for the multi-process one: same environments and
seeds, same trainer construction and checks, same replay, same update schedule,
same actor step and same evaluation. The serial loop, in terms of them::

    cls = load_trainer_class(config.trainer)
    envs = [make_env(config.env_id, s) for s in actor_env_seeds(config, n_envs)]
    trainer = build_trainer(config, envs[0].observation_space, envs[0].action_space)
    replay = build_replay(config, plan, StorageSpec.from_spaces(...))
    collector = Collector(envs, actor_env_seeds(config, n_envs))
    schedule = UpdateSchedule.from_config(config)          # continuous=True in the parallel runtime
    while not stop:
        trainer.env_steps = env_steps
        step = collector.step(trainer)                     # one step of every env
        replay.add(*step.transition())                     # (batched through InsertBuffer)
        for _ in range(schedule.due(env_steps, updates)):
            learner_step(trainer, replay, config.batch_size)   # sample -> train -> update priorities

Seeds: training env ``i`` is reset first with ``config.seed + i``; evaluation
episode ``k`` of evaluation ``j`` with ``config.seed + EVAL_SEED_OFFSET + j * n + k``,
so evaluation never replays a training start state by construction; the
replay's sampler and the trainer's exploration derive from ``config.seed``.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pearl_core.errors import SpecError
from pearl_core.replay import DataStorage, PrioritizedReplay, ReplayManager, StorageSpec, UniformReplay
from pearl_core.runtime.config import RunConfig, RuntimePlan
from pearl_core.trainer import Trainer, UpdateResult

__all__ = [
    "EVAL_SEED_OFFSET",
    "Collector",
    "EpisodeStats",
    "EvalResult",
    "Evaluator",
    "InsertBuffer",
    "StepOutput",
    "UpdateSchedule",
    "actor_env_seeds",
    "build_replay",
    "build_trainer",
    "learner_step",
    "learner_updates_due",
    "load_trainer_class",
    "make_env",
    "replay_beta_steps",
    "replay_state",
    "runtime_hparams",
]

#: Evaluation environments are seeded from ``config.seed + EVAL_SEED_OFFSET`` upwards.
EVAL_SEED_OFFSET = 1_000_003


# --------------------------------------------------------------------------------------
# Trainer class and environment
# --------------------------------------------------------------------------------------
def load_trainer_class(path: str) -> type:
    """Import a trainer class from ``"package.module:ClassName"``.

    Raises:
        SpecError: the path is malformed, the module cannot be imported, or it
            has no such attribute (close names are suggested), or the attribute
            is not a class.
    """
    if not isinstance(path, str) or path.count(":") != 1 or not all(path.split(":")):
        raise SpecError(
            f"trainer path {path!r} is malformed; expected 'package.module:ClassName'. "
            "Fix: e.g. 'pearl_core.algorithms:DQN'."
        )
    module_name, attr = path.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(
            f"trainer path {path!r}: module {module_name!r} could not be imported ({type(exc).__name__}: {exc}). "
            "Fix: check the spelling, and that the package is installed or on PYTHONPATH."
        ) from exc
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=5)
            hint = f" Did you mean {close}?" if close else f" It defines {sorted(names)[:20]}."
            raise SpecError(f"trainer path {path!r}: {module_name!r} has no attribute {part!r}.{hint}")
        obj = getattr(obj, part)
    if not inspect.isclass(obj):
        raise SpecError(
            f"trainer path {path!r} names a {type(obj).__name__}, not a class. "
            "Fix: point it at the trainer class itself."
        )
    return obj


def make_env(env_id: str, seed: int | None = None, **kwargs: Any):
    """``gymnasium.make(env_id, **kwargs)`` with its action and observation spaces seeded.

    The environment is not reset; reset it with ``seed`` (the :class:`Collector`
    and :class:`Evaluator` do) so its dynamics are seeded too.

    Raises:
        SpecError: an unknown id (lists close registered ids) or a missing
            optional dependency of the environment.
    """
    import gymnasium as gym

    try:
        env = gym.make(env_id, **kwargs)
    except gym.error.DependencyNotInstalled as exc:
        raise SpecError(f"environment {env_id!r} needs a package that is not installed: {exc}") from exc
    except gym.error.Error as exc:
        close = difflib.get_close_matches(str(env_id), list(gym.registry.keys()), n=5, cutoff=0.5)
        hint = f"Close matches: {close}." if close else "Fix: list ids with gymnasium.pprint_registry()."
        raise SpecError(f"unknown gymnasium environment id {env_id!r} ({exc}). {hint}") from exc
    if seed is not None:
        env.action_space.seed(int(seed))
        env.observation_space.seed(int(seed))
    return env


def actor_env_seeds(config: RunConfig, n_envs: int, first: int = 0) -> list[int]:
    """Reset seeds of training environments ``first .. first + n_envs - 1``."""
    return [int(config.seed) + first + i for i in range(n_envs)]


def runtime_hparams(trainer_cls: type, config: RunConfig, seed: int | None = None,
                    device: str | None = None) -> dict[str, Any]:
    """Hyper-parameters the runtime supplies when the constructor accepts them and the user did not.

    * ``total_env_steps`` = ``config.stop.max_env_steps`` (schedules that span the run);
    * ``seed`` = ``seed`` if given, else ``config.seed`` (exploration streams);
    * ``device`` = ``device`` if given (the plan's learner device, e.g. ``"cuda:0"``).
    """
    try:
        params = inspect.signature(trainer_cls).parameters
    except (TypeError, ValueError):
        return {}
    out: dict[str, Any] = {}
    if "total_env_steps" in params and config.stop.max_env_steps is not None:
        out["total_env_steps"] = int(config.stop.max_env_steps)
    if "seed" in params:
        out["seed"] = int(config.seed if seed is None else seed)
    if device is not None and "device" in params:
        out["device"] = str(device)
    return {k: v for k, v in out.items() if k not in config.trainer_kwargs}


def build_trainer(
    config: RunConfig, observation_space, action_space, *, seed: int | None = None, check: bool = True,
    device: str | None = None,
) -> Trainer:
    """Import, construct and (by default) validate the run's trainer.

    Seeds torch's global RNG with ``seed`` (default ``config.seed``) first, so the
    same config builds the same initial networks in any process.

    Args:
        config: the run config (``trainer``, ``trainer_kwargs``, ``seed``, ``stop``).
        observation_space, action_space: the environment's spaces.
        seed: override the seed (e.g. per actor); the networks are then synced anyway.
        check: run :func:`pearl_core.trainer_check.check_trainer` (the learner
            should; actor copies of an already-checked class may skip it).
        device: where the trainer's networks live, passed as ``device=`` when the
            constructor takes it and ``trainer_kwargs`` do not set it (the
            learner gets ``plan.learner_device``; actors stay on the CPU).

    Raises:
        SpecError: the trainer path does not resolve.
        TrainerError: the trainer breaks the contract.
    """
    import torch

    from pearl_core.trainer_check import check_trainer

    cls = load_trainer_class(config.trainer)
    kwargs = {**runtime_hparams(cls, config, seed, device), **config.trainer_kwargs}
    torch.manual_seed(int(config.seed if seed is None else seed))
    if check:
        return check_trainer(cls, observation_space, action_space, **kwargs)
    return cls(observation_space, action_space, **kwargs)


# --------------------------------------------------------------------------------------
# Replay
# --------------------------------------------------------------------------------------
def replay_beta_steps(config: RunConfig) -> int:
    """β annealing length in sample calls: ``replay.beta_steps``, else ``max_env_steps * replay_ratio``, else 100k."""
    if config.replay.beta_steps is not None:
        return int(config.replay.beta_steps)
    if config.stop.max_env_steps is not None:
        return max(1, int(config.stop.max_env_steps * config.replay_ratio))
    return 100_000


def build_replay(
    config: RunConfig,
    plan: RuntimePlan,
    storage_spec: StorageSpec,
    *,
    state: Mapping[str, Any] | None = None,
    rng: np.random.Generator | int | None = None,
) -> ReplayManager:
    """Build the run's replay manager over a fresh :class:`DataStorage`.

    Prioritized replay uses ``get_backend(plan.rm_backend).make_sum_tree(capacity,
    fanout, threads=plan.rm_threads)``; uniform replay has no tree.

    Args:
        config: ``replay`` (kind, capacity, fanout, α, β, eps, stratified) and the seed.
        plan: ``rm_backend`` and ``rm_threads``.
        storage_spec: observation/action layout, e.g. ``StorageSpec.from_spaces(...)``.
        state: what :func:`replay_state` returned, to restore contents, priorities
            and the β schedule position (checkpoint resume).
        rng: sampler RNG; default derives from ``config.seed``.

    Raises:
        BackendUnavailableError: the RM backend cannot be used here.
        SpecError: ``state`` does not fit this config.
    """
    from pearl_core import get_backend

    rc = config.replay
    if rng is None:
        rng = np.random.default_rng(np.random.SeedSequence([int(config.seed), 0x5E1EC7]))
    storage = DataStorage(storage_spec, rc.capacity)
    if state is not None:
        _restore_storage(storage, state)
    if rc.kind == "uniform":
        return UniformReplay(storage, rng=rng)
    tree = get_backend(plan.rm_backend).make_sum_tree(rc.capacity, rc.fanout, threads=plan.rm_threads)
    beta_steps = replay_beta_steps(config)
    beta = rc.beta
    if state is not None and "priorities" in state:
        prio = np.asarray(state["priorities"], dtype=np.float64)
        if prio.shape != (storage.size,):
            raise SpecError(
                f"replay state: {prio.shape[0]} priorities for {storage.size} stored transitions; "
                "expected one per transition. Fix: restore from an unmodified checkpoint."
            )
        if storage.size:
            tree.update(np.arange(storage.size, dtype=np.int64), prio)
        # Continue the β schedule where it stopped: same line, shifted start.
        done = int(state.get("sample_steps", 0))
        if done >= beta_steps:
            beta, beta_steps = rc.beta_final, 0
        else:
            beta = rc.beta + (done / beta_steps) * (rc.beta_final - rc.beta)
            beta_steps -= done
    return PrioritizedReplay(
        storage,
        tree,
        alpha=rc.alpha,
        beta=beta,
        beta_final=rc.beta_final,
        beta_steps=beta_steps,
        eps=rc.eps,
        stratified=rc.stratified,
        rng=rng,
    )


_FIELDS = ("obs", "action", "reward", "next_obs", "done")


def replay_state(replay: ReplayManager) -> dict[str, Any]:
    """Contents of a replay manager for a checkpoint (numpy arrays; see :func:`build_replay`).

    Keys: ``size``, ``cursor``, ``capacity``, one array per field (filled rows,
    in slot order), and for prioritized replay ``priorities`` and ``sample_steps``.
    """
    storage = replay.storage
    n = storage.size
    out: dict[str, Any] = {"size": n, "cursor": storage.cursor, "capacity": storage.capacity}
    for name in _FIELDS:
        out[name] = np.array(storage.field(name)[:n])
    if isinstance(replay, PrioritizedReplay):
        out["priorities"] = replay.priorities(np.arange(n, dtype=np.int64)) if n else np.zeros(0)
        out["sample_steps"] = replay.steps
    return out


def _restore_storage(storage: DataStorage, state: Mapping[str, Any]) -> None:
    n, cursor = int(state["size"]), int(state["cursor"])
    if n > storage.capacity or not (0 <= cursor < max(storage.capacity, 1)):
        raise SpecError(
            f"replay state holds {n} transitions (cursor {cursor}) but the capacity is {storage.capacity}; "
            "expected a state saved with the same replay capacity. Fix: keep replay.capacity unchanged on resume."
        )
    if n == 0:
        return
    rows = [np.asarray(state[name]) for name in _FIELDS]
    storage.add(*rows)  # slots 0..n-1; cursor = n % capacity
    if n == storage.capacity and cursor:
        storage.add(*(r[:cursor] for r in rows))  # rewrite the same rows to move the cursor to where it was


# --------------------------------------------------------------------------------------
# Update schedule and the learner step
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class UpdateSchedule:
    """How many learner updates a run owes after a number of env steps.

    Burst mode (serial runtime, SB3's ``train_freq``/``gradient_steps``): at every
    multiple ``b`` of ``train_every`` with ``b > learning_starts`` a burst is due;
    the total after ``T`` env steps is ``floor(K * train_every * ratio) -
    floor(K0 * train_every * ratio)`` with ``K = T // train_every`` and ``K0 =
    learning_starts // train_every`` (so fractional burst sizes add up exactly).

    Continuous mode (parallel runtime): ``floor((T - learning_starts) * ratio)``
    once ``T > learning_starts``.

    ``base_updates``/``base_env_steps`` shift both (a resume whose replay was not
    saved restarts ``learning_starts`` from ``base_env_steps``).
    """

    replay_ratio: float
    train_every: int = 1
    learning_starts: int = 0
    continuous: bool = False
    base_env_steps: int = 0
    base_updates: int = 0

    @classmethod
    def from_config(cls, config: RunConfig, *, continuous: bool = False, base_env_steps: int = 0,
                    base_updates: int = 0) -> "UpdateSchedule":
        return cls(config.replay_ratio, config.train_every, config.learning_starts, continuous,
                   base_env_steps, base_updates)

    def target(self, env_steps: int) -> int:
        """Total learner updates due once ``env_steps`` env steps have been taken."""
        t = int(env_steps) - self.base_env_steps
        start = self.learning_starts
        if t <= start:
            return self.base_updates
        if self.continuous:
            return self.base_updates + math.floor((t - start) * self.replay_ratio + 1e-9)
        k, k0 = t // self.train_every, start // self.train_every
        if k <= k0:
            return self.base_updates
        per = self.train_every * self.replay_ratio
        return self.base_updates + math.floor(k * per + 1e-9) - math.floor(k0 * per + 1e-9)

    def due(self, env_steps: int, updates_done: int) -> int:
        """Updates to run now: ``max(0, target(env_steps) - updates_done)``."""
        return max(0, self.target(env_steps) - int(updates_done))


def learner_updates_due(env_steps: int, updates_done: int, config: RunConfig, *, continuous: bool = False) -> int:
    """Learner updates owed after ``env_steps`` steps with ``updates_done`` done (see :class:`UpdateSchedule`)."""
    return UpdateSchedule.from_config(config, continuous=continuous).due(env_steps, updates_done)


def learner_step(trainer: Trainer, replay: ReplayManager, batch_size: int) -> UpdateResult:
    """One critical-path iteration: sample -> ``update_policy`` -> update priorities with per-sample TD errors."""
    sampled = replay.sample(batch_size)
    result = trainer.update_policy(sampled.batch, sampled.weights)
    replay.update_priorities(sampled.indices, result.td_errors)
    return result


# --------------------------------------------------------------------------------------
# Acting: collector, insertion buffer, evaluator
# --------------------------------------------------------------------------------------
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
        """``(obs, action, reward, next_obs, done)`` in :meth:`ReplayManager.add` order."""
        return self.obs, self.action, self.reward, self.next_obs, self.done


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
        self._obs = np.empty((size, *spec.obs_shape), spec.obs_dtype)
        self._next_obs = np.empty((size, *spec.obs_shape), spec.obs_dtype)
        self._action = np.empty((size, *spec.action_shape), spec.action_dtype)
        self._reward = np.empty(size, np.float32)
        self._done = np.empty(size, np.bool_)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def push(self, replay: ReplayManager, obs, action, reward, next_obs, done) -> None:
        """Stage ``k`` rows; whenever the buffer fills it is flushed into ``replay``."""
        k = len(reward)
        start = 0
        while start < k:
            take = min(self.size - self._n, k - start)
            sl, dst = slice(start, start + take), slice(self._n, self._n + take)
            self._obs[dst] = obs[sl]
            self._action[dst] = action[sl]
            self._reward[dst] = reward[sl]
            self._next_obs[dst] = next_obs[sl]
            self._done[dst] = done[sl]
            self._n += take
            start += take
            if self._n == self.size:
                self.flush(replay)

    def flush(self, replay: ReplayManager) -> int:
        """Add the staged rows to ``replay``; returns how many."""
        n = self._n
        if n:
            replay.add(self._obs[:n], self._action[:n], self._reward[:n], self._next_obs[:n], self._done[:n])
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
