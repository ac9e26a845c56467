"""Vector back ends of the :class:`~pearl_core.runtime.acting.Collector`: how an actor's environments step.

The collector keeps everything that gives a transition its meaning (NaN screening and
drops, episode statistics, n-step aggregation, the warm-up); a back end only steps the
environments. The seam is :class:`VectorEnvs`:

* ``reset(seeds) -> obs``: every environment's first observation, environment ``i``
  reset with ``seeds[i]``;
* ``step(actions) -> (next_obs, rewards, terminated, truncated, new_obs)``: ``next_obs``
  is what each step returned, at an episode end the **true final observation**;
  ``new_obs`` is what the next step acts on (the reset observation where an episode
  ended, ``next_obs`` elsewhere); ``rewards`` are float64 as the environments gave them;
* ``sample_actions()``: one uniformly random action per environment, from its own action
  space seeded with its seed (the warm-up, ``RunConfig.random_steps``).

Back ends (``RuntimePlan.vector_backend``, :data:`VECTOR_BACKENDS`):

* ``"loop"`` (default) — :class:`LoopEnvs`: ``env.step`` for each environment in turn,
  ``env.reset()`` where an episode ends.
* ``"gym-sync"`` / ``"gym-async"`` — :class:`GymVectorEnvs`: gymnasium's ``SyncVectorEnv``
  / ``AsyncVectorEnv`` (one subprocess per environment) over the same :func:`make_env`
  environments, in gymnasium's ``SAME_STEP`` autoreset mode: a step that ends an episode
  resets that environment at once and returns the reset observation, the final one in
  ``info["final_obs"]`` (masked by ``info["_final_obs"]``); the back end puts the final one
  in ``next_obs``. Seeds: ``reset(seed=[...])``, one per environment, as the loop does;
  the same unseeded ``env.reset()`` after an episode end. On the same seeds and actions
  both are bitwise equal to ``"loop"``. ``"gym-async"`` cannot run inside the parallel
  runtime's actors (daemon processes may not start subprocesses): use it in the serial runtime.
* ``"envpool"`` — :class:`EnvPoolEnvs`: EnvPool's C++ implementation of the id
  (``envpool.make_gymnasium``). EnvPool autoresets on the *next* step: the step after an
  episode end ignores that environment's action and returns its reset observation (reward 0,
  ``elapsed_step`` 0). The back end takes that reset step at once for the environments that
  just ended (``step(actions, env_id=ended)``), so ``next_obs`` is the final observation, the
  reset observation becomes ``new_obs``, and no reset step is ever a transition. Seeds:
  EnvPool seeds environment ``i`` with ``seed + i`` in its own RNG, so the collector's seeds
  must be consecutive (:func:`~pearl_core.runtime.acting.actor_env_seeds` are). EnvPool's
  environments are its own implementations: equal to gymnasium's in distribution, never
  bitwise. Only ids EnvPool has, and only when no PEARL preset, wrapper or keyword argument
  would make PEARL's environment differ (:func:`check_vector_backend`). One worker thread
  (``num_threads=1``): an actor is one process, budgeted one core.

Evaluation (:class:`~pearl_core.runtime.acting.Evaluator`) always plays gymnasium's environments
from :func:`make_env`, whatever the back end: with ``"envpool"`` a policy trained on EnvPool's
implementation is scored on gymnasium's.

The composer picks a back end with :func:`choose_vector_backend`; a user can force any of them.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

from pearl_core.envs import check_env_options, default_wrappers, make_env
from pearl_core.errors import SpecError
from pearl_core.runtime.config import VECTOR_BACKENDS
from pearl_core.runtime.messages import ALL_ENVS, Phase

__all__ = ["MEASURED_FASTER_THAN_LOOP", "VECTOR_BACKENDS", "EnvPoolEnvs", "GymVectorEnvs", "LoopEnvs", "VectorEnvs",
           "check_vector_backend", "choose_vector_backend", "envpool_available", "envpool_has", "make_vector_envs"]


_ENV_STEP, _ENV_RESET = int(Phase.ENV_STEP), int(Phase.ENV_RESET)


def _no_mark(phase: int, arg: int = 0) -> None:
    pass


class VectorEnvs(Protocol):
    """What a :class:`~pearl_core.runtime.acting.Collector` steps (see the module docstring)."""

    n_envs: int
    observation_space: Any  #: one environment's
    action_space: Any  #: one environment's
    env_id: str | None

    def reset(self, seeds: Sequence[int | None]) -> np.ndarray: ...

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...

    def sample_actions(self) -> np.ndarray: ...

    def close(self) -> None: ...


class LoopEnvs:
    """Today's back end: a Python loop over gymnasium environments (``mark`` before every step and reset)."""

    def __init__(self, envs: Sequence[Any], mark: Callable[[int, int], None] | None = None):
        self.envs = list(envs)
        self.n_envs = len(self.envs)
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        self.env_id = getattr(getattr(self.envs[0], "spec", None), "id", None)
        self._discrete = hasattr(self.action_space, "n")
        self.mark = mark or _no_mark
        self._dtype: Any = None

    def reset(self, seeds: Sequence[int | None]) -> np.ndarray:
        first = []
        for i, (env, s) in enumerate(zip(self.envs, seeds)):
            self.mark(_ENV_RESET, i)
            first.append(env.reset(seed=s)[0])
        obs = np.stack([np.asarray(o) for o in first])
        self._dtype = obs.dtype
        return obs

    def step(self, actions):
        n, mark = self.n_envs, self.mark
        next_obs: np.ndarray | None = None
        new_obs: np.ndarray | None = None
        rewards = np.empty(n, np.float64)
        terminated = np.zeros(n, np.bool_)
        truncated = np.zeros(n, np.bool_)
        for i, env in enumerate(self.envs):
            a = int(actions[i]) if self._discrete else actions[i]
            mark(_ENV_STEP, i)
            o, r, term, trunc, _ = env.step(a)
            if next_obs is None:
                o0 = np.asarray(o)
                both = np.empty((2, n, *o0.shape), self._dtype if self._dtype is not None else o0.dtype)
                next_obs, new_obs = both[0], both[1]
            rewards[i] = float(r)
            next_obs[i] = o
            terminated[i], truncated[i] = term, trunc
            if term or trunc:
                mark(_ENV_RESET, i)
                o = env.reset()[0]
            new_obs[i] = o  # type: ignore[index]
        return next_obs, rewards, terminated, truncated, new_obs

    def sample_actions(self) -> np.ndarray:
        return np.stack([np.asarray(env.action_space.sample()) for env in self.envs])

    def close(self) -> None:
        for env in self.envs:
            env.close()


