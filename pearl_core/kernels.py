"""The learner-kernel ABI: typed records in and out of a backend's native learner steps.

A backend's :meth:`~pearl_core.backend.Backend.learner_kernel` hands out a *factory* per kernel
name; the trainer calls it once over numpy views of its tensors (parameters, targets, Adam
state: the kernel writes them in place) and gets a *kernel*, an object with a ``batch``
attribute and a ``step(args)`` method. Each update the trainer builds one frozen argument
record and the kernel returns one frozen result record:

* ``"dqn_mlp"``: factory :class:`DQNKernelFactory`, kernel :class:`DQNKernel`,
  ``step(DQNStepArgs) -> DQNStepResult``;
* ``"dqn_cnn"``: factory :class:`DQNConvKernelFactory` (a :class:`ConvShape` first), kernel
  :class:`DQNKernel`, the same step;
* ``"td3_mlp"``: factory :class:`TD3KernelFactory`, kernel :class:`TD3Kernel`,
  ``step(ACStepArgs) -> ACStepResult``;
* ``"sac_mlp"``: factory :class:`SACKernelFactory`, kernel :class:`SACKernel`,
  ``step(SACStepArgs) -> SACStepResult``.

The protocols are :func:`typing.runtime_checkable`: ``isinstance(kernel, DQNKernel)`` checks that
``batch`` and ``step`` are there (not their signatures).

:data:`KERNELS` holds that table; :func:`check_kernel_result` checks one result against it. The
math of each step: :mod:`pearl_core.algorithms.mlp_engine` (DQN) and
:mod:`pearl_core.algorithms.ac_engine` (TD3, DDPG, SAC; the trainers' ``update_policy`` is the
specification). ``pearl_core.testing``'s kernel suites hold a kernel to all of it.

The records are frozen ``slots`` dataclasses: building one costs a microsecond or two, against the
hundreds a step takes. Arrays are numpy: observations float32 ``(B, obs_dim)`` C-contiguous,
``done`` bool ``(B,)``, rewards, weights and discounts float32 ``(B,)``. A kernel that calls
native code unpacks the record into that call (the CPU backend's pybind11 steps stay positional).

This module imports neither torch nor anything else of the core: plugins import it through
:mod:`pearl_core.sdk`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, Iterator, Mapping, NamedTuple, Protocol, Sequence, runtime_checkable

import numpy as np

__all__ = [
    "ACBatch", "ACStepArgs", "ACStepResult", "StepBatch", "AdamHyper", "ConvShape", "DQNConvKernelFactory", "DQNKernel",
    "DQNKernelFactory", "DQNStepArgs", "DQNStepResult", "KERNELS", "KernelSpec", "SACKernel",
    "SACKernelFactory", "SACStepArgs", "SACStepResult", "TD3Kernel", "TD3KernelFactory", "check_kernel_result",
]

#: ``[(W, b), ...]`` per layer, float32 C-contiguous, ``W`` of shape ``(out, in)``.
Layers = Sequence[tuple[np.ndarray, np.ndarray]]
#: One optimizer's Adam state: ``(exp_avgs, exp_avg_sqs, steps)``, one moment array per parameter in
#: the optimizer's order and a float32 array of the per-parameter step counters (each step adds 1).
AdamState = tuple[Sequence[np.ndarray], Sequence[np.ndarray], np.ndarray]


# ----------------------------------------------------------------------------------- records
@dataclass(frozen=True, slots=True)
class AdamHyper:
    """One optimizer's Adam hyper-parameters for this step (torch's ``Adam``: ``lr``, ``betas``, ``eps``)."""

    lr: float
    beta1: float
    beta2: float
    eps: float

    @classmethod
    def from_optimizer(cls, optimizer: Any) -> "AdamHyper":
        """The hyper-parameters of a torch ``Adam``'s (single) parameter group."""
        g = optimizer.param_groups[0]
        b1, b2 = g["betas"]
        return cls(float(g["lr"]), float(b1), float(b2), float(g["eps"]))


