"""What one training iteration moves and computes: the composer's workload description.

A :class:`Workload` is the part of the user's program the cost models and
Algorithm 1 need: the batch size ``BS``, the insertion batch ``BS_i`` (new
experiences the actors insert per learner iteration), the replay configuration,
the byte sizes of an experience, an index, a priority and an importance weight,
and the learner's layers (from the trainer's ``nn.Linear``/``nn.Conv2d``
modules, see :func:`learner_layers`).

Experience size (bytes), with the Data Storage's layout
(:class:`pearl_core.replay.StorageSpec`: reward ``float32``, done ``bool``, steps ``int32``)::

    E = 2 * obs_bytes + action_bytes + reward_bytes + done_bytes + steps_bytes
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pearl_core.composer.fields import check_fields
from pearl_core.errors import SpecError

__all__ = ["LearnerLayer", "Workload", "hidden_layers", "learner_layers", "trainer_path", "workload_for_env"]


@dataclass(frozen=True)
class LearnerLayer:
    """One ``nn.Linear``/``nn.Conv2d`` layer of the learner, with its per-sample work.

    Attributes:
        name: dotted module name in the trainer (``"q_net.0"``).
        kind: ``"linear"`` or ``"conv2d"``.
        in_features, out_features: Linear sizes or Conv2d channels.
        macs: multiply-accumulates of one forward pass for one sample
            (Linear: ``in*out``; Conv2d: weights * output positions).
        params: parameters (weights + bias).
        trainable: its weights receive gradients (``False`` for target networks).
        group: the trainer attribute holding it (``"q_net"``); layers of one
            group form one network, in forward order.
        positions: output positions per sample (1 for Linear, ``H_out*W_out`` for Conv2d).
        forwards: forward passes through the layer per update (per sample).
        weight_grads: weight-gradient passes per update (``None``: 1 if trainable, else 0).
        input_grads: input-gradient passes per update (``None``: as ``weight_grads``). An
            actor-critic's actor loss back-propagates through the critic for the input
            gradient only, so its critic has more input than weight gradients.

    The pass counts come from the trainer's :meth:`~pearl_core.trainer.Trainer.learner_passes`
    (per network); the defaults are one forward pass and, for a trainable layer, one backward
    pass with both gradients.
    """

    name: str
    kind: str
    in_features: int
    out_features: int
    macs: int
    params: int
    trainable: bool = True
    group: str = ""
    positions: int = 1
    forwards: float = 1.0
    weight_grads: float | None = None
    input_grads: float | None = None

    def __post_init__(self) -> None:
        if self.weight_grads is None:
            object.__setattr__(self, "weight_grads", 1.0 if self.trainable else 0.0)
        if self.input_grads is None:
            object.__setattr__(self, "input_grads", self.weight_grads)

    @property
    def passes(self) -> float:
        """Forward plus backward passes per update, each costing one forward pass's MACs."""
        w, i = self.weight_grads, self.input_grads
        assert w is not None and i is not None  # __post_init__ fills both
        return self.forwards + float(w) + float(i)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _pos_int(owner: str, name: str, value: Any, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise SpecError(f"{owner}: {name} = {value!r} is invalid; expected an integer >= {minimum}.")


@dataclass(frozen=True)
class Workload:
    """One learner iteration, as the composer models it.

    Attributes:
        batch_size: ``BS``, experiences per learner update.
        obs_bytes, action_bytes: bytes of one observation / one action as stored.
        replay: ``"prioritized"`` or ``"uniform"``.
        capacity: replay capacity (leaves of the sum tree, rows of the storage).
        fanout: sum-tree fanout ``F``.
        n_actors: actor processes (they run on the host CPU).
        insert_batch: ``BS_i``, experiences inserted per learner iteration
            (the paper's ``N_actor``); default ``n_actors``.
        envs_per_actor: environments each actor steps together (one batched
            policy forward per vector step); the runtime plan records it.
        layers: the learner's layers (:func:`learner_layers`).
        env_id: environment id (profiling makes its environments from it).
        env_kwargs, env_wrappers: the environment's options (``RunConfig.env_kwargs`` /
            ``env_wrappers``, :func:`pearl_core.envs.make_env`).
        stored_bytes: host bytes one transition takes in a host Data Storage (0: unknown): the
            experience's bytes, or far fewer where stacked frames are stored once each
            (``ReplayConfig.frame_storage``, :mod:`pearl_core.replay.frames`).
        reward_bytes, done_bytes: stored sizes of a reward (float32) and a done flag (bool).
        steps_bytes: stored size of the environment steps a transition spans (int32; n-step returns).
        index_bytes, priority_bytes: one index (int64) and one priority (float64)
            as exchanged with the replay manager.
        weight_bytes: one importance weight (float32) sent with a batch.
        trainer: import path ``"pkg.module:Class"`` of the trainer (``""`` when
            unknown); profiling builds the real trainer from it.
        trainer_kwargs: its hyper-parameters (JSON values).
    """

    batch_size: int
    obs_bytes: int
    action_bytes: int
    replay: str = "prioritized"
    capacity: int = 100_000
    fanout: int = 16
    n_actors: int = 1
    insert_batch: int | None = None
    layers: tuple[LearnerLayer, ...] = ()
    envs_per_actor: int = 1
    env_id: str = ""
    reward_bytes: int = 4
    done_bytes: int = 1
    steps_bytes: int = 4
    index_bytes: int = 8
    priority_bytes: int = 8
    weight_bytes: int = 4
    trainer: str = ""
    trainer_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    env_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    env_wrappers: tuple[str, ...] | None = None
    stored_bytes: int = 0

    def __post_init__(self) -> None:
        from pearl_core.envs import check_env_options

        o = "Workload"
        env_kwargs, env_wrappers = check_env_options(self.env_kwargs, self.env_wrappers, o)
        object.__setattr__(self, "env_kwargs", env_kwargs)
        object.__setattr__(self, "env_wrappers", env_wrappers)
        if not isinstance(self.trainer, str):
            raise SpecError(f"{o}: trainer = {self.trainer!r} is invalid; expected an import path 'pkg.module:Class'.")
        if not isinstance(self.trainer_kwargs, Mapping):
            raise SpecError(f"{o}: trainer_kwargs = {self.trainer_kwargs!r} is invalid; expected a mapping.")
        object.__setattr__(self, "trainer_kwargs", dict(self.trainer_kwargs))
        _pos_int(o, "batch_size", self.batch_size)
        _pos_int(o, "obs_bytes", self.obs_bytes, 0)
        _pos_int(o, "action_bytes", self.action_bytes, 0)
        if self.replay not in ("prioritized", "uniform"):
            raise SpecError(f"{o}: replay = {self.replay!r} is invalid; expected 'prioritized' or 'uniform'.")
        _pos_int(o, "capacity", self.capacity)
        _pos_int(o, "fanout", self.fanout, 2)
        _pos_int(o, "n_actors", self.n_actors)
        if self.insert_batch is None:
            object.__setattr__(self, "insert_batch", self.n_actors)
        _pos_int(o, "insert_batch", self.insert_batch)
        _pos_int(o, "envs_per_actor", self.envs_per_actor)
        for name in ("reward_bytes", "done_bytes", "steps_bytes", "index_bytes", "priority_bytes", "weight_bytes",
                     "stored_bytes"):
            _pos_int(o, name, getattr(self, name), 0)
        layers = tuple(LearnerLayer(**ly) if isinstance(ly, Mapping) else ly for ly in self.layers)
        if not all(isinstance(ly, LearnerLayer) for ly in layers):
            raise SpecError(f"{o}: layers must be LearnerLayer values; found {[type(ly).__name__ for ly in layers]}.")
        object.__setattr__(self, "layers", layers)

    # -- derived sizes ---------------------------------------------------------
    @property
    def experience_bytes(self) -> int:
        """``E = 2*obs + action + reward + done + steps`` bytes (obs and next_obs are both stored)."""
        return 2 * self.obs_bytes + self.action_bytes + self.reward_bytes + self.done_bytes + self.steps_bytes

    @property
    def tree_levels(self) -> int:
        """Levels below the root of the sum tree: the smallest ``L`` with ``F**L >= capacity`` (``>= 1``).

        This is the pipeline depth ``D`` of an FPGA replay manager (one stage per level).
        """
        levels, leaves = 1, self.fanout
        while leaves < self.capacity:
            levels, leaves = levels + 1, leaves * self.fanout
        return levels

    @property
    def forward_macs(self) -> int:
        """MACs of one forward pass over every layer, per sample (target networks included)."""
        return sum(ly.macs for ly in self.layers)

    @property
    def trainable_macs(self) -> int:
        """MACs per sample of the layers that receive gradients."""
        return sum(ly.macs for ly in self.layers if ly.trainable)

    @property
    def train_flops(self) -> float:
        """FLOPs of one learner step: ``BS * sum(2 * macs * passes)`` over the layers.

        Every pass costs 2 FLOPs per MAC: each forward pass, each weight-gradient and
        each input-gradient pass (:attr:`LearnerLayer.passes`). With the default passes
        this is ``BS * (2 * forward_macs + 4 * trainable_macs)``: one forward pass of
        every layer (target networks are evaluated on ``next_obs`` too) and one backward
        pass, with both gradients, of every trainable one.
        """
        return float(self.batch_size) * sum(2.0 * ly.macs * ly.passes for ly in self.layers)

    @property
    def param_bytes(self) -> int:
        """fp32 bytes of every layer's parameters."""
        return 4 * sum(ly.params for ly in self.layers)

    @property
    def trainable_param_bytes(self) -> int:
        return 4 * sum(ly.params for ly in self.layers if ly.trainable)

    @property
    def activation_bytes(self) -> int:
        """fp32 bytes of every layer's output for the whole batch."""
        return 4 * self.batch_size * sum(ly.out_features * ly.positions for ly in self.layers)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["layers"] = [ly.to_dict() for ly in self.layers]
        out["trainer_kwargs"] = dict(self.trainer_kwargs)
        out["env_kwargs"] = dict(self.env_kwargs)
        out["env_wrappers"] = None if self.env_wrappers is None else list(self.env_wrappers)
        return out

    @property
    def env_options(self) -> dict[str, Any]:
        """``make_env``/``env_spaces`` keyword arguments of the workload's environment."""
        return {"kwargs": self.env_kwargs, "wrappers": self.env_wrappers}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Workload":
        data = check_fields(cls, data)
        data["layers"] = tuple(LearnerLayer(**ly) for ly in data.get("layers", ()))
        return cls(**data)


def learner_layers(trainer: Any) -> tuple[LearnerLayer, ...]:
    """The trainer's layers with per-sample MACs and whether they are trained.

    Built on :func:`pearl_core.trainer.layer_specs`. A layer is *trainable* when
    its weight has ``requires_grad``. Conv2d output sizes are propagated from
    ``trainer.input_shape`` (``(C, H, W)``) through the convolutions of each group
    in order, with each module's own padding, dilation and stride; without a
    3-D input shape one output position is assumed (an underestimate).
    """
    import torch.nn as nn

    from pearl_core.trainer import layer_specs

    # an image trainer's network may see another axis order than the observation's (channels last)
    input_shape = tuple(getattr(trainer, "image_shape", None) or getattr(trainer, "input_shape", ()) or ())
    specs = layer_specs(trainer)
    passes = _declared_passes(trainer, {spec.name.partition(".")[0] for spec in specs})
    spatial: dict[str, tuple[int, int]] = {}
    out: list[LearnerLayer] = []
    for spec in specs:
        group, _, rest = spec.name.partition(".")
        mod = getattr(trainer, group)
        if rest:
            mod = mod.get_submodule(rest)
        weight = mod.weight
        positions = 1
        if isinstance(mod, nn.Conv2d):
            hw = spatial.get(group, tuple(input_shape[-2:]) if len(input_shape) == 3 else (1, 1))
            dims = []
            for i, size in enumerate(hw):
                k, s = mod.kernel_size[i], mod.stride[i]
                p = mod.padding[i] if isinstance(mod.padding, tuple) else 0
                d = mod.dilation[i]
                dims.append(max(1, (size + 2 * p - d * (k - 1) - 1) // s + 1))
            spatial[group] = (dims[0], dims[1])
            positions = dims[0] * dims[1]
        trainable = bool(weight.requires_grad)
        f, w, x = passes.get(group, (1.0, None, None))
        out.append(LearnerLayer(spec.name, spec.kind, spec.in_features, spec.out_features,
                                int(weight.numel()) * positions, spec.params, trainable, group,
                                positions, float(f), None if w is None else float(w),
                                None if x is None else float(x)))
    return tuple(out)


def _declared_passes(trainer: Any, groups: set[str]) -> dict[str, tuple[float, float, float]]:
    """The trainer's :meth:`~pearl_core.trainer.Trainer.learner_passes`, checked.

    Raises:
        SpecError: not a mapping of network names (attributes holding layers) to three finite
            numbers >= 0.
    """
    declared = getattr(trainer, "learner_passes", None)
    got = declared() if callable(declared) else {}
    owner = f"{type(trainer).__name__}.learner_passes()"
    if not isinstance(got, Mapping):
        raise SpecError(f"{owner} returned {got!r}; expected a mapping network name -> (forward, weight-gradient, "
                        "input-gradient) passes, e.g. {'critic': (2.0, 1.0, 2.0)}.")
    out = {}
    for name, value in got.items():
        if name not in groups:
            raise SpecError(f"{owner} names {name!r}, which holds no nn.Linear/nn.Conv2d layer of the trainer; "
                            f"expected one of {sorted(groups)}.")
        try:
            nums = tuple(float(v) for v in value)
        except (TypeError, ValueError):
            nums = ()
        if len(nums) != 3 or not all(math.isfinite(v) and v >= 0 for v in nums):
            raise SpecError(f"{owner}[{name!r}] = {value!r}; expected three finite numbers >= 0: forward, "
                            "weight-gradient and input-gradient passes per update, e.g. (1.0, 1.0, 1.0).")
        out[name] = nums
    return out


def workload_for_env(
    env_id: str,
    batch_size: int,
    *,
    trainer: type | str | None = None,
    trainer_kwargs: Mapping[str, Any] | None = None,
    hidden_sizes: Sequence[int] | str | None = None,
    replay: str = "prioritized",
    capacity: int = 100_000,
    fanout: int = 16,
    n_actors: int = 1,
    insert_batch: int | None = None,
    envs_per_actor: int = 1,
    env_kwargs: Mapping[str, Any] | None = None,
    env_wrappers: Sequence[str] | None = None,
    frame_storage: str = "auto",
    facts_dir: "str | os.PathLike[str] | None" = None,
    spaces: tuple[Any, Any] | None = None,
) -> Workload:
    """Build a :class:`Workload` for a gymnasium environment and a trainer class.

    The environment is created once to read its spaces (then closed,
    :func:`pearl_core.envs.env_spaces`). The trainer (a class or an import path
    ``"pkg.module:Class"``; default :func:`pearl_core.algorithms.default_trainer`
    of the action space) is instantiated with ``trainer_kwargs`` to read its
    layers. ``hidden_sizes`` (``(64, 64)`` or ``"64,64"``) is passed as
    :func:`pearl_core.algorithms.hidden_kwargs` says (``actor_hidden`` and
    ``critic_hidden`` for the built-in DDPG, ``hidden_sizes`` otherwise). With ``facts_dir`` the layers
    are remembered there for this trainer's code, spaces and kwargs
    (:mod:`pearl_core.composer.checkcache`), so a later call does not build the trainer. ``spaces``: the
    environment's ``(observation_space, action_space)`` when the caller has them (the env is not built then).

    Raises:
        SpecError: unknown environment id, unsupported spaces, a trainer that
            cannot be imported or built for this environment.
    """
    from pearl_core.envs import env_spaces
    from pearl_core.replay.storage import StorageSpec

    from pearl_core.replay.frames import frame_storage_fits, storage_row_bytes

    obs_space, act_space = spaces or env_spaces(env_id, kwargs=env_kwargs, wrappers=env_wrappers)
    layout = StorageSpec.from_spaces(obs_space, act_space)
    frames = frame_storage == "on" or (frame_storage == "auto" and frame_storage_fits(layout))
    obs_bytes = int(math.prod(layout.obs_shape)) * layout.obs_dtype.itemsize
    action_bytes = int(math.prod(layout.action_shape)) * layout.action_dtype.itemsize
    cls = _resolve_trainer(trainer, act_space)
    kwargs = dict(trainer_kwargs or {})
    if hidden_sizes is not None:
        from pearl_core.algorithms.defaults import hidden_kwargs

        kwargs.update(hidden_kwargs(cls, hidden_layers(hidden_sizes)))
    layers = _trainer_layers(cls, (obs_space, act_space), kwargs, env_id, facts_dir)
    return Workload(batch_size=batch_size, obs_bytes=obs_bytes, action_bytes=action_bytes, replay=replay,
                    capacity=capacity, fanout=fanout, n_actors=n_actors, insert_batch=insert_batch,
                    envs_per_actor=envs_per_actor, layers=layers, env_id=env_id, trainer=trainer_path(cls),
                    trainer_kwargs=_json_kwargs(kwargs), env_kwargs=dict(env_kwargs or {}),
                    env_wrappers=None if env_wrappers is None else tuple(env_wrappers),
                    stored_bytes=storage_row_bytes(layout, frames))


def _trainer_layers(cls: type, spaces: tuple[Any, Any], kwargs: Mapping[str, Any], env_id: str,
                    facts_dir: "str | os.PathLike[str] | None") -> tuple[LearnerLayer, ...]:
    """The layers of ``cls(*spaces, **kwargs)``, remembered in ``facts_dir`` (when given) across calls."""
    from pearl_core.composer.checkcache import remembered

    def build() -> list[dict[str, Any]]:
        try:
            instance = cls(spaces[0], spaces[1], **kwargs)
        except Exception as exc:  # report any constructor failure the same way
            raise SpecError(f"trainer {cls.__name__} cannot be built for {env_id!r} with {dict(kwargs)} "
                            f"({type(exc).__name__}: {exc}).") from exc
        layers = learner_layers(instance)
        if not layers:
            raise SpecError(f"trainer {cls.__name__} declares no nn.Linear/nn.Conv2d layers; the cost models "
                            "need them.")
        return [dataclasses.asdict(layer) for layer in layers]

    rows = remembered(None if facts_dir is None else Path(facts_dir), cls, spaces, kwargs, "layers", build)
    return tuple(LearnerLayer(**row) for row in rows)


def trainer_path(cls: type) -> str:
    """``"module:QualName"`` of a trainer class (how a Workload and a RunConfig name it)."""
    return f"{cls.__module__}:{cls.__qualname__}"


def _json_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-representable hyper-parameters (tuples become lists); others are left out of the workload."""
    import json

    out = {}
    for k, v in kwargs.items():
        try:
            out[str(k)] = json.loads(json.dumps(v, allow_nan=False))
        except (TypeError, ValueError):
            continue
    return out


def _resolve_trainer(trainer: type | str | None, act_space: Any) -> type:
    if trainer is None:
        from pearl_core.algorithms.defaults import default_trainer

        return default_trainer(act_space)
    if isinstance(trainer, type):
        return trainer
    from pearl_core.runtime.wiring import load_trainer_class  # refuses what is not a trainer class

    return load_trainer_class(str(trainer))


def hidden_layers(sizes: Sequence[int] | str) -> tuple[int, ...]:
    """Parse ``"64,64"`` (or a sequence) into hidden sizes, with a clear error."""
    if isinstance(sizes, str):
        try:
            sizes = [int(s) for s in sizes.replace(" ", "").split(",") if s]
        except ValueError:
            raise SpecError(f"hidden sizes {sizes!r} are invalid; "
                            "expected comma-separated ints such as '64,64'.") from None
    out = tuple(int(s) for s in sizes)
    if not out or any(s < 1 for s in out):
        raise SpecError(f"hidden sizes {sizes!r} are invalid; expected one or more ints >= 1.")
    return out