class _SeededSpaces:
    """One copy of the action space per environment, seeded with its seed as :func:`make_env` seeds an
    environment's own (so the warm-up draws the loop back end's actions)."""

    def __init__(self, space: Any, seeds: Sequence[int | None]):
        self.spaces = []
        for s in seeds:
            sp = copy.deepcopy(space)
            sp.seed(None if s is None else int(s))
            self.spaces.append(sp)

    def sample(self) -> np.ndarray:
        return np.stack([np.asarray(sp.sample()) for sp in self.spaces])


class GymVectorEnvs:
    """gymnasium's ``SyncVectorEnv`` (``asynchronous=False``) or ``AsyncVectorEnv`` in ``SAME_STEP`` autoreset mode.

    Args:
        env_fns: one ``callable() -> env`` per environment (picklable for the async one).
        seeds: each environment's seed (its warm-up action space is seeded with it).
        mark: called once before each vector step and reset (with :data:`~pearl_core.runtime.messages.ALL_ENVS`).
    """

    def __init__(self, env_fns: Sequence[Callable[[], Any]], seeds: Sequence[int | None], *,
                 asynchronous: bool = False, mark: Callable[[int, int], None] | None = None,
                 env_id: str | None = None):
        from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

        if asynchronous:
            import multiprocessing as mp

            if mp.current_process().daemon:
                raise SpecError("vector_backend 'gym-async' cannot run here: this is a daemon process (a parallel "
                                "runtime's actor), which may not start the subprocesses AsyncVectorEnv needs. Fix: "
                                "use vector_backend='gym-sync' (or 'envpool') with the parallel runtime, or "
                                "'gym-async' with the serial runtime.")
            self.vec = AsyncVectorEnv(list(env_fns), autoreset_mode=AutoresetMode.SAME_STEP)
        else:
            self.vec = SyncVectorEnv(list(env_fns), autoreset_mode=AutoresetMode.SAME_STEP)
        self.n_envs = self.vec.num_envs
        self.observation_space = self.vec.single_observation_space
        self.action_space = self.vec.single_action_space
        self.env_id = env_id
        self._spaces = _SeededSpaces(self.action_space, seeds)
        self.mark = mark or _no_mark

    def reset(self, seeds: Sequence[int | None]) -> np.ndarray:
        self.mark(_ENV_RESET, ALL_ENVS)
        obs, _ = self.vec.reset(seed=[None if s is None else int(s) for s in seeds])
        return np.asarray(obs)

    def step(self, actions):
        self.mark(_ENV_STEP, ALL_ENVS)
        obs, rewards, terminated, truncated, info = self.vec.step(np.asarray(actions))
        new_obs = np.asarray(obs)
        ended = np.logical_or(terminated, truncated)
        next_obs = new_obs
        if ended.any():
            next_obs = new_obs.copy()
            finals, mask = info["final_obs"], info["_final_obs"]
            for i in np.flatnonzero(mask):
                next_obs[i] = finals[i]
        return next_obs, np.asarray(rewards, np.float64), np.asarray(terminated, np.bool_), \
            np.asarray(truncated, np.bool_), new_obs

    def sample_actions(self) -> np.ndarray:
        return self._spaces.sample()

    def close(self) -> None:
        self.vec.close()