@dataclass(frozen=True, slots=True)
class ConvShape:
    """Layer 0 of a ``"dqn_cnn"`` network: one unpadded ``Conv2d`` of square ``kernel`` and ``stride``
    over ``(channels, height, width)`` images, then ReLU and a flatten in torch's order."""

    channels: int
    height: int
    width: int
    kernel: int
    stride: int

    def __iter__(self) -> Iterator[int]:
        """``channels, height, width, kernel, stride``, so that ``c, h, w, k, s = shape`` works."""
        return iter((self.channels, self.height, self.width, self.kernel, self.stride))


@dataclass(frozen=True, slots=True)
class StepBatch:
    """The batch fields every step's arguments start with, in this order (their meaning is in each
    step's record): ``obs, actions, rewards, next_obs, done, weights``."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    done: np.ndarray
    weights: np.ndarray


@dataclass(frozen=True, slots=True)
class DQNStepArgs(StepBatch):
    """One DQN update (``"dqn_mlp"``, ``"dqn_cnn"``).

    Attributes:
        obs, next_obs: float32 ``(B, in_features)`` (``"dqn_cnn"``: the images flattened, scaled).
        actions: int64 ``(B,)`` in ``[0, n_actions)``.
        rewards, weights: float32 ``(B,)``; ``weights`` are the importance weights.
        done: bool ``(B,)``.
        gamma: the discount of a one-step sample.
        huber_delta: the Huber loss's ``k`` (``> 0``).
        max_grad_norm: the global gradient-norm clip; 0 means no clipping.
        double_dqn: pick ``a*`` with the online network.
        adam: the optimizer's hyper-parameters.
        discount: ``None``, or float32 ``(B,)`` ``gamma ** k`` per sample (n-step returns) that
            replaces ``gamma`` in the target. Every kernel must honour it.
    """

    gamma: float
    huber_delta: float
    max_grad_norm: float
    double_dqn: bool
    adam: AdamHyper
    discount: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class DQNStepResult:
    """What a DQN step returns: ``td`` float32 ``(B,)`` ``|delta|`` per sample, the batch's ``loss`` and mean q."""

    td: np.ndarray
    loss: float
    q_mean: float


@dataclass(frozen=True, slots=True)
class ACBatch(StepBatch):
    """:class:`StepBatch` plus the per-sample ``discount``: what an actor-critic step starts with
    (:class:`ACStepArgs`, :class:`SACStepArgs`); the meaning of each field is in :class:`ACStepArgs`."""

    discount: np.ndarray


@dataclass(frozen=True, slots=True)
class ACStepArgs(ACBatch):
    """One TD3 (two critics) or DDPG (one critic) update (``"td3_mlp"``).

    Attributes:
        obs, next_obs: float32 ``(B, obs_dim)``.
        actions: float32 ``(B, act_dim)``, normalised to ``[-1, 1]``.
        rewards, weights: float32 ``(B,)``.
        done: bool ``(B,)``.
        discount: float32 ``(B,)``: ``gamma``, or ``gamma ** k`` for an n-step sample.
        noise: float32 ``(B, act_dim)`` clipped target-smoothing noise (the trainer draws it), or ``None``.
        actor_update: whether the actor and Polyak steps are due this update.
        max_grad_norm: the global gradient-norm clip of each network; 0 means no clipping.
        tau: the Polyak rate of the targets.
        critic_adam, actor_adam: the optimizers' hyper-parameters.
    """

    noise: np.ndarray | None
    actor_update: bool
    max_grad_norm: float
    tau: float
    critic_adam: AdamHyper
    actor_adam: AdamHyper


@dataclass(frozen=True, slots=True)
class ACStepResult:
    """What a TD3/DDPG step returns: ``td`` float32 ``(B,)``, the critic loss, the mean q, and the
    actor loss (``nan`` when no actor step was due)."""

    td: np.ndarray
    critic_loss: float
    q_mean: float
    actor_loss: float


