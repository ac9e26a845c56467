"""Exporting a policy's greedy action as a TorchScript or ONNX module (:meth:`pearl_core.policy.Policy.export`).

The exported module maps a ``float32`` batch of observations ``(n, *observation_shape)`` to the actions
:meth:`~pearl_core.policy.Policy.predict` returns for it with ``deterministic=True``:

* ``Discrete`` (DQN and Q-learning trainers): ``argmax_a Q(s, a) + start``, ``int64`` ``(n,)``, with the
  input handling the trainer applies (flattened for an MLP; for images the channel order and the ``1/255``
  scale of :class:`~pearl_core.algorithms.cnn.ImageInput`).
* ``Box`` (DDPG, TD3, SAC): the actor's action in ``[-1, 1]`` (DDPG/TD3's tanh output, SAC's
  ``tanh(mean)``) scaled affinely onto ``[low, high]`` and clipped there, ``float32`` ``(n, *action_shape)``.

Which network: the trainer's ``export_module()`` if it defines one, else the network its ``acting_net``
names (the built-ins' ``"q_net"`` / ``"actor"``), then its other networks; for each, the structures above
are tried and the first whose output equals ``predict`` on sampled observations is taken (equal for
``Discrete``, within :data:`ATOL` for ``Box``). The written file is checked the same way (ONNX when
onnxruntime is installed) before it replaces anything at ``path``.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import os
import warnings
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from torch import nn

from pearl_core.errors import ExportError, InvalidValueError
from pearl_core.fileio import atomic_write

__all__ = ["ATOL", "FORMATS", "acting_module", "export_policy"]

FORMATS = ("torchscript", "onnx")
#: Largest difference allowed between an exported module's ``Box`` actions and ``predict``'s.
ATOL = 1e-5
#: Observations sampled from the observation space to check a module against ``predict``.
N_PROBES = 8

_HOW = ("Fix: give the trainer a method export_module(self) -> torch.nn.Module that maps a float32 batch of "
        "observations (n, *observation_shape) to the actions predict() returns: (n,) int64 for a Discrete space "
        "(its start added), (n, *action_shape) float32 inside the bounds for a Box.")


class GreedyQ(nn.Module):
    """``argmax_a net(x) + start`` of a Q network, ``x`` the observations as the trainer feeds them."""

    def __init__(self, net: nn.Module, start: int, *, flatten: bool, channels_last: bool = False,
                 scale: float = 1.0):
        super().__init__()
        self.net, self.start, self.flatten = net, int(start), bool(flatten)
        self.channels_last, self.scale = bool(channels_last), float(scale)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        if self.scale != 1.0:
            x = x * self.scale
        if self.flatten:
            x = torch.flatten(x, 1)
        return self.net(x).argmax(dim=1) + self.start


class BoxActor(nn.Module):
    """An actor's normalised action scaled onto a ``Box``: ``clip(mid + span * a, low, high)``, ``span`` the half-range.

    ``a`` is the network's output as it is (``"tanh"``: it ends in a tanh, DDPG/TD3), or ``tanh`` of it
    (``"raw"``), or ``tanh`` of its first ``d`` outputs (``"mean"``: a squashed Gaussian's mean, SAC).
    """

    low: torch.Tensor  # buffers, registered in __init__
    high: torch.Tensor
    mid: torch.Tensor
    span: torch.Tensor

    def __init__(self, net: nn.Module, space: Any, squash: str):
        super().__init__()
        low = np.asarray(space.low, dtype=np.float32)
        high = np.asarray(space.high, dtype=np.float32)
        self.net, self.squash = net, squash
        self.shape = tuple(int(d) for d in space.shape)
        self.d = int(np.prod(self.shape))
        for name, value in (("low", low), ("high", high), ("mid", (high + low) / 2), ("span", (high - low) / 2)):
            self.register_buffer(name, torch.from_numpy(np.ascontiguousarray(value)))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        a = self.net(torch.flatten(obs, 1))
        if self.squash == "mean":
            a = torch.tanh(a[:, : self.d])
        elif self.squash == "raw":
            a = torch.tanh(a)
        act = self.mid + self.span * a.reshape((-1,) + self.shape)
        return torch.minimum(torch.maximum(act, self.low), self.high)


# --------------------------------------------------------------------------------------
# Finding the module
# --------------------------------------------------------------------------------------
def _networks(trainer: Any) -> Iterator[tuple[str, nn.Module]]:
    """The trainer's networks: the one ``acting_net`` names first, then its other ``nn.Module`` attributes."""
    seen: set[int] = set()
    acting = getattr(trainer, "acting_net", None)
    first = getattr(trainer, acting, None) if isinstance(acting, str) else acting
    if isinstance(first, nn.Module):
        seen.add(id(first))
        yield (acting if isinstance(acting, str) else "acting_net"), first
    for name, value in vars(trainer).items():
        if isinstance(value, nn.Module) and id(value) not in seen:
            seen.add(id(value))
            yield name, value


def _candidates(policy: Any, net: nn.Module) -> Iterator[nn.Module]:
    """The structures a network of this trainer may compute the greedy action with (see the module)."""
    space = policy.action_space
    if policy.discrete:
        start = int(getattr(space, "start", 0))
        if len(policy.obs_shape) == 3:
            from pearl_core.algorithms.cnn import ImageInput

            image = getattr(policy.trainer, "_image", None)
            if not isinstance(image, ImageInput):
                try:
                    image = ImageInput(policy.observation_space, "export")
                except Exception:  # noqa: BLE001 - not an image space: the other structures remain
                    image = None
            if image is not None:
                yield GreedyQ(net, start, flatten=False, channels_last=image.channels_last, scale=image.scale)
        yield GreedyQ(net, start, flatten=True)
        yield GreedyQ(net, start, flatten=False)
    elif hasattr(space, "low") and np.isfinite(space.low).all() and np.isfinite(space.high).all():
        for squash in ("tanh", "mean", "raw"):
            yield BoxActor(net, space, squash)


def _probes(policy: Any, n: int = N_PROBES, seed: int = 0) -> np.ndarray:
    """``n`` observations sampled (seeded) from the policy's observation space, in its dtype."""
    space = copy.deepcopy(policy.observation_space)
    space.seed(seed)
    return np.stack([np.asarray(space.sample()) for _ in range(n)])


def _mismatch(run: Any, policy: Any, obs: np.ndarray) -> str | None:
    """Why ``run(float32 obs)`` differs from ``policy.predict(obs)`` (``None``: it does not)."""
    want = policy.predict(obs, deterministic=True)
    try:
        got = np.asarray(run(obs.astype(np.float32)))
    except Exception as exc:  # noqa: BLE001 - a structure that does not fit this network
        return f"it raised {type(exc).__name__}: {str(exc)[:200]}"
    if got.shape != want.shape:
        return f"it returned shape {got.shape}; predict returns {want.shape}"
    if policy.discrete:
        if not np.array_equal(got, want):
            return f"its actions {got.tolist()} differ from predict's {want.tolist()}"
        return None
    diff = float(np.max(np.abs(got.astype(np.float64) - want))) if got.size else 0.0
    return None if diff <= ATOL else f"its actions differ from predict's by up to {diff:.3g} (allowed {ATOL})"


def _torch_runner(module: nn.Module):
    def run(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out = module(torch.from_numpy(np.ascontiguousarray(obs)))
        return out.detach().cpu().numpy()

    return run


def _cpu_copy(module: nn.Module) -> nn.Module:
    try:
        module = copy.deepcopy(module)
    except Exception:  # noqa: BLE001 - a module that cannot be copied is exported as it is
        pass
    return module.cpu().eval()


def acting_module(policy: Any) -> nn.Module:
    """A CPU ``nn.Module`` computing ``policy.predict(obs, deterministic=True)`` from a ``float32`` batch.

    Raises:
        ExportError: the trainer's ``export_module()`` is not a module or differs from ``predict``, or no
            network of the trainer reproduces ``predict`` (the message says what to provide).
    """
    trainer = policy.trainer
    probes = _probes(policy)
    name = type(trainer).__name__
    custom = getattr(trainer, "export_module", None)
    if callable(custom):
        module = custom()
        if not isinstance(module, nn.Module):
            raise ExportError(f"Policy.export: {name}.export_module() returned {type(module).__name__}; expected a "
                              f"torch.nn.Module. {_HOW}")
        module = _cpu_copy(module)
        why = _mismatch(_torch_runner(module), policy, probes)
        if why is not None:
            raise ExportError(f"Policy.export: {name}.export_module() does not compute predict's actions: {why}. "
                              f"{_HOW}")
        return module
    tried = []
    for attr, net in _networks(trainer):
        for module in _candidates(policy, net):
            module = _cpu_copy(module)
            why = _mismatch(_torch_runner(module), policy, probes)
            if why is None:
                return module
            tried.append(f"{attr} as {type(module).__name__}"
                         f"{'(' + module.squash + ')' if isinstance(module, BoxActor) else ''}: {why}")
    found = "; ".join(tried[:6]) if tried else "the trainer holds no torch.nn.Module attribute"
    raise ExportError(
        f"Policy.export: no network of {name} computes predict's greedy actions for the action space "
        f"{policy.action_space} (expected a Q network whose argmax is the action, or an actor whose tanh output "
        f"is scaled to the Box; found: {found}). {_HOW}")


# --------------------------------------------------------------------------------------
# Writing it
# --------------------------------------------------------------------------------------
@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence torch's deprecation and tracer warnings while exporting (the check against predict stands)."""
    with warnings.catch_warnings():
        for category in (DeprecationWarning, FutureWarning, UserWarning):  # torch.jit.TracerWarning is a UserWarning
            warnings.simplefilter("ignore", category)
        yield


def _torchscript(module: nn.Module, example: torch.Tensor) -> tuple[bytes, Any]:
    with _quiet():
        traced = torch.jit.trace(module, example, check_trace=False)
        buf = io.BytesIO()
        torch.jit.save(traced, buf)
        loaded = torch.jit.load(io.BytesIO(buf.getvalue()))
    return buf.getvalue(), _torch_runner(loaded)


def _onnx(module: nn.Module, example: torch.Tensor) -> tuple[bytes, Any]:
    try:
        import onnx  # noqa: F401 - torch's exporter needs it
    except ImportError as exc:
        raise ExportError("Policy.export(format='onnx') needs the onnx package, which is not installed. Fix: "
                          "pip install 'pearl-core[export]' (onnx and onnxruntime), or export format='torchscript'."
                          ) from exc
    kwargs: dict[str, Any] = dict(input_names=["obs"], output_names=["action"],
                                  dynamic_axes={"obs": {0: "batch"}, "action": {0: "batch"}}, opset_version=17)
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False  # the TorchScript-based exporter: needs no onnxscript
    buf = io.BytesIO()
    try:
        with _quiet():
            # torch.onnx.export writes to a binary file object too; its annotation names only paths
            torch.onnx.export(module, (example,), buf, **kwargs)  # type: ignore[arg-type]
    except Exception as exc:  # torch's exporter raises many types
        raise ExportError(f"Policy.export(format='onnx'): torch.onnx.export failed ({type(exc).__name__}: "
                          f"{str(exc)[:300]}). Fix: export format='torchscript', or give the trainer an "
                          "export_module() that ONNX can export.") from exc
    data = buf.getvalue()
    try:
        import onnxruntime as ort
    except ImportError:
        return data, None  # written unchecked: nothing here runs ONNX
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])

    def run(obs: np.ndarray) -> np.ndarray:
        return session.run(None, {"obs": np.ascontiguousarray(obs, dtype=np.float32)})[0]

    return data, run


def export_policy(policy: Any, path: str | os.PathLike, format: str = "torchscript") -> Path:
    """:meth:`pearl_core.policy.Policy.export` (see there)."""
    if format not in FORMATS:
        raise InvalidValueError(f"Policy.export: format = {format!r}; expected one of {list(FORMATS)}.")
    module = acting_module(policy)
    probes = _probes(policy, seed=1)
    example = torch.from_numpy(probes.astype(np.float32))
    data, run = (_torchscript if format == "torchscript" else _onnx)(module, example)
    if run is not None:
        for obs in (probes[:1], probes, _probes(policy, 3, seed=2)):
            why = _mismatch(run, policy, obs)
            if why is not None:
                raise ExportError(f"Policy.export(format={format!r}): the exported module does not compute "
                                  f"predict's actions for a batch of {len(obs)}: {why}; nothing was written. "
                                  f"{_HOW}")
    return atomic_write(path, data, make_parents=True)