def envpool_available() -> bool:
    """Whether EnvPool can be imported here."""
    try:
        import envpool  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken install is as good as none
        return False
    return True


@functools.lru_cache(maxsize=None)
def _envpool_ids() -> frozenset[str]:
    import envpool

    return frozenset(envpool.list_all_envs())


def envpool_has(env_id: str) -> bool:
    """Whether EnvPool is installed and implements ``env_id`` under that very id."""
    return envpool_available() and isinstance(env_id, str) and env_id in _envpool_ids()


def _envpool_problem(env_id: str, env_kwargs: Mapping[str, Any] | None, env_wrappers: Sequence[str] | None
                     ) -> str | None:
    """Why ``"envpool"`` cannot run this environment as PEARL would build it; ``None`` when it can."""
    if not envpool_available():
        return ("EnvPool is not installed. Fix: pip install envpool (Linux wheels), or use vector_backend="
                "'gym-sync' or 'loop'.")
    if not envpool_has(env_id):
        return (f"EnvPool has no environment {env_id!r} (envpool.list_all_envs() lists its ids; its Atari games "
                "are 'Pong-v5' and so on, with EnvPool's own preprocessing, not PEARL's 'ALE/...' ids and presets). "
                "Fix: use vector_backend='gym-sync' or 'loop'.")
    wrappers = default_wrappers(env_id) if env_wrappers is None else tuple(env_wrappers)
    if wrappers or env_kwargs:
        return (f"PEARL builds {env_id!r} with wrappers {list(wrappers)} and kwargs {dict(env_kwargs or {})}, which "
                "EnvPool's environment would not apply, so its environment would differ. Fix: use vector_backend="
                "'gym-sync' or 'loop', or drop the env options.")
    return None