@dataclass(frozen=True, slots=True)
class SACStepArgs(ACBatch):
    """One SAC update (``"sac_mlp"``).

    Attributes:
        obs, actions, rewards, next_obs, done, weights, discount, max_grad_norm, tau: as :class:`ACStepArgs`'s.
        eps_next, eps_pi: float32 ``(B, act_dim)`` standard normal draws of the reparameterisation at
            ``s'`` and at ``s`` (the trainer draws them, in that order).
        target_entropy: the entropy target of the automatic ``alpha``.
        critic_adam, actor_adam: the optimizers' hyper-parameters.
        alpha_adam: ``log_alpha``'s optimizer's, or ``None`` (a fixed ``alpha``).
    """

    eps_next: np.ndarray
    eps_pi: np.ndarray
    max_grad_norm: float
    tau: float
    target_entropy: float
    critic_adam: AdamHyper
    actor_adam: AdamHyper
    alpha_adam: AdamHyper | None


@dataclass(frozen=True, slots=True)
class SACStepResult:
    """What a SAC step returns: ``td`` float32 ``(B,)``, the critic loss, the mean q, the actor loss, the
    policy's entropy, the alpha loss (``nan`` for a fixed alpha) and ``alpha`` after its step."""

    td: np.ndarray
    critic_loss: float
    q_mean: float
    actor_loss: float
    entropy: float
    alpha_loss: float
    alpha: float


# --------------------------------------------------------------------------------- protocols
@runtime_checkable
class DQNKernel(Protocol):
    """A ``"dqn_mlp"`` or ``"dqn_cnn"`` kernel, bound to the arrays its factory was given.

    ``threads`` (optional, not part of the protocol): a kernel that runs threads of its own exposes
    it, and the trainer sets it to the learner's thread count.
    """

    batch: int  #: the batch size every step takes (the trainer rebuilds the kernel when it changes)

    def step(self, args: DQNStepArgs) -> DQNStepResult:
        """One update, written in place into the arrays the factory was given."""
        ...


@runtime_checkable
class DQNKernelFactory(Protocol):
    """``"dqn_mlp"``: a :class:`DQNKernel` over a ReLU MLP's ``online`` (written) and ``target`` (read)
    layers, Adam's ``exp_avgs``/``exp_avg_sqs`` (one per parameter: ``W0, b0, W1, ...``), the float32
    per-parameter step counters ``steps``, for batches of ``batch``."""

    def __call__(self, online: Layers, target: Layers, exp_avgs: Sequence[np.ndarray],
                 exp_avg_sqs: Sequence[np.ndarray], steps: np.ndarray, batch: int) -> DQNKernel: ...


@runtime_checkable
class DQNConvKernelFactory(Protocol):
    """``"dqn_cnn"``: :class:`DQNKernelFactory`'s arrays after a :class:`ConvShape`; layer 0 is the
    convolution, its weight and moments seen 2-D ``(out_channels, channels * kernel * kernel)``."""

    def __call__(self, conv: ConvShape, online: Layers, target: Layers, exp_avgs: Sequence[np.ndarray],
                 exp_avg_sqs: Sequence[np.ndarray], steps: np.ndarray, batch: int) -> DQNKernel: ...


@runtime_checkable
class TD3Kernel(Protocol):
    """A ``"td3_mlp"`` kernel (TD3 with two critics, DDPG with one); ``threads`` as :class:`DQNKernel`'s."""

    batch: int

    def step(self, args: ACStepArgs) -> ACStepResult:
        """One update of the critics (and, when due, the actor and the targets), in place."""
        ...


@runtime_checkable
class TD3KernelFactory(Protocol):
    """``"td3_mlp"``: a :class:`TD3Kernel` over the actor's ReLU MLP (its ``tanh`` output is the kernel's)
    and its target, one layer list per critic (1 or 2, over ``[obs | action]``, 1 output) and per critic
    target, and each optimizer's :data:`AdamState` (the critics': critic 1's, then critic 2's)."""

    def __call__(self, actor: Layers, actor_target: Layers, critics: Sequence[Layers],
                 critic_targets: Sequence[Layers], actor_adam: AdamState, critic_adam: AdamState,
                 batch: int) -> TD3Kernel: ...


