"""Acting: stepping environments with a policy, staging their transitions, greedy evaluation.

* :class:`Collector` — steps ``n`` environments together with one batched
  ``get_action`` call: the serial runtime's loop body and every actor process's. How the
  environments step is its back end (``RuntimePlan.vector_backend``, :mod:`pearl_core.runtime.vector`).
* :class:`NStepAggregator` — turns each environment's one-step transitions into
  n-step ones (``RunConfig.replay.n_step``), where they are produced, so every
  replay (uniform or prioritized) and every runtime stores them alike.
* :class:`InsertBuffer` — stages transitions so they reach the replay in batches.
* :class:`Evaluator` — greedy evaluation on separately seeded environments.

Data sanity: the collector checks every transition (observation acted on, action,
reward, next observation) for NaN/inf. With ``on_nonfinite="stop"`` it raises
:class:`~pearl_core.errors.DataError` naming the environment, the actor, the
environment's index and the env step, before anything of that step is returned;
with ``"drop"`` the bad transitions are left out of the :class:`StepOutput` and
counted (:attr:`Collector.dropped`), and a dropped transition is not an env step of
the run. Evaluation rejects a non-finite reward (its return would mean nothing).

Seeds: training env ``i`` is reset first with ``config.seed + i``
(:func:`actor_env_seeds`); evaluation episode ``k`` of evaluation ``j`` with
``config.seed + EVAL_SEED_OFFSET + j * n + k``, so evaluation never replays a
training start state by construction.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import numpy as np

from pearl_core.envs import make_env
from pearl_core.errors import DataError, SpecError
from pearl_core.replay.base import ReplayManager
from pearl_core.replay.storage import STEPS_DTYPE, StorageSpec, transition_rows
from pearl_core.runtime.config import RunConfig
from pearl_core.runtime.messages import Phase
from pearl_core.runtime.nstep import NStepAggregator
from pearl_core.runtime.vector import LoopEnvs, VectorEnvs
from pearl_core.trainer import Trainer

__all__ = [
    "EVAL_SEED_OFFSET",
    "MAX_CONSECUTIVE_DROPS",
    "Collector",
    "EpisodeStats",
    "EvalResult",
    "Evaluator",
    "InsertBuffer",
    "NStepAggregator",
    "StepOutput",
    "actor_env_seeds",
]

#: Evaluation environments are seeded from ``config.seed + EVAL_SEED_OFFSET`` upwards.
EVAL_SEED_OFFSET = 1_000_003
#: With ``on_nonfinite="drop"``, an environment whose transitions are all bad this many times in a
#: row is broken, not occasionally wrong: the collector raises :class:`DataError` (a run would
#: otherwise step it forever without collecting anything).
MAX_CONSECUTIVE_DROPS = 1_000

_FIX = ("Fix: find where the environment makes NaN/inf (e.g. wrap it to check or clip its output), or set "
        "RunConfig(on_nonfinite='drop') to skip such transitions (each drop is counted and logged).")


def _no_mark(phase: int, arg: int = 0) -> None:
    pass


_GET_ACTION = int(Phase.GET_ACTION)
_F32_MAX = float(np.finfo(np.float32).max)  # rewards are stored as float32: larger ones become inf


def _finite(x: np.ndarray) -> bool:
    """Whether every value of ``x`` is finite (integer and bool arrays always are); fast for small arrays."""
    kind = x.dtype.kind
    if kind == "f" and x.size <= 64:  # a ufunc and a reduction cost microseconds; a list of a few floats less
        return all(map(math.isfinite, x.ravel().tolist()))
    return kind not in "fc" or bool(np.isfinite(x).all())


def _bad_rows(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind not in "fc":
        return np.zeros(len(x), np.bool_)
    return ~np.isfinite(x.reshape(len(x), -1)).all(1)


def _first_bad(row: np.ndarray) -> str:
    a = np.asarray(row)
    if a.ndim == 0:
        return f" = {a.item()!r}"
    flat = int(np.argmax(~np.isfinite(a).reshape(-1)))
    return f"[{', '.join(map(str, np.unravel_index(flat, a.shape)))}] = {a.reshape(-1)[flat].item()!r}"


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

    With one-step transitions (``n_step=1``) the arrays hold the transitions kept: one
    row per environment, less the ``dropped`` ones (``on_nonfinite="drop"``), and
    ``steps`` is all ones. With ``n_step > 1`` they hold the n-step transitions whose
    window closed at this step (:class:`NStepAggregator`): none for an environment's
    first ``n - 1`` steps, up to ``n`` for one whose episode ended. ``env_steps`` is the
    environment steps taken and kept either way.
    """

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    next_obs: np.ndarray
    done: np.ndarray
    episodes: tuple[EpisodeStats, ...]
    dropped: int = 0
    steps: np.ndarray | None = None
    env_steps: int | None = None

    def __post_init__(self) -> None:
        if self.steps is None:
            object.__setattr__(self, "steps", np.ones(len(self.reward), STEPS_DTYPE))
        if self.env_steps is None:
            object.__setattr__(self, "env_steps", len(self.reward))

    def transition(self) -> tuple[np.ndarray, ...]:
        """The transition fields in :meth:`ReplayManager.add` order."""
        return transition_rows(self)


