"""Plain, serialisable values that describe a training run and where it runs.

* :class:`RunConfig` — *what* to train: environment, trainer, replay, batch and
  replay ratio, stop criteria, logging. Written by the user (or the composer).
* :class:`RuntimePlan` — *where and how*: devices of the replay manager (RM), the
  learner and the Data Storage (DS), thread counts, actors, and the protocol
  setting (1: RM and learner talk through the host; 2: co-located, direct).
  The composer produces it; a hand-written one is just as valid.

Both are frozen dataclasses with ``to_dict``/``from_dict`` and
``to_json``/``from_json`` round trips, validated on construction: every field
by its rule in ``_RULES`` (the shared validators of :mod:`pearl_core.validation`,
with the sane upper bounds of :data:`LIMITS`), which the Composer's setters
apply too (:func:`check_field`). A bad value raises :class:`SpecError` naming
the field, expected vs found, and the fix; whether the run fits *this* machine
is :func:`pearl_core.runtime.machine.check_machine`'s question.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from pearl_core import validation as v
from pearl_core.envs import check_env_options, json_mapping
from pearl_core.errors import SpecError

__all__ = ["LIMITS", "VECTOR_BACKENDS", "ReplayConfig", "RunConfig", "RuntimePlan", "Setting", "StopCriteria",
           "check_field"]

#: Sane upper bounds of the fields that size memory or processes (a typo such as ``10**12`` is refused
#: at construction, not when the run allocates); per-machine limits are :mod:`pearl_core.runtime.machine`'s.
LIMITS: Mapping[str, int] = {
    "batch_size": 2**24,        # rows per learner update
    "capacity": 2**40,          # replay slots
    "fanout": 2**16,            # sum-tree children per node
    "eval_episodes": 10_000,    # each is one evaluation environment
    "threads": v.MAX_THREADS,   # learner / RM threads (the hardware spec's cap on cores too)
    "n_actors": 16_384,         # actor processes
    "envs_per_actor": 65_536,   # environments stepped together by one actor
    "n_step": 1_000,            # environment steps summed into one transition (each env keeps n pending)
}


class Setting(enum.IntEnum):
    """The protocol setting of a parallel run (the paper's two settings).

    An ``int`` subclass: ``Setting.COLOCATED == 2``, and plans written as plain
    ints (JSON, older checkpoints) still read back.

    * ``THROUGH_HOST`` (1): the replay manager lives in the host process and the
      learner in its own; every batch and every priority update passes the host
      (RRQ, LAQ, LDQ).
    * ``COLOCATED`` (2): replay manager, Data Storage and learner share one worker
      on one device and talk directly; the host forwards only the actors' insertions.
    """

    THROUGH_HOST = 1
    COLOCATED = 2


def _require(cond: bool, owner: str, name: str, value: Any, expected: str) -> None:
    if not cond:
        raise SpecError(f"{owner}.{name} = {value!r} is invalid; expected {expected}.")


def _count(low: int, fix: str, high: int = v.MAX_COUNT):
    return lambda x, label, err: v.int_at_least(x, label, low, high, fix=fix, error=err)


def _optional(rule):
    return lambda x, label, err: None if x is None else rule(x, label, err)


#: The built-in trainers' short names (any case), accepted wherever a trainer's import path is.
BUILTIN_TRAINERS: dict[str, str] = {name.lower(): f"pearl_core.algorithms:{name}"
                                    for name in ("DQN", "DDPG", "TD3", "SAC")}


def resolve_trainer_name(x: Any) -> Any:
    """``x`` as an import path: a built-in trainer's short name (``"dqn"``, ``"SAC"``, ...) becomes
    ``"pearl_core.algorithms:<Name>"``; anything else is returned as it is (checked by the caller)."""
    if isinstance(x, str) and ":" not in x and x.strip().lower() in BUILTIN_TRAINERS:
        return BUILTIN_TRAINERS[x.strip().lower()]
    return x


def _trainer_path(x: Any, label: str, err: type[Exception]) -> str:
    v.text(x, label, expected="an import path 'package.module:ClassName'", fix="e.g. 'pearl_core.algorithms:DQN'",
           error=err)
    x = resolve_trainer_name(x)
    module, sep, name = x.partition(":")
    if not sep or not module.strip() or not name.strip():
        raise err(f"{label} = {x!r} is invalid; expected an import path 'package.module:ClassName' or a built-in "
                  f"trainer's name ({', '.join(sorted(n.upper() for n in BUILTIN_TRAINERS))}). "
                  "Fix: e.g. 'pearl_core.algorithms:DQN', or 'DQN'.")
    return x


#: The rule of every validated field, per class: ``rule(value, label, error) -> normalised value``.
#: The dataclasses below and the Composer's setters both check with these (:func:`check_field`).
#: How an actor steps its environments (``RuntimePlan.vector_backend``; :mod:`pearl_core.runtime.vector`).
VECTOR_BACKENDS = ("loop", "gym-sync", "gym-async", "envpool")

_RULES: dict[str, dict[str, Any]] = {
    "ReplayConfig": {
        "kind": lambda x, label, err: v.one_of(x, label, ("prioritized", "uniform"), error=err),
        "capacity": _count(1, "e.g. capacity=100_000", LIMITS["capacity"]),
        "fanout": _count(2, "the sum tree needs fanout >= 2, e.g. fanout=16", LIMITS["fanout"]),
        "alpha": lambda x, label, err: v.number(x, label, low=0.0, fix="e.g. alpha=0.6", error=err),
        "beta": lambda x, label, err: v.probability(x, label, fix="e.g. beta=0.4", error=err),
        "beta_final": lambda x, label, err: v.probability(x, label, fix="e.g. beta_final=1.0", error=err),
        "beta_steps": _optional(_count(1, "learner updates to anneal beta over, or None to anneal over the run")),
        "eps": lambda x, label, err: v.positive_number(x, label, fix="e.g. eps=1e-6", error=err),
        "stratified": lambda x, label, err: v.boolean(x, label, error=err),
        "frame_storage": lambda x, label, err: v.one_of(x, label, ("auto", "on", "off"), error=err),
        "n_step": _count(1, "environment steps per stored transition: 1 for one-step returns (the default), "
                            "e.g. n_step=3 for 3-step returns", LIMITS["n_step"]),
    },
    "StopCriteria": {
        "mean_return": _optional(lambda x, label, err: v.number(x, label, fix="a finite return threshold, or None",
                                                                error=err)),
        "window": _count(1, "episodes in the moving mean, e.g. 20"),
        "eval_return": _optional(lambda x, label, err: v.number(x, label, fix="a finite return threshold, or None",
                                                                error=err)),
        "eval_every": _optional(_count(1, "env steps between evaluations, e.g. 5000, or None (every "
                                          "5000 when eval_return is set, else none)")),
        "eval_episodes": _count(1, "episodes per evaluation, e.g. 20", LIMITS["eval_episodes"]),
        "max_env_steps": _optional(_count(1, "e.g. max_env_steps=100_000, or None")),
        "max_updates": _optional(_count(1, "e.g. max_updates=100_000, or None")),
        "max_wall_time_s": _optional(lambda x, label, err: v.positive_number(x, label, fix="seconds, e.g. 600, or None",
                                                                             error=err)),
    },
    "RunConfig": {
        "env_id": lambda x, label, err: v.text(x, label, expected="a gymnasium id such as 'CartPole-v1'",
                                               fix="pass the id of a registered environment", error=err),
        "trainer": _trainer_path,
        "batch_size": _count(1, "e.g. batch_size=64", LIMITS["batch_size"]),
        "learning_starts": _count(0, "env steps before the first update, e.g. learning_starts=1000"),
        "random_steps": _count(0, "env steps of uniformly random actions at the start, e.g. random_steps=10_000 "
                                  "(0: none)"),
        "replay_ratio": lambda x, label, err: v.number(x, label, low=1e-6, high=1e6, fix="learner updates per env "
                                                       "step, e.g. replay_ratio=0.5 (one update per 2 env steps)",
                                                       error=err),
        "train_every": _count(1, "e.g. train_every=256"),
        "weight_sync_every": _count(1, "e.g. weight_sync_every=10"),
        "seed": lambda x, label, err: v.seed(x, label, error=err),
        "log_dir": lambda x, label, err: v.path(x, label, fix="a directory path, e.g. 'runs/demo'", error=err),
        "checkpoint_every": _optional(_count(1, "env steps between checkpoints (0 would mean never, a negative "
                                                "value every step); use None for only the final checkpoint")),
        "save_replay": lambda x, label, err: v.boolean(x, label, error=err),
        "on_nonfinite": lambda x, label, err: v.one_of(x, label, ("stop", "drop"), error=err),
    },
    "RuntimePlan": {
        "vector_backend": lambda x, label, err: v.one_of(x, label, VECTOR_BACKENDS, error=err),
        "learner_threads": _count(1, "torch threads of the learner, e.g. 1", LIMITS["threads"]),
        "rm_threads": _count(1, "threads of the replay manager, e.g. 1", LIMITS["threads"]),
        "n_actors": _count(1, "actor processes, e.g. n_actors=4", LIMITS["n_actors"]),
        "envs_per_actor": _count(1, "e.g. envs_per_actor=1", LIMITS["envs_per_actor"]),
        "insert_batch": _count(1, "transitions per actor message, e.g. 32", LIMITS["batch_size"]),
        "max_in_flight": _count(0, "sampled batches ahead of the last priority update, e.g. 1", 1024),
        "queue_size": _count(1, "slots per queue, e.g. 8", 65_536),
    },
}


def check_field(owner: str, name: str, value: Any, *, label: str | None = None,
                error: type[Exception] = SpecError) -> Any:
    """Check ``value`` against the rule of field ``owner.name`` and return it normalised.

    ``owner`` is ``"RunConfig"``, ``"ReplayConfig"``, ``"StopCriteria"`` or
    ``"RuntimePlan"``. ``label`` names the value in the message (default
    ``"<owner>.<name>"``); ``error`` is the class raised (the Composer passes
    :class:`~pearl_core.errors.ComposerError`).
    """
    return _RULES[owner][name](value, label or f"{owner}.{name}", error)


def _check_fields(obj: Any) -> None:
    owner = type(obj).__name__
    for name in _RULES[owner]:
        object.__setattr__(obj, name, check_field(owner, name, getattr(obj, name)))


class _Serialisable:
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[arg-type]

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, **kw)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        if not isinstance(data, Mapping):
            raise SpecError(f"{cls.__name__}.from_dict: expected a mapping of field names to values; found a value "
                            f"of type {type(data).__name__}. Fix: pass what to_dict() returned.")
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(map(str, set(data) - known))
        if unknown:
            raise SpecError(f"{cls.__name__}: unknown field(s) {unknown}; known: {sorted(known)}.")
        required = sorted(f.name for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                          if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                          and f.name not in data)
        if required:
            raise SpecError(f"{cls.__name__}: missing field(s) {required}. Fix: give them, e.g. as to_dict() wrote.")
        return cls(**_nested(cls, dict(data)))

    @classmethod
    def from_json(cls, text: str):
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise SpecError(f"{cls.__name__}.from_json: not valid JSON ({exc}). Fix: pass what to_json() wrote.") \
                from exc
        return cls.from_dict(data)


def _nested(cls, data: dict) -> dict:
    for f in dataclasses.fields(cls):
        sub = {"replay": ReplayConfig, "stop": StopCriteria}.get(f.name)
        if sub is not None and isinstance(data.get(f.name), Mapping):
            data[f.name] = sub.from_dict(data[f.name])
    return data


@dataclass(frozen=True)
class ReplayConfig(_Serialisable):
    """Replay choice and hyper-parameters.

    ``beta_steps=None`` anneals β to ``beta_final`` over the learner updates the
    run is expected to make (``max_env_steps * replay_ratio``), or 100k updates.

    ``frame_storage``: ``"auto"`` (default) stores stacked image frames once each
    (:class:`~pearl_core.replay.frames.FrameStorage`) when the observations are
    stacks of frames of at least 32x32 of an integer dtype (the ``"atari"``
    preset's ``(4, 84, 84)``) and the Data Storage is in host memory; ``"on"`` for
    any observation in host memory, ``"off"`` never.
    ``n_step`` (default 1): n-step returns. The actors sum each environment's last
    ``n`` rewards, ``R_t = sum_{j<k} gamma^j r_{t+j}``, and store ``(s_t, a_t, R_t,
    s_{t+k}, done, k)`` with ``k = n`` (fewer at an episode's end), so uniform and
    prioritized replay both hold n-step transitions and the learner bootstraps with
    ``gamma ** k``. It lives here because it decides what the replay holds. The
    trainer must declare ``supports_n_step = True`` for ``n_step > 1`` (the built-in
    DQN, DDPG, TD3 and SAC do); ``gamma`` is the trainer's.
    """

    kind: str = "prioritized"
    capacity: int = 100_000
    fanout: int = 16
    alpha: float = 0.6
    beta: float = 0.4
    beta_final: float = 1.0
    beta_steps: int | None = None
    eps: float = 1e-6
    stratified: bool = True
    frame_storage: str = "auto"
    n_step: int = 1

    def __post_init__(self):
        _check_fields(self)


#: Env steps between evaluations when ``eval_return`` is set and ``eval_every`` is not.
DEFAULT_EVAL_EVERY = 5_000


@dataclass(frozen=True)
class StopCriteria(_Serialisable):
    """When a run ends: the first criterion met wins. At least one must be set.

    Attributes:
        mean_return: stop when the mean return of the last ``window`` training
            episodes is ``>=`` this.
        window: episodes in that mean.
        eval_return: stop when a greedy evaluation of ``eval_episodes`` episodes,
            run every ``eval_every`` env steps, averages ``>=`` this.
        eval_every: env steps between greedy evaluations (logged to ``evals.csv``).
            Given, the run evaluates whether or not ``eval_return`` is set;
            ``None`` (default): every :data:`DEFAULT_EVAL_EVERY` env steps when
            ``eval_return`` is set, else never.
        max_env_steps / max_updates / max_wall_time_s: budgets.
    """

    mean_return: float | None = None
    window: int = 20
    eval_return: float | None = None
    eval_every: int | None = None
    eval_episodes: int = 20
    max_env_steps: int | None = None
    max_updates: int | None = None
    max_wall_time_s: float | None = None

    @property
    def evaluates(self) -> bool:
        """Whether the run evaluates greedily: ``eval_return`` or ``eval_every`` is set."""
        return self.eval_return is not None or self.eval_every is not None

    @property
    def eval_interval(self) -> int:
        """Env steps between evaluations: ``eval_every``, else :data:`DEFAULT_EVAL_EVERY`."""
        return DEFAULT_EVAL_EVERY if self.eval_every is None else self.eval_every

    def __post_init__(self):
        _check_fields(self)
        limits = (self.mean_return, self.eval_return, self.max_env_steps, self.max_updates, self.max_wall_time_s)
        if all(x is None for x in limits):
            raise SpecError("StopCriteria: no criterion is set, so the run would never end; expected at least one of "
                            "mean_return, eval_return, max_env_steps, max_updates, max_wall_time_s. "
                            "Fix: e.g. StopCriteria(max_env_steps=100_000).")


@dataclass(frozen=True)
class RunConfig(_Serialisable):
    """What to train.

    Attributes:
        env_id: a gymnasium environment id, e.g. ``"CartPole-v1"`` (``"ALE/..."`` and ``"MinAtar/..."``
            ids register their families themselves, :mod:`pearl_core.envs`).
        env_kwargs: keyword arguments of ``gymnasium.make`` (JSON values only).
        env_wrappers: wrappers applied in order, each a preset name (``"atari"``, ``"minatar"``), an
            import path ``"package.module:callable"``, or a dict ``{"wrapper": path, "kwargs": {...},
            "envs": "all" | "training" | "evaluation"}`` (keyword arguments, and which environments it
            wraps); ``None`` (default) applies the id's family
            presets (``"atari"`` for ``ALE/...``), ``()`` none (:func:`pearl_core.envs.make_env`).
        trainer: import path of the trainer class, ``"package.module:ClassName"``.
        trainer_kwargs: hyper-parameters passed to the trainer (JSON values only).
        replay: the replay configuration.
        batch_size: samples per learner update.
        learning_starts: env steps collected before the first update.
        random_steps: env steps at the start of a run in which the actors act uniformly at random
            (each environment's own seeded action space), as stable-baselines3 does before
            ``learning_starts``; ``0`` (default): the policy (with its exploration) acts from the first step.
        replay_ratio: learner updates per env step (e.g. 0.5 = one update per 2 steps).
        train_every: env steps between bursts of updates in the serial runtime
            (``train_every * replay_ratio`` updates per burst); the parallel
            runtime keeps the ratio continuously.
        weight_sync_every: learner updates between pushes of fresh weights to actors.
        stop: stop criteria.
        seed: base seed, ``0 <= seed < 2**32`` (actors and evaluation derive theirs from it).
        log_dir: where CSV/TensorBoard logs, the learning curve and checkpoints go.
        checkpoint_every: env steps between checkpoints, ``>= 1`` (``None``: only the final one).
        save_replay: include the replay contents in checkpoints.
        on_nonfinite: what an actor does with a transition whose observation,
            action or reward is NaN/inf: ``"stop"`` (default: the run ends with an
            error naming the environment, actor and step, after a checkpoint) or
            ``"drop"`` (the transition is not stored; each drop is counted and logged).
    """

    env_id: str
    trainer: str
    trainer_kwargs: Mapping[str, Any] = field(default_factory=dict)
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    env_wrappers: "tuple[str | dict[str, Any], ...] | None" = None
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    batch_size: int = 64
    learning_starts: int = 1_000
    random_steps: int = 0
    replay_ratio: float = 0.5
    train_every: int = 256
    weight_sync_every: int = 10
    stop: StopCriteria = field(default_factory=lambda: StopCriteria(max_env_steps=100_000))
    seed: int = 0
    log_dir: str = "runs/pearl"
    checkpoint_every: int | None = None
    save_replay: bool = False
    on_nonfinite: str = "stop"

    def __post_init__(self):
        for name, cls in (("replay", ReplayConfig), ("stop", StopCriteria)):
            value = getattr(self, name)
            if isinstance(value, Mapping):
                object.__setattr__(self, name, cls.from_dict(value))
            elif not isinstance(value, cls):
                raise SpecError(f"RunConfig.{name} = {value!r:.80} is invalid; expected a {cls.__name__} (found "
                                f"{v.a_type(value)}). Fix: e.g. {name}={cls.__name__}(...).")
        _check_fields(self)
        kwargs = self.trainer_kwargs
        object.__setattr__(self, "trainer_kwargs", json_mapping(
            kwargs, "RunConfig.trainer_kwargs", f"found {v.a_type(kwargs)}", "e.g. trainer_kwargs={'lr': 1e-3}"))
        env_kwargs, env_wrappers = check_env_options(self.env_kwargs, self.env_wrappers)
        object.__setattr__(self, "env_kwargs", env_kwargs)
        object.__setattr__(self, "env_wrappers", env_wrappers)

    @property
    def env_options(self) -> dict[str, Any]:
        """``make_env``/``env_spaces`` keyword arguments of this run's environments:
        ``make_env(cfg.env_id, seed, **cfg.env_options)``."""
        return {"kwargs": self.env_kwargs, "wrappers": self.env_wrappers}


@dataclass(frozen=True)
class RuntimePlan(_Serialisable):
    """Where each primitive runs and how the runtime is wired.

    Every device is a device string (``"cpu"``, ``"cuda:0"``, ``"fpga:0"``); the
    runtime asks the backend that owns it (:mod:`pearl_core.placement`).

    Attributes:
        rm_backend: backend name of the replay manager's sum tree (``"cpu"``, ...).
        learner_device: device of the learner (``"cpu"``, ``"cuda:0"``, ``"fpga:0"``).
        storage_device: where the Data Storage lives (``"cpu"`` = host memory).
        rm_device: device of the replay manager; ``None`` (default) means
            ``"cpu"`` for ``rm_backend="cpu"`` and ``"<rm_backend>:0"`` otherwise.
        backends: backend name per device kind, when the plan chose one
            (``{"fpga": "fpga"}``); kinds not named use their one available backend.
        device_config: the plan's configuration of the devices, per primitive:
            ``{"rm": {...}, "learner": {...}, "storage": {...}}`` (the composer's
            matrix-row ``config``, e.g. an FPGA's ``learner_dp``/``learner_uf``); the
            learner's reaches :meth:`~pearl_core.backend.Backend.device_trainer`.
        setting: a :class:`Setting` (an int given here is converted):
            ``THROUGH_HOST`` (1) = RM and learner talk through the host (RRQ/LAQ/LDQ
            queues); ``COLOCATED`` (2) = RM, DS and learner in one worker, the host
            forwards only the actors' insertions.
        learner_threads: torch intra-op threads of the learner.
        rm_threads: threads of the RM's batched tree operations.
        n_actors: actor processes.
        envs_per_actor: environments stepped together (batched inference) in each actor.
        vector_backend: how an actor (and the serial runtime) steps its environments, one of
            :data:`VECTOR_BACKENDS`: ``"loop"`` (a Python loop, the default), ``"gym-sync"`` /
            ``"gym-async"`` (gymnasium's SyncVectorEnv / AsyncVectorEnv; async only in the serial
            runtime), ``"envpool"`` (EnvPool's own implementation of the id, where it has it and no
            PEARL preset, wrapper or kwarg applies). See :mod:`pearl_core.runtime.vector`.
        insert_batch: transitions per actor message (DCQ batch).
        max_in_flight: sampled batches allowed ahead of the last priority update
            (1 = sampling for t+1 may start before update t lands).
        queue_size: capacity of every queue (all queues are bounded).
    """

    rm_backend: str = "cpu"
    learner_device: str = "cpu"
    storage_device: str = "cpu"
    setting: Setting = Setting.THROUGH_HOST
    learner_threads: int = 1
    rm_threads: int = 1
    n_actors: int = 1
    envs_per_actor: int = 1
    insert_batch: int = 32
    max_in_flight: int = 1
    queue_size: int = 8
    rm_device: str | None = None
    backends: Mapping[str, str] = field(default_factory=dict)
    device_config: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    vector_backend: str = "loop"

    def __post_init__(self):
        o = "RuntimePlan"
        for name in ("rm_backend", "learner_device", "storage_device"):
            v = getattr(self, name)
            _require(isinstance(v, str) and v != "", o, name, v, "a backend name or device string such as 'cpu'")
        if self.rm_device is None:
            object.__setattr__(self, "rm_device", "cpu" if self.rm_backend == "cpu" else f"{self.rm_backend}:0")
        _require(isinstance(self.rm_device, str) and self.rm_device != "", o, "rm_device", self.rm_device,
                 "None or a device string such as 'fpga:0'")
        _require(isinstance(self.backends, Mapping) and all(isinstance(k, str) and isinstance(v, str)
                                                             for k, v in self.backends.items()),
                 o, "backends", self.backends, "a mapping device kind -> backend name")
        _require(isinstance(self.device_config, Mapping) and set(self.device_config) <= {"rm", "learner", "storage"}
                 and all(isinstance(v, Mapping) for v in self.device_config.values()), o, "device_config",
                 self.device_config, "a mapping with keys among 'rm', 'learner', 'storage' of config mappings")
        try:
            json.dumps({k: dict(v) for k, v in self.device_config.items()})
        except (TypeError, ValueError) as exc:
            raise SpecError(f"RuntimePlan.device_config must hold JSON values only; {exc}.") from exc
        object.__setattr__(self, "backends", dict(self.backends))
        object.__setattr__(self, "device_config", {k: dict(v) for k, v in self.device_config.items()})
        _require(not isinstance(self.setting, bool) and self.setting in (1, 2), o, "setting", self.setting,
                 "1 (Setting.THROUGH_HOST) or 2 (Setting.COLOCATED)")
        object.__setattr__(self, "setting", Setting(self.setting))
        _check_fields(self)
        _require(self.setting == 1 or _same_device(self.rm_device, self.learner_device), o, "setting",
                 self.setting, f"setting 2 only when RM and learner share a device (rm_device={self.rm_device!r}, "
                 f"learner_device={self.learner_device!r}); fix: use setting=1")

    def learner_config(self) -> dict[str, Any]:
        """What :meth:`~pearl_core.backend.Backend.device_trainer` gets: the learner device's config and the setting."""
        return {**self.device_config.get("learner", {}), "setting": int(self.setting)}


def _same_device(a: str, b: str) -> bool:
    def norm(d: str) -> str:
        return d if ":" in d else f"{d}:0"

    return norm(a) == norm(b)
