"""Plain, serialisable values that describe a training run and where it runs.

* :class:`RunConfig` — *what* to train: environment, trainer, replay, batch and
  replay ratio, stop criteria, logging. Written by the user (or the composer).
* :class:`RuntimePlan` — *where and how*: devices of the replay manager (RM), the
  learner and the Data Storage (DS), thread counts, actors, and the protocol
  setting (1: RM and learner talk through the host; 2: co-located, direct).
  The composer produces it; a hand-written one is just as valid.

Both are frozen dataclasses with ``to_dict``/``from_dict`` and
``to_json``/``from_json`` round trips, validated on construction.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from pearl_core.errors import SpecError

__all__ = ["ReplayConfig", "RunConfig", "RuntimePlan", "Setting", "StopCriteria"]


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


class _Serialisable:
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[arg-type]

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, **kw)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(f"{cls.__name__}: unknown field(s) {unknown}; known: {sorted(known)}.")
        return cls(**_nested(cls, dict(data)))

    @classmethod
    def from_json(cls, text: str):
        return cls.from_dict(json.loads(text))


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

    def __post_init__(self):
        o = "ReplayConfig"
        _require(self.kind in ("prioritized", "uniform"), o, "kind", self.kind, "'prioritized' or 'uniform'")
        _require(isinstance(self.capacity, int) and self.capacity >= 1, o, "capacity", self.capacity, "an int >= 1")
        _require(isinstance(self.fanout, int) and self.fanout >= 2, o, "fanout", self.fanout, "an int >= 2")
        _require(self.alpha >= 0, o, "alpha", self.alpha, ">= 0")
        _require(0 <= self.beta <= 1 and 0 <= self.beta_final <= 1, o, "beta", (self.beta, self.beta_final), "values in [0, 1]")
        _require(self.eps > 0, o, "eps", self.eps, "> 0")


@dataclass(frozen=True)
class StopCriteria(_Serialisable):
    """When a run ends: the first criterion met wins. At least one must be set.

    Attributes:
        mean_return: stop when the mean return of the last ``window`` training
            episodes is ``>=`` this.
        window: episodes in that mean.
        eval_return: stop when a greedy evaluation of ``eval_episodes`` episodes,
            run every ``eval_every`` env steps, averages ``>=`` this.
        max_env_steps / max_updates / max_wall_time_s: budgets.
    """

    mean_return: float | None = None
    window: int = 20
    eval_return: float | None = None
    eval_every: int = 5_000
    eval_episodes: int = 20
    max_env_steps: int | None = None
    max_updates: int | None = None
    max_wall_time_s: float | None = None

    def __post_init__(self):
        o = "StopCriteria"
        limits = (self.mean_return, self.eval_return, self.max_env_steps, self.max_updates, self.max_wall_time_s)
        _require(any(v is not None for v in limits), o, "(all)", None,
                 "at least one of mean_return, eval_return, max_env_steps, max_updates, max_wall_time_s")
        _require(self.window >= 1, o, "window", self.window, "an int >= 1")
        _require(self.eval_every >= 1 and self.eval_episodes >= 1, o, "eval_every/eval_episodes",
                 (self.eval_every, self.eval_episodes), "ints >= 1")
        for name in ("max_env_steps", "max_updates"):
            v = getattr(self, name)
            _require(v is None or (isinstance(v, int) and v >= 1), o, name, v, "None or an int >= 1")
        v = self.max_wall_time_s
        _require(v is None or (v > 0 and math.isfinite(v)), o, "max_wall_time_s", v, "None or seconds > 0")


@dataclass(frozen=True)
class RunConfig(_Serialisable):
    """What to train.

    Attributes:
        env_id: a gymnasium environment id, e.g. ``"CartPole-v1"``.
        trainer: import path of the trainer class, ``"package.module:ClassName"``.
        trainer_kwargs: hyper-parameters passed to the trainer (JSON values only).
        replay: the replay configuration.
        batch_size: samples per learner update.
        learning_starts: env steps collected before the first update.
        replay_ratio: learner updates per env step (e.g. 0.5 = one update per 2 steps).
        train_every: env steps between bursts of updates in the serial runtime
            (``train_every * replay_ratio`` updates per burst); the parallel
            runtime keeps the ratio continuously.
        weight_sync_every: learner updates between pushes of fresh weights to actors.
        stop: stop criteria.
        seed: base seed (actors and evaluation derive theirs from it).
        log_dir: where CSV/TensorBoard logs, the learning curve and checkpoints go.
        checkpoint_every: env steps between checkpoints (``None``: only the final one).
        save_replay: include the replay contents in checkpoints.
    """

    env_id: str
    trainer: str
    trainer_kwargs: Mapping[str, Any] = field(default_factory=dict)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    batch_size: int = 64
    learning_starts: int = 1_000
    replay_ratio: float = 0.5
    train_every: int = 256
    weight_sync_every: int = 10
    stop: StopCriteria = field(default_factory=lambda: StopCriteria(max_env_steps=100_000))
    seed: int = 0
    log_dir: str = "runs/pearl"
    checkpoint_every: int | None = None
    save_replay: bool = False

    def __post_init__(self):
        o = "RunConfig"
        _require(isinstance(self.env_id, str) and self.env_id != "", o, "env_id", self.env_id, "a gymnasium id")
        _require(isinstance(self.trainer, str) and ":" in self.trainer, o, "trainer", self.trainer,
                 "an import path 'package.module:ClassName'")
        _require(isinstance(self.batch_size, int) and self.batch_size >= 1, o, "batch_size", self.batch_size, "an int >= 1")
        _require(isinstance(self.learning_starts, int) and self.learning_starts >= 0, o, "learning_starts",
                 self.learning_starts, "an int >= 0")
        _require(self.replay_ratio > 0 and math.isfinite(self.replay_ratio), o, "replay_ratio", self.replay_ratio, "> 0")
        _require(isinstance(self.train_every, int) and self.train_every >= 1, o, "train_every", self.train_every, "an int >= 1")
        _require(isinstance(self.weight_sync_every, int) and self.weight_sync_every >= 1, o, "weight_sync_every",
                 self.weight_sync_every, "an int >= 1")
        try:
            json.dumps(dict(self.trainer_kwargs))
        except (TypeError, ValueError) as exc:
            raise SpecError(f"RunConfig.trainer_kwargs must hold JSON values only; {exc}.") from exc
        object.__setattr__(self, "trainer_kwargs", dict(self.trainer_kwargs))


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
        for name in ("learner_threads", "rm_threads", "n_actors", "envs_per_actor", "insert_batch", "queue_size"):
            v = getattr(self, name)
            _require(isinstance(v, int) and v >= 1, o, name, v, "an int >= 1")
        _require(isinstance(self.max_in_flight, int) and self.max_in_flight >= 0, o, "max_in_flight",
                 self.max_in_flight, "an int >= 0")
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