def check_vector_backend(backend: Any, env_id: str | None = None, env_kwargs: Mapping[str, Any] | None = None,
                         env_wrappers: Sequence[str] | None = None, *, label: str = "RuntimePlan.vector_backend",
                         error: type[Exception] = SpecError) -> str:
    """``backend`` checked (and, with ``env_id``, checked against the run's environment); returns it.

    Raises:
        error: not one of :data:`VECTOR_BACKENDS`; or ``"envpool"`` where EnvPool is not
            installed, lacks the id, or a preset/wrapper/kwarg would make it differ.
    """
    if backend not in VECTOR_BACKENDS:
        raise error(f"{label} = {backend!r}; expected one of {list(VECTOR_BACKENDS)}. Fix: e.g. "
                    f"vector_backend='loop' (a Python loop over the envs, the default) or 'gym-sync'.")
    if backend == "envpool" and env_id is not None:
        env_kwargs, env_wrappers = check_env_options(env_kwargs, env_wrappers)
        why = _envpool_problem(env_id, env_kwargs, env_wrappers)
        if why is not None:
            raise error(f"{label} = 'envpool' cannot run environment {env_id!r}: {why}")
    return backend


class EnvPoolEnvs:
    """EnvPool's environments behind the seam (see the module docstring for its autoreset handling).

    Args:
        env_id: an id EnvPool has.
        seeds: consecutive seeds (EnvPool seeds environment ``i`` with ``seeds[0] + i``).
        kwargs: extra ``envpool.make_gymnasium`` arguments; ``num_threads`` defaults to 1 (an actor
            is one process, budgeted one core; EnvPool's own default, a thread per environment, was
            slower on this 2-core machine: benchmarks/README.md).
    """

    def __init__(self, env_id: str, seeds: Sequence[int | None], *, mark: Callable[[int, int], None] | None = None,
                 **kwargs: Any):
        import envpool

        n = len(seeds)
        base = 0 if seeds[0] is None else int(seeds[0])
        if any(s is not None and int(s) != base + i for i, s in enumerate(seeds)):
            raise SpecError(f"vector_backend 'envpool' seeds environment i with seed + i; the seeds {list(seeds)} are "
                            "not consecutive. Fix: use consecutive seeds (actor_env_seeds gives them).")
        kwargs.setdefault("num_threads", 1)  # an actor is one process on one core (EnvPool's default: a thread per env)
        self.pool = envpool.make_gymnasium(env_id, num_envs=n, batch_size=n, seed=base, **kwargs)
        self.n_envs = n
        self.env_id = env_id
        self.observation_space = self.pool.observation_space
        self.action_space = self.pool.action_space
        self._spaces = _SeededSpaces(self.action_space, [base + i for i in range(n)])
        self.mark = mark or _no_mark
        self._ids = np.arange(n, dtype=np.int32)

    def reset(self, seeds: Sequence[int | None]) -> np.ndarray:
        self.mark(_ENV_RESET, ALL_ENVS)
        obs, info = self.pool.reset()
        return self._ordered(np.asarray(obs), info)

    @staticmethod
    def _ordered(obs: np.ndarray, info: Mapping[str, Any], ids: np.ndarray | None = None) -> np.ndarray:
        got = np.asarray(info["env_id"])
        want = np.arange(len(got)) if ids is None else ids
        if np.array_equal(got, want):
            return obs
        out = np.empty_like(obs)
        pos = {int(e): k for k, e in enumerate(got)}
        for k, e in enumerate(want):
            out[k] = obs[pos[int(e)]]
        return out

    def step(self, actions):
        self.mark(_ENV_STEP, ALL_ENVS)
        actions = np.asarray(actions)
        obs, rewards, terminated, truncated, info = self.pool.step(actions, self._ids)
        got = np.asarray(info["env_id"])
        if not np.array_equal(got, self._ids):  # back in env order
            order = np.argsort(got)
            obs, rewards, terminated, truncated = obs[order], rewards[order], terminated[order], truncated[order]
        next_obs = np.asarray(obs)
        ended = np.logical_or(terminated, truncated)
        new_obs = next_obs
        if ended.any():  # EnvPool's reset step for these (their actions are ignored), taken now
            ids = self._ids[ended]
            self.mark(_ENV_RESET, int(ids[0]))
            o, _, _, _, info2 = self.pool.step(actions[ended], ids)
            new_obs = next_obs.copy()
            new_obs[ended] = self._ordered(np.asarray(o), info2, ids)
        return next_obs, np.asarray(rewards, np.float64), np.asarray(terminated, np.bool_), \
            np.asarray(truncated, np.bool_), new_obs

    def sample_actions(self) -> np.ndarray:
        return self._spaces.sample()

    def close(self) -> None:
        close = getattr(self.pool, "close", None)
        if close is not None:
            close()