@runtime_checkable
class SACKernel(Protocol):
    """A ``"sac_mlp"`` kernel; ``threads`` as :class:`DQNKernel`'s."""

    batch: int

    def step(self, args: SACStepArgs) -> SACStepResult:
        """One update of the critics, the actor, ``log_alpha`` (automatic alpha) and the targets, in place."""
        ...


@runtime_checkable
class SACKernelFactory(Protocol):
    """``"sac_mlp"``: a :class:`SACKernel` over the actor (``2 * act_dim`` outputs: mean, log_std), two
    critics and their targets, the optimizers' :data:`AdamState`, ``log_alpha`` (float32 ``(1,)``) and
    its Adam state ``(exp_avg, exp_avg_sq, step)`` (``(1,)`` arrays), or ``None`` for a fixed alpha."""

    def __call__(self, actor: Layers, critics: Sequence[Layers], critic_targets: Sequence[Layers],
                 actor_adam: AdamState, critic_adam: AdamState, log_alpha: np.ndarray,
                 alpha_adam: tuple[np.ndarray, np.ndarray, np.ndarray] | None, batch: int) -> SACKernel: ...


class KernelSpec(NamedTuple):
    """One kernel name's ABI: the factory's and the kernel's protocols, the step's argument and result records."""

    factory: type
    kernel: type
    args: type
    result: type


#: name -> :class:`KernelSpec`, for every kernel name the core's trainers use.
KERNELS: Mapping[str, KernelSpec] = MappingProxyType({
    "dqn_mlp": KernelSpec(DQNKernelFactory, DQNKernel, DQNStepArgs, DQNStepResult),
    "dqn_cnn": KernelSpec(DQNConvKernelFactory, DQNKernel, DQNStepArgs, DQNStepResult),
    "td3_mlp": KernelSpec(TD3KernelFactory, TD3Kernel, ACStepArgs, ACStepResult),
    "sac_mlp": KernelSpec(SACKernelFactory, SACKernel, SACStepArgs, SACStepResult),
})

#: Result fields that may be ``nan``: no actor step was due (TD3/DDPG), a fixed alpha (SAC).
_MAY_BE_NAN = frozenset({"actor_loss", "alpha_loss"})


def check_kernel_result(name: str, result: Any, batch: int) -> None:
    """Check a ``step`` result of kernel ``name`` for a batch of ``batch``: the right record, ``td`` a
    float32 ``(batch,)`` array of finite values (``>= 0`` for DQN's ``|delta|``), every other field a
    real number, finite unless it may be ``nan`` (an actor loss with no actor step, a fixed alpha's loss).

    Raises:
        KeyError: an unknown kernel name.
        TypeError: ``result`` is not the name's result record, or a field has the wrong type.
        ValueError: a field has the wrong shape, dtype or value.
    """
    want: type[Any] = KERNELS[name].result
    if not isinstance(result, want):
        raise TypeError(f"{name}: step() returned {type(result).__name__} {_short(result)}; expected a "
                        f"pearl_core.sdk.{want.__name__} record")
    td = result.td
    if not isinstance(td, np.ndarray):
        raise TypeError(f"{name}: result.td is a {type(td).__name__}; expected a numpy array")
    if td.shape != (batch,) or td.dtype != np.float32:
        raise ValueError(f"{name}: result.td has shape {td.shape} and dtype {td.dtype}; expected ({batch},) float32")
    if not np.all(np.isfinite(td)) or (name.startswith("dqn") and np.any(td < 0)):
        raise ValueError(f"{name}: result.td holds {'negative or ' if name.startswith('dqn') else ''}non-finite "
                         f"values: {_short(td)}")
    for f in fields(result)[1:]:
        value = getattr(result, f.name)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
            raise TypeError(f"{name}: result.{f.name} = {_short(value)}; expected a real number")
        if not math.isfinite(float(value)) and not (f.name in _MAY_BE_NAN and math.isnan(float(value))):
            raise ValueError(f"{name}: result.{f.name} = {value!r}; expected a finite number")


def _short(value: Any) -> str:
    text = " ".join(repr(value).split())  # one line
    return text if len(text) <= 120 else text[:117] + "..."
