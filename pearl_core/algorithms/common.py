"""Pieces the built-in trainers share: MLPs, inputs, weight transfer, target-network updates, checks."""

from __future__ import annotations

import math
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from pearl_core.errors import SpecError
from pearl_core.trainer import Trainer

__all__ = [
    "CountedTrainer",
    "adam",
    "as_input",
    "check_hidden",
    "check_positive",
    "check_unit",
    "hard_update",
    "load_module_weights",
    "mlp",
    "module_weights",
    "polyak_update",
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
    """``(n, *shape)`` observations as an ``(n, features)`` float32 tensor on ``device`` (the MLPs' input)."""
    arr = np.asarray(obs)
    t = torch.from_numpy(arr.reshape(arr.shape[0], -1))
    if t.dtype != torch.float32:
        t = t.float()
    return t.to(device, non_blocking=True)


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