class Collector:
    """Steps ``n`` environments together with one batched ``get_action`` call (an actor's loop body).

    Args:
        envs: environments with identical spaces (e.g. from :func:`make_env`), stepped by the
            ``"loop"`` back end, or a :class:`~pearl_core.runtime.vector.VectorEnvs` (a vector back
            end, :func:`~pearl_core.runtime.vector.make_vector_envs`): every back end gives the
            same rows, episode stats, NaN screening and drops, n-step rows and warm-up.
        seeds: reset seed of each environment's first episode.
        env_id: the environments' id, for error messages (default: the first one's spec id).
        on_nonfinite: ``"stop"`` (raise :class:`DataError`) or ``"drop"`` (leave the
            transition out and count it) for a transition holding a NaN/inf.
        where: who steps them, for error messages (``"actor 0"``).
        mark: ``mark(phase, arg)`` called before every ``get_action``, ``env.step`` and
            ``env.reset`` (an actor's heartbeat, :class:`~pearl_core.runtime.messages.Phase`); a
            vector back end is given its own ``mark`` and marks once per vector step.
        n_step: environment steps per transition (``RunConfig.replay.n_step``); with ``n > 1``
            the steps go through an :class:`NStepAggregator` with the trainer's ``gamma``.

    The first :meth:`step` resets every environment with its seed; an
    environment whose episode ends is reset (unseeded: its RNG continues) and
    its :class:`EpisodeStats` reported.

    Attributes:
        dropped: transitions dropped so far; ``last_drop`` describes the latest.
    """

    def __init__(self, envs: Sequence[Any] | VectorEnvs, seeds: Sequence[int] | None = None, *,
                 env_id: str | None = None, on_nonfinite: str = "stop", where: str = "the serial runtime",
                 mark: Callable[[int, int], None] | None = None, n_step: int = 1, random_steps: int = 0):
        if on_nonfinite not in ("stop", "drop"):
            raise SpecError(f"Collector: on_nonfinite = {on_nonfinite!r}; expected 'stop' or 'drop'.")
        self._mark = mark or _no_mark
        if _is_vector(envs):
            vec: Any = envs
        else:
            if not envs:
                raise SpecError("Collector needs at least one environment; found none.")
            vec = LoopEnvs(list(envs), self._mark)  # type: ignore[arg-type]
        self.vec: VectorEnvs = vec
        #: the gymnasium environments of the loop back end (``None`` for the others)
        self.envs = vec.envs if isinstance(vec, LoopEnvs) else None
        n = int(vec.n_envs)
        self.seeds = list(seeds) if seeds is not None else [None] * n
        if len(self.seeds) != n:
            raise SpecError(f"Collector: {n} environments but {len(self.seeds)} seeds.")
        self._discrete = hasattr(vec.action_space, "n")
        self._obs: np.ndarray | None = None
        self._returns = np.zeros(n, np.float64)
        self._lengths = np.zeros(n, np.int64)
        self.episodes_done = 0
        self.env_id = env_id or getattr(vec, "env_id", None) or (
            type(self.envs[0]).__name__ if self.envs else type(vec).__name__)
        self.on_nonfinite, self.where = on_nonfinite, where
        self._drop = on_nonfinite == "drop"
        self._from_reset: Sequence[int] = range(n)  # the envs whose current obs came from env.reset
        self._obs_ok = True  # whether the current observations are finite (checked when they arrived)
        self._bad_run = np.zeros(n, np.int64)  # consecutive drops per environment
        self.dropped = 0
        self.last_drop = ""
        self._agg = NStepAggregator(n_step, n) if n_step != 1 else None
        self.random_steps = int(random_steps)
        self._gamma: float | None = None

    @property
    def n_envs(self) -> int:
        return int(self.vec.n_envs)

    @property
    def n_step(self) -> int:
        return 1 if self._agg is None else self._agg.n

    def _discount(self, trainer: Trainer) -> float:
        gamma = getattr(trainer, "gamma", None)
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.floating, np.integer)) \
                or not 0.0 <= float(gamma) <= 1.0:
            raise SpecError(f"{self.where}: n_step = {self.n_step} needs the trainer's discount factor to sum the "
                            f"rewards, but {type(trainer).__name__}.gamma = {gamma!r}; expected a number in [0, 1]. "
                            "Fix: give the trainer a gamma attribute, or use n_step=1.")
        self._gamma = float(gamma)
        return self._gamma

    def _n_step(self, trainer: Trainer, one: StepOutput, env_index, ended: np.ndarray, broken=()) -> StepOutput:
        """``one`` (this step's one-step rows of the environments ``env_index``) as the n-step rows it closes."""
        # _n_step runs only with an aggregator (n_step > 1)
        rows = self._agg.push(self._discount(trainer), env_index, one.obs, one.action,  # type: ignore[union-attr]
                              one.reward, one.next_obs, one.done, ended[env_index], broken)
        return self._as_output(rows, one, one.episodes, one.dropped, len(one.reward))

    def _as_output(self, rows, like: StepOutput | None, episodes, dropped: int, env_steps: int) -> StepOutput:
        """A :class:`StepOutput` of aggregated ``rows``; ``like`` (this step's one-step rows) gives the
        shapes and dtypes of an empty one."""
        o, a, r, s2, d, k = rows
        if not r:
            assert like is not None
            return StepOutput(like.obs[:0], like.action[:0], np.zeros(0, np.float32), like.next_obs[:0],
                              np.zeros(0, np.bool_), episodes, dropped, np.zeros(0, STEPS_DTYPE), env_steps)
        return StepOutput(np.stack(o), np.stack(a), np.asarray(r, np.float32), np.stack(s2), np.asarray(d, np.bool_),
                          episodes, dropped, np.asarray(k, STEPS_DTYPE), env_steps)

    def flush_pending(self) -> StepOutput | None:
        """Every environment's pending steps as n-step transitions truncated now (``done=False``; the
        learner bootstraps from each window's last observation with ``gamma ** k``); ``None`` when there
        are none (``n_step=1``, or nothing stepped). The serial runtime stores them at the end of a run."""
        if self._agg is None or self._obs is None or not self._agg.pending():
            return None
        rows = self._agg.flush(self._gamma if self._gamma is not None else 1.0)
        return self._as_output(rows, None, (), 0, 0)  # at least one row: pending() > 0

    def _reset_all(self) -> None:
        self._obs = np.asarray(self.vec.reset(self.seeds))
        self._obs_ok = _finite(self._obs)

    def step(self, trainer: Trainer, explore: bool = True) -> StepOutput:
        """Act in every environment once with ``trainer.get_action(obs, explore)``.

        Raises:
            DataError: a transition holds a NaN/inf (``on_nonfinite="stop"``), or, with
                ``"drop"``, one environment's last :data:`MAX_CONSECUTIVE_DROPS` were all bad.
        """
        if self._obs is None:
            self._reset_all()
        obs, mark = self._obs, self._mark
        base = int(getattr(trainer, "env_steps", 0) or 0)  # the run's env-step count, for messages
        mark(_GET_ACTION, 0)
        if explore and base < self.random_steps:  # the warm-up: each env's own (seeded) action space
            actions = self.vec.sample_actions()
        else:
            actions = trainer.get_action(obs, explore)
        n = self.n_envs
        next_obs, r64, terminated, truncated, new_obs = self.vec.step(actions)
        if next_obs.dtype != obs.dtype:
            next_obs, new_obs = next_obs.astype(obs.dtype), new_obs.astype(obs.dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            rewards = r64.astype(np.float32)  # inf or NaN as float32: reported below
            ok = np.abs(r64) <= _F32_MAX  # False for NaN; a dropped reward does not poison the return
        rewards_ok = bool(ok.all())
        self._returns += r64 if rewards_ok else np.where(ok, r64, 0.0)
        self._lengths += 1
        dones = np.asarray(terminated, np.bool_)
        ended = dones | truncated
        resets: list[int] = np.flatnonzero(ended).tolist()
        episodes = []
        for i in resets:
            episodes.append(EpisodeStats(i, float(self._returns[i]), int(self._lengths[i]), bool(dones[i])))
            self._returns[i] = 0.0
            self._lengths[i] = 0
        acts = np.asarray(actions)
        obs_ok, obs_from_reset, self._from_reset = self._obs_ok, self._from_reset, resets
        new_ok = _finite(new_obs)
        fresh_ok = new_ok and (next_obs is new_obs or not resets or _finite(next_obs))
        self._obs = new_obs
        self._obs_ok = new_ok  # the next step acts on new_obs
        if rewards_ok and fresh_ok and obs_ok and (self._discrete or _finite(acts)):
            if self._drop and self.dropped and self._bad_run.any():
                self._bad_run[:] = 0
            self.episodes_done += len(episodes)
            if self._agg is None:
                return StepOutput(obs, actions, rewards, next_obs, dones, tuple(episodes))
            return self._n_step(trainer, StepOutput(obs, acts, rewards, next_obs, dones, tuple(episodes)),
                                np.arange(n), ended)
        keep = self._screen(obs, acts, rewards, next_obs, obs_from_reset, base)  # raises unless dropping
        self.episodes_done += len(episodes)
        k = int(keep.sum())
        one = StepOutput(obs[keep], acts[keep], rewards[keep], next_obs[keep], dones[keep], tuple(episodes),
                         dropped=n - k)
        if self._agg is None:
            return one
        return self._n_step(trainer, one, np.flatnonzero(keep), ended, np.flatnonzero(~keep))

    def _screen(self, obs, acts, rewards, next_obs, from_reset, base: int) -> np.ndarray:
        """The rows to keep of a step holding a NaN/inf; raises :class:`DataError` unless dropping."""
        fields = (  # in causal order: of several bad fields in one row, the first is named
            ("observation it acted on", obs),
            ("action (from trainer.get_action)", acts if not self._discrete else acts[:0]),
            ("reward returned by env.step", rewards),
            ("observation returned by env.step", next_obs),
        )
        bad = np.zeros(len(rewards), np.bool_)
        first: tuple[int, str, np.ndarray] | None = None
        for name, x in fields:
            rows = _bad_rows(x) if len(x) else np.zeros(len(rewards), np.bool_)
            if rows.any():
                i = int(np.argmax(rows))
                if first is None or i < first[0]:
                    first = (i, name, x[i])
                bad |= rows
        if first is None:  # nothing bad after all
            return ~bad
        i, name, row = first
        if name == "observation it acted on":
            name += " (from env.reset)" if i in from_reset else " (from the previous env.step)"
        verb = "was given a non-finite" if name.startswith("action") else "gave a non-finite"
        what = (f"{self.where}: environment {self.env_id!r} (env {i} of {len(rewards)}) {verb} "
                f"{name}{_first_bad(row)} at env step {base + i} of the run (step {int(self._lengths[i]) or 'end'} "
                "of its episode)")
        if not self._drop:
            raise DataError(f"{what}; expected finite observations, rewards and actions. Nothing of this step "
                            f"was stored. {_FIX}", component=self.where, env_id=self.env_id, env_step=base + i)
        self._bad_run[bad] += 1
        self._bad_run[~bad] = 0
        self.dropped += int(bad.sum())
        self.last_drop = what
        worst = int(np.argmax(self._bad_run))
        if self._bad_run[worst] >= MAX_CONSECUTIVE_DROPS:
            raise DataError(
                f"{self.where}: environment {self.env_id!r} (env {worst}) gave {int(self._bad_run[worst])} "
                f"transitions in a row holding NaN/inf (latest: {what}); on_nonfinite='drop' skips occasional "
                f"bad transitions, but this environment keeps producing them. {_FIX.split(', or set')[0]}.",
                component=self.where, env_id=self.env_id, env_step=base + worst)
        return ~bad

    def close(self) -> None:
        self.vec.close()


def _is_vector(envs: Any) -> bool:
    """Whether ``envs`` is a :class:`VectorEnvs` (not a sequence of gymnasium environments)."""
    return all(hasattr(envs, a) for a in ("reset", "step", "sample_actions", "n_envs"))


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

    def push(self, replay: ReplayManager, obs, action, reward, next_obs, done, steps=None) -> None:
        """Stage ``k`` rows; whenever the buffer fills it is flushed into ``replay``.

        ``steps`` (the environment steps each row spans, :attr:`StepOutput.steps`) defaults to ones.

        Raises:
            DataError: a reward is not finite (as float32): the replay would reject the whole
                staged batch at the next flush, so nothing of this push is staged (the rows
                staged before stay). The :class:`Collector` never passes one on.
        """
        r = np.asarray(reward)
        with np.errstate(over="ignore", invalid="ignore"):
            r32 = r.astype(np.float32, copy=False)
        if not _finite(r32):
            pos = int(np.argmax(~np.isfinite(r32)))
            raise DataError(f"InsertBuffer.push: reward[{pos}] = {r[pos].item()!r} is not finite (as float32); "
                            "expected finite rewards. Nothing of this push was staged. Fix: check the data with "
                            "the Collector (RunConfig.on_nonfinite) before pushing it.")
        k = len(reward)
        given = (obs, action, reward, next_obs, done, np.ones(k, STEPS_DTYPE) if steps is None else steps)
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
        self.env_id = env_id or getattr(getattr(self.envs[0], "spec", None), "id", None) or "the evaluation env"
        #: Environment steps taken by all evaluations, and what the running one is doing
        #: (read by the parallel runtime's stall watchdog from another thread).
        self.progress = 0
        self.doing = "idle"
        #: Set from another thread to end a running evaluation at its next step (it raises ``InterruptedError``).
        self.cancelled = False

    @classmethod
    def for_config(cls, config: RunConfig, n_envs: int | None = None) -> "Evaluator":
        """The evaluator of a run: ``stop.eval_episodes`` episodes, seeds from ``config.seed``."""
        options = config.env_options
        return cls(config.env_id, config.stop.eval_episodes, config.seed + EVAL_SEED_OFFSET, n_envs,
                   env_fn=lambda s: make_env(config.env_id, s, evaluation=True, **options))

    def evaluate(self, trainer: Trainer) -> EvalResult:
        """Play ``n_episodes`` greedy episodes; returns their returns and lengths."""
        base = self.seed + self.evaluations * self.n_episodes
        self.evaluations += 1
        started = 0
        active: list[int] = []
        obs: dict[int, np.ndarray] = {}
        for i, env in enumerate(self.envs):
            if started < self.n_episodes:
                self.doing = f"in env.reset of evaluation environment {i}"
                obs[i] = np.asarray(env.reset(seed=base + started)[0])
                started += 1
                active.append(i)
        rets = {i: 0.0 for i in active}
        lens = {i: 0 for i in active}
        returns: list[float] = []
        lengths: list[int] = []
        while active:
            if self.cancelled:
                raise InterruptedError("the evaluation was cancelled (the run is closing)")
            batch = np.stack([obs[i] for i in active])
            self.doing = "in trainer.get_action"
            actions = trainer.get_action(batch, False)
            still = []
            for j, i in enumerate(active):
                a = int(actions[j]) if self._discrete else actions[j]
                self.doing = f"in env.step of evaluation environment {i}"
                o, r, terminated, truncated, _ = self.envs[i].step(a)
                self.progress += 1
                if not math.isfinite(r):
                    raise DataError(
                        f"evaluation: environment {self.env_id!r} (evaluation env {i}) gave a non-finite reward "
                        f"{r!r} at step {lens[i] + 1} of a greedy episode; expected finite rewards (the return "
                        f"would mean nothing). {_FIX.split(', or set')[0]}.", component="evaluation",
                        env_id=self.env_id)
                rets[i] += float(r)
                lens[i] += 1
                if terminated or truncated:
                    returns.append(rets[i])
                    lengths.append(lens[i])
                    if started < self.n_episodes:
                        self.doing = f"in env.reset of evaluation environment {i}"
                        obs[i] = np.asarray(self.envs[i].reset(seed=base + started)[0])
                        started += 1
                        rets[i], lens[i] = 0.0, 0
                        still.append(i)
                else:
                    obs[i] = np.asarray(o)
                    still.append(i)
            active = still
        self.doing = "idle"
        return EvalResult(tuple(returns), tuple(lengths))

    def close(self) -> None:
        for env in self.envs:
            env.close()