def make_vector_envs(backend: str, env_id: str, seeds: Sequence[int], env_options: Mapping[str, Any] | None = None,
                     *, mark: Callable[[int, int], None] | None = None) -> VectorEnvs:
    """The environments of one collector on ``backend`` (:data:`VECTOR_BACKENDS`), env ``i`` seeded ``seeds[i]``.

    ``env_options`` are ``RunConfig.env_options`` (``{"kwargs": ..., "wrappers": ...}``).

    Raises:
        SpecError: as :func:`check_vector_backend`, or as :func:`make_env`.
    """
    options = dict(env_options or {})
    check_vector_backend(backend, env_id, options.get("kwargs"), options.get("wrappers"))
    if backend == "loop":
        envs: list = []
        try:
            envs += [make_env(env_id, s, **options) for s in seeds]
        except BaseException:
            for e in envs:
                e.close()
            raise
        return LoopEnvs(envs, mark)
    if backend == "envpool":
        return EnvPoolEnvs(env_id, seeds, mark=mark)
    make_env(env_id, **options).close()  # a bad id or option reads as make_env's error, here
    fns = [functools.partial(make_env, env_id, s, **options) for s in seeds]
    return GymVectorEnvs(fns, seeds, asynchronous=backend == "gym-async", mark=mark, env_id=env_id)


#: Which back ends stepped one actor's 8 CartPole envs faster than the loop back end, measured with
#: benchmarks/vector_actors.py on the machine the rule was set on (2 shared CPUs; benchmarks/README.md,
#: "Vector actors"): gym-sync 0.76x and EnvPool 0.69x of the loop's env steps/s, so neither. Flip one
#: after measuring it faster on the machines PEARL plans for; the composer's rule reads this.
MEASURED_FASTER_THAN_LOOP: dict[str, bool] = {"gym-sync": False, "envpool": False}


def choose_vector_backend(env_id: str, envs_per_actor: int, env_kwargs: Mapping[str, Any] | None = None,
                          env_wrappers: Sequence[str] | None = None) -> tuple[str, str]:
    """The composer's rule: ``(backend, why)`` for an actor stepping ``envs_per_actor`` envs of ``env_id``.

    * one environment: ``"loop"`` (nothing to vectorise);
    * more: ``"envpool"`` where EnvPool is installed, has the id, no PEARL preset, wrapper or kwarg
      would make its environment differ, and it was measured faster than the loop
      (:data:`MEASURED_FASTER_THAN_LOOP`); else ``"gym-sync"`` if it was measured faster than the
      loop; else ``"loop"``.

    ``"gym-async"`` is never chosen (only the serial runtime can run it, and it was the slowest);
    a user can force any back end (``Composer.set_actors(vector_backend=...)``, ``--vector-backend``).
    """
    if int(envs_per_actor) <= 1:
        return "loop", "one environment per actor: nothing to vectorise"
    try:
        kwargs, wrappers = check_env_options(env_kwargs, env_wrappers)
        problem = _envpool_problem(env_id, kwargs, wrappers)
    except SpecError as exc:
        problem = str(exc)
    if problem is None and MEASURED_FASTER_THAN_LOOP["envpool"]:
        return "envpool", f"EnvPool has {env_id!r}, no PEARL preset, wrapper or kwarg changes it, measured faster"
    if problem is None:
        problem = "EnvPool could run it but was not measured faster than the loop"
    if MEASURED_FASTER_THAN_LOOP["gym-sync"]:
        return "gym-sync", f"not EnvPool ({problem}); gymnasium's SyncVectorEnv measured faster than the loop"
    return "loop", f"not EnvPool ({problem}); gymnasium's SyncVectorEnv was not measured faster than the loop"
