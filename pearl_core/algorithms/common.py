"""Pieces the built-in trainers share: MLPs, inputs, weight transfer, target-network updates, checks."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from pearl_core.errors import SpecError
from pearl_core.replay.storage import discount_table, discounts
from pearl_core.trainer import Trainer, UpdateResult

__all__ = [
    "BoxActions",
    "CountedTrainer",
    "adam",
    "as_input",
    "batch_tensor",
    "bootstrap_discount",
    "check_action_bounds",
    "check_hidden",
    "check_positive",
    "check_unit",
    "hard_update",
    "host_array",
    "host_discounts",
    "load_module_weights",
    "mlp",
    "module_weights",
    "polyak_update",
    "reward_done_weights",
    "tanh_actor_actions",
    "update_result",
]


def check_hidden(hidden_sizes, owner: str, name: str = "hidden_sizes") -> tuple[int, ...]:
    """Return ``hidden_sizes`` as a tuple of positive ints, or raise :class:`SpecError`."""
    try:
        sizes = tuple(int(h) for h in hidden_sizes)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{owner}: {name} = {hidden_sizes!r}; expected a sequence of ints, e.g. (256, 256).") from exc
    if not sizes or any(h < 1 for h in sizes):
        raise SpecError(f"{owner}: {name} = {hidden_sizes!r}; expected one or more sizes >= 1, e.g. (256, 256).")
    return sizes


def mlp(in_features: int, hidden: Sequence[int], out_features: int, activation=nn.ReLU) -> nn.Sequential:
    """``Linear -> act -> ... -> Linear`` with ``len(hidden)`` hidden layers (no output activation)."""
    layers: list[nn.Module] = []
    last = in_features
    for h in hidden:
        layers += [nn.Linear(last, h), activation()]
        last = h
    layers.append(nn.Linear(last, out_features))
    return nn.Sequential(*layers)


def as_input(obs, device: torch.device) -> torch.Tensor:
    """``(n, *shape)`` observations as an ``(n, features)`` float32 tensor on ``device`` (the MLPs' input).

    A tensor (a device batch's field) is reshaped and converted where it is: itself, viewed, when it is
    float32 on ``device`` already (the networks only read it)."""
    if isinstance(obs, torch.Tensor):
        return obs.reshape(obs.shape[0], -1).to(device=device, dtype=torch.float32)
    arr = np.asarray(obs)
    t = torch.from_numpy(arr.reshape(arr.shape[0], -1))
    if t.dtype != torch.float32:
        t = t.float()
    return t.to(device, non_blocking=True)


def batch_tensor(values, device: torch.device, dtype: torch.dtype, np_dtype) -> torch.Tensor:
    """One batch field as ``dtype`` on ``device``.

    A tensor (a device batch) is converted where it is, and is itself when it is ``dtype`` on ``device``
    already: no copy, and the caller must not write into it (a device batch's buffers are reused). A host
    array is converted to ``np_dtype`` in numpy, then moved (what the host path always did)."""
    if isinstance(values, torch.Tensor):
        return values.to(device=device, dtype=dtype)
    return torch.from_numpy(np.asarray(values, dtype=np_dtype)).to(device)


def host_array(values) -> np.ndarray:
    """A batch field as a numpy array, for the CPU-only native/numpy engines: a CPU tensor's own memory
    (``.numpy()``, no copy), a host array as it is."""
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().numpy()  # .cpu() is a no-op for the CPU tensors these engines get
    return np.asarray(values)


def update_result(td: torch.Tensor, metrics: Mapping[str, torch.Tensor], device_batch: bool) -> UpdateResult:
    """The :class:`~pearl_core.trainer.UpdateResult` of a torch-path update, from its per-sample TD errors
    and its scalar metrics as tensors.

    For a device batch (:attr:`~pearl_core.trainer.Trainer.device_batches`) everything stays on the device,
    detached: no host synchronisation. For a host batch: a numpy ``td`` and python floats, as always.
    """
    if device_batch:
        return UpdateResult(td_errors=td.detach(), metrics={k: v.detach() for k, v in metrics.items()})
    return UpdateResult(td_errors=td.detach().cpu().numpy(), metrics={k: float(v.detach()) for k, v in metrics.items()})


def module_weights(module: nn.Module, prefix: str = "") -> dict[str, np.ndarray]:
    """The module's parameters and buffers as independent numpy copies."""
    return {prefix + k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def load_module_weights(module: nn.Module, weights: Mapping[str, np.ndarray], prefix: str = "") -> None:
    """Load what :func:`module_weights` produced (keys under ``prefix``)."""
    own = module.state_dict()
    missing = [k for k in own if prefix + k not in weights]
    if missing:
        raise SpecError(
            f"set_weights: missing {[prefix + k for k in missing]}; expected the keys get_weights() returns. "
            "Fix: pass the dict produced by get_weights() of a trainer built with the same hyper-parameters."
        )
    arrays = []
    for k, ref in own.items():
        arr = np.asarray(weights[prefix + k])
        if tuple(arr.shape) != tuple(ref.shape):
            raise SpecError(
                f"set_weights: {prefix + k} has shape {arr.shape}; expected {tuple(ref.shape)}. "
                "Fix: build both trainers with the same hidden sizes."
            )
        arrays.append(arr)
    # Every shape checked first (a bad dict changes nothing), then copied into the tensors in place:
    # state_dict()'s tensors share the parameters' storage. What load_state_dict does, without its
    # key matching and hooks, which cost an actor more than the copy (it loads every weight sync).
    with torch.no_grad():
        for ref, arr in zip(own.values(), arrays):
            ref.copy_(torch.as_tensor(arr))


def check_action_bounds(action_space, owner: str, *, env: str | None = None, actor: str = "tanh actor") -> None:
    """Refuse a ``Box`` action space whose bounds a trainer cannot scale ``[-1, 1]`` onto in ``float32``.

    In every dimension the bounds must be finite, fit ``float32``, and their width ``high - low``
    must be ``> 0`` (a zero width makes every normalised action 0/0) and fit ``float32`` (else the
    scale is inf and the critic sees every action as 0).

    Raises:
        SpecError: names the env (when given), the first bad dimension, its bounds and the fix.
        A space that is not a ``Box`` passes (its trainer refuses it by kind).
    """
    import gymnasium.spaces as spaces

    if not isinstance(action_space, spaces.Box):
        return
    shape = tuple(action_space.shape)
    low = np.broadcast_to(np.asarray(action_space.low, dtype=np.float64), shape).reshape(-1)
    high = np.broadcast_to(np.asarray(action_space.high, dtype=np.float64), shape).reshape(-1)
    top = float(np.finfo(np.float32).max)
    finite = np.isfinite(low) & np.isfinite(high)
    with np.errstate(over="ignore", invalid="ignore"):
        width = high - low
    problems = (
        (~finite, "is not finite (the actor needs finite action bounds to scale onto)"),
        (finite & ((np.abs(low) > top) | (np.abs(high) > top) | ~(width <= top)),
         f"has a width high - low = {{w:.4g}} that overflows float32 (largest {top:.4g}): the scale would be inf"),
        (finite & ~(width > 0), "has zero width (high - low = {w!r}): every action would normalise to 0/0"),
    )
    for bad, what in problems:
        if bad.any():
            k = int(np.argmax(bad))
            dim = k if len(shape) <= 1 else tuple(int(i) for i in np.unravel_index(k, shape))
            where = f"the action space of env {env!r}" if env else "the action space"
            raise SpecError(
                f"{owner}: {where} {action_space}, dimension {dim} with bounds "
                f"[{float(low[k])!r}, {float(high[k])!r}], "
                f"{what.format(w=float(width[k]))}; expected finite bounds with 0 < high - low <= {top:.4g} in "
                f"every dimension, because the {actor}'s outputs in [-1, 1] are scaled onto them. Fix: wrap the "
                "environment with gymnasium.wrappers.RescaleAction(env, -1.0, 1.0) after giving it finite "
                "bounds (or ClipAction), or remove the constant action dimension."
            )


@dataclass(frozen=True, eq=False)
class BoxActions:
    """A ``Box`` action space as the actor-critics (DDPG, TD3, SAC) use it.

    Their networks work in normalised actions ``a`` in ``[-1, 1]^d`` (a ``tanh``
    output); :meth:`to_env` maps them affinely onto the Box ``[low, high]`` and
    :meth:`normalise` maps the environment's actions back, so one set of
    hyper-parameters works whatever the bounds.
    """

    input_shape: tuple[int, ...]
    action_shape: tuple[int, ...]
    low: np.ndarray
    high: np.ndarray
    mid: np.ndarray  # (high + low) / 2
    half: np.ndarray  # (high - low) / 2
    mid_t: torch.Tensor  # mid, flat, on the networks' device
    half_t: torch.Tensor  # half, flat, on the networks' device

    @classmethod
    def of(cls, observation_space, action_space, owner: str, device: torch.device,
           actor: str = "tanh actor") -> "BoxActions":
        """Check both spaces (a ``Box`` observation, a ``Box`` action with finite bounds).

        Raises:
            SpecError: a ``Discrete`` (or other non-``Box``) action or observation space, or action
                bounds :func:`check_action_bounds` refuses (``actor`` names what they would scale).
        """
        import gymnasium.spaces as spaces

        if not isinstance(action_space, spaces.Box):
            raise SpecError(f"{owner} needs a Box action space; found {action_space}. Fix: use DQN for Discrete ones.")
        if not isinstance(observation_space, spaces.Box):
            raise SpecError(f"{owner} needs a Box observation space; found {observation_space}.")
        check_action_bounds(action_space, owner, actor=actor)
        low = np.asarray(action_space.low, dtype=np.float32)
        high = np.asarray(action_space.high, dtype=np.float32)
        mid, half = (high + low) / 2, (high - low) / 2
        return cls(tuple(int(d) for d in observation_space.shape), tuple(int(d) for d in action_space.shape),
                   low, high, mid, half, torch.from_numpy(mid.reshape(-1)).to(device),
                   torch.from_numpy(half.reshape(-1)).to(device))

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.input_shape))

    @property
    def act_dim(self) -> int:
        return int(np.prod(self.action_shape))

    def to_env(self, a: np.ndarray) -> np.ndarray:
        """Normalised actions ``(n, d)`` in ``[-1, 1]`` as ``(n, *action_shape)`` ``float32`` inside the Box."""
        act = self.mid + self.half * a.reshape(a.shape[0], *self.action_shape)
        # Rounding of mid + half * a can step a hair outside [low, high]; clip so the Box contract holds.
        return np.clip(act, self.low, self.high).astype(np.float32, copy=False)

    def normalise(self, action, n: int) -> torch.Tensor:
        """A batch's environment actions as ``(n, d)`` normalised ``float32`` on the networks' device
        (a tensor is converted where it is; a new tensor either way)."""
        if isinstance(action, torch.Tensor):
            act = action.reshape(n, -1).to(device=self.mid_t.device, dtype=torch.float32)
        else:
            act = torch.from_numpy(np.asarray(action, dtype=np.float32).reshape(n, -1)).to(self.mid_t.device)
        return (act - self.mid_t) / self.half_t


def tanh_actor_actions(actor: nn.Module, obs: torch.Tensor, box: BoxActions, rng: np.random.Generator,
                       noise_std: float) -> np.ndarray:
    """A ``tanh`` actor's actions inside the Box, with Gaussian noise of ``noise_std`` (normalised units,
    drawn from ``rng`` when > 0) clipped into ``[-1, 1]`` (DDPG's and TD3's exploration)."""
    with torch.inference_mode():
        a = actor(obs).cpu().numpy()
    if noise_std > 0:
        a = a + rng.normal(0.0, noise_std, size=a.shape).astype(np.float32)
        np.clip(a, -1.0, 1.0, out=a)
    return box.to_env(a)


def reward_done_weights(batch, weights, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch's rewards (``float32``), done flags (``bool``) and importance weights (``float32``) on ``device``;
    numpy arrays or tensors (:func:`batch_tensor`: read where they are, never written)."""
    rew = batch_tensor(batch.reward, device, torch.float32, np.float32)
    done = batch_tensor(batch.done, device, torch.bool, np.bool_)
    w = batch_tensor(weights, device, torch.float32, np.float32)
    return rew, done, w


def host_discounts(batch, gamma: float) -> np.ndarray | None:
    """A host batch's per-sample ``float32`` ``gamma ** steps`` (n-step returns), or ``None`` when every
    sample is one step (no ``steps`` field, or all ones): the caller keeps its scalar-``gamma`` path, so
    one-step batches are computed exactly as before n-step returns existed. A CPU tensor's ``steps`` (a
    device batch given to a CPU engine) is read as the array it views."""
    steps = getattr(batch, "steps", None)
    if steps is None:
        return None
    steps = host_array(steps)
    if steps.size == 0 or int(steps.max()) <= 1:
        return None
    return discounts(steps, gamma)


def bootstrap_discount(batch, gamma: float, device: torch.device) -> float | torch.Tensor:
    """What multiplies a sample's bootstrap term in ``y = r + discount * (1 - done) * Q'``: ``gamma ** k``
    for a transition spanning ``k`` environment steps (:attr:`~pearl_core.replay.storage.Batch.steps`).

    ``gamma`` itself (a float) when every sample is one step, so one-step targets are the very
    operations they were; else a ``(B,)`` ``float32`` tensor on ``device``. A batch whose ``steps``
    is a tensor (a device batch) is looked up on its device, with no host synchronisation, in the
    table the host path reads (:func:`~pearl_core.replay.storage.discount_table`): the same float32
    values, bit for bit (``k = 1`` gives exactly ``float32(gamma)``).
    """
    steps = getattr(batch, "steps", None)
    if isinstance(steps, torch.Tensor):
        k = steps.to(device=device, dtype=torch.int64).reshape(-1)
        table = _device_discounts(float(gamma), torch.device(device))
        disc = table[k.clamp(0, _DISCOUNT_STEPS)]  # a gather on the device: the host path's values
        # A k past the table (more than any run's n_step) cannot be looked up without reading k on the
        # host: its float32 power stands in (within ulps of the table's; float64 is not on every device).
        far = torch.full(k.shape, float(gamma), dtype=torch.float32, device=device).pow(k.float())
        return torch.where(k <= _DISCOUNT_STEPS, disc, far)
    disc = host_discounts(batch, gamma)
    return gamma if disc is None else torch.from_numpy(disc).to(device)


#: Steps the device discount table covers (``RunConfig.n_step`` is at most 1000).
_DISCOUNT_STEPS = 1024


@functools.lru_cache(maxsize=32)
def _device_discounts(gamma: float, device: torch.device) -> torch.Tensor:
    """``float32`` ``[gamma ** 0, ..., gamma ** _DISCOUNT_STEPS]`` on ``device``, as the host path computes
    them (:func:`~pearl_core.replay.storage.discount_table`); made once per ``(gamma, device)``."""
    return torch.from_numpy(discount_table(gamma, _DISCOUNT_STEPS)).to(device)


def adam(params, lr: float, eps: float = 1e-8) -> torch.optim.Optimizer:
    """Adam with the fused kernel where torch has one for the device, else the foreach one.

    The fused step is one kernel over every parameter; a learner runs thousands of
    small-MLP updates a second, where per-tensor overhead dominates.
    """
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, lr=lr, eps=eps, foreach=True)


@torch.no_grad()
def hard_update(target: nn.Module, source: nn.Module) -> None:
    """Copy ``source``'s parameters into ``target`` (same architecture)."""
    torch._foreach_copy_(list(target.parameters()), list(source.parameters()))


@torch.no_grad()
def polyak_update(target_params: list[torch.Tensor], source_params: list[torch.Tensor], tau: float) -> None:
    """``target <- (1 - tau) * target + tau * source``, in place, as one fused op per tensor list."""
    torch._foreach_lerp_(target_params, source_params, tau)


def check_unit(value, owner: str, name: str, *, low: float = 0.0, high: float = 1.0, open_low: bool = False) -> float:
    """Return ``value`` as a float in ``[low, high]`` (or ``(low, high]``), or raise :class:`SpecError`."""
    try:
        out = float(value)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{owner}: {name} = {value!r}; expected a number.") from exc
    ok = math.isfinite(out) and (out > low if open_low else out >= low) and out <= high
    if not ok:
        rng = f"{'(' if open_low else '['}{low}, {high}]"
        raise SpecError(f"{owner}: {name} = {value!r} is out of range; expected a value in {rng}.")
    return out


def check_positive(value, owner: str, name: str, *, allow_none: bool = False, integer: bool = False):
    """Return ``value`` if it is a finite number > 0 (an int if ``integer``), or raise :class:`SpecError`."""
    if value is None and allow_none:
        return None
    kind = "an int" if integer else "a number"
    if isinstance(value, bool) or (integer and not isinstance(value, (int, np.integer))):
        raise SpecError(f"{owner}: {name} = {value!r}; expected {kind} > 0.")
    try:
        out = int(value) if integer else float(value)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{owner}: {name} = {value!r}; expected {kind} > 0.") from exc
    if not (out > 0 and math.isfinite(out)):
        raise SpecError(f"{owner}: {name} = {value!r}; expected {kind} > 0.")
    return out


class CountedTrainer(Trainer):
    """A trainer that counts its updates and owns a numpy exploration stream ``_rng``.

    Its checkpoints add both to :meth:`Trainer.state_dict`, so a resumed run
    continues the update count (target-network schedule) and the exploration noise.
    The weights actors need are those of the network named by :attr:`acting_net`.
    """

    #: attribute name of the network actors act with (``"q_net"``, ``"actor"``).
    acting_net: ClassVar[str]
    updates: int = 0
    _rng: np.random.Generator
    device: torch.device

    def _as_input(self, obs: np.ndarray) -> torch.Tensor:
        return as_input(obs, self.device)

    def get_weights(self) -> dict[str, np.ndarray]:
        """The parameters of :attr:`acting_net` (what actors need to act)."""
        return module_weights(getattr(self, self.acting_net))

    def weight_tensors(self) -> dict[str, torch.Tensor]:
        """The tensors of :attr:`acting_net` that :meth:`get_weights` copies (its state dict's views)."""
        return dict(getattr(self, self.acting_net).state_dict())

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Load parameters produced by :meth:`get_weights` into :attr:`acting_net`."""
        load_module_weights(getattr(self, self.acting_net), weights)

    def state_dict(self) -> dict[str, Any]:
        """Networks, optimizers, counters and the exploration random stream."""
        out = super().state_dict()
        out["updates"] = self.updates
        out["rng"] = self._rng.bit_generator.state
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.updates = int(state.get("updates", 0))
        if "rng" in state:
            self._rng.bit_generator.state = state["rng"]
