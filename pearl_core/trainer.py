"""The trainer contract: how a user's torch algorithm plugs into PEARL.

A trainer owns the policy (and any value/target networks), chooses actions and
learns from replayed batches. PEARL runs copies of it in the actors (for
``get_action``) and one in the learner (for ``update_policy``), moving weights
between them as numpy arrays.

The loop PEARL runs, in words::

    trainer = MyTrainer(env.observation_space, env.action_space, **hparams)
    actor:    trainer.env_steps = n; a = trainer.get_action(obs_batch, explore=True)
    learner:  result = trainer.update_policy(sampled.batch, sampled.weights)
              replay.update_priorities(sampled.indices, result.td_errors)
    sync:     actor_copy.set_weights(trainer.get_weights())

Rules a subclass follows (checked by :func:`pearl_core.trainer_check.check_trainer`):

* declare its layers as ``torch.nn.Linear`` / ``torch.nn.Conv2d`` modules held
  as attributes (directly or inside ``nn.Sequential``/``nn.Module`` children), so
  PEARL can read their shapes (:func:`layer_specs`) for its cost models;
* set ``input_shape`` to the observation shape it expects (must equal the
  environment's ``observation_space.shape``);
* set ``action_kind`` to ``"discrete"`` or ``"continuous"`` (must match a
  ``Discrete`` / ``Box`` action space);
* implement the four abstract methods below; ``update_policy`` returns one
  TD error per sample (never a batch-mean loss copied B times), which becomes
  that sample's new priority;
* optionally declare ``device_batches = True`` (:attr:`Trainer.device_batches`):
  ``update_policy`` then also takes a batch of torch tensors on the trainer's
  ``device`` and returns its TD errors there, without a host synchronisation,
  so a replay on the same device never copies a batch through the host. Host
  batches (numpy) work for every trainer;
* optionally, with device batches, offer :meth:`Trainer.graph_hooks`: the
  update's arithmetic as a function that can be captured once in a CUDA graph
  and replayed (:class:`GraphHooks`; :mod:`pearl_core.runtime.graphstep`).
"""

from __future__ import annotations

import abc
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["GraphHooks", "LayerSpec", "Trainer", "UpdateResult", "is_device_batch", "is_tensor", "layer_specs"]


@dataclass(frozen=True)
class UpdateResult:
    """What one learner step returns.

    Attributes:
        td_errors: ``float32``/``float64`` array of shape ``(B,)``, one per sample
            of the batch, in batch order; the replay turns ``|δ|`` into priorities.
            For a device batch (:attr:`Trainer.device_batches`): a detached
            ``float32`` ``(B,)`` ``torch.Tensor`` on the trainer's device.
        metrics: scalar diagnostics to log (``loss``, ``q_mean``, ...): python
            floats, or, for a device batch, detached 0-d tensors (reading them
            would synchronise with the device; the logger does it when it logs).
    """

    td_errors: np.ndarray | torch.Tensor
    metrics: Mapping[str, float | torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class GraphHooks:
    """How a trainer's device-batch update is captured once as a CUDA graph and replayed
    (:meth:`Trainer.graph_hooks`; :mod:`pearl_core.runtime.graphstep` runs it).

    A graph replays the device work its capture recorded, and none of the python that ran: a python
    value read during the capture (a counter, ``if updates % n == 0``) is frozen in it. So the update is
    given in parts:

    Attributes:
        update: ``update(batch, weights) -> UpdateResult`` for a device batch: the arithmetic of one update
            and nothing else: no host synchronisation, no python state that changes from one update to the
            next (the update counter is :attr:`advance`'s, periodic work :attr:`before`'s), every value that
            changes held in a tensor that the update changes in place. Its result's tensors are overwritten
            by each replay (read them after it).
        before: ``before()``: the eager work due before the next update (e.g. DQN's target-network copy
            when ``updates % target_update_every == 0``); run before every launch, outside the graph.
        advance: ``advance(count)``: ``count`` updates were replayed: move the python counters on.
        period: ``before`` has work at most once every ``period`` updates, at multiples of ``period``: a
            launch of ``K`` updates needs ``period % K == 0`` and starts at a multiple of ``K``. ``None``:
            ``before`` never has work (any ``K``).
        optimizers: the optimizers the update steps (made capturable before the capture).
        generators: the ``torch.Generator`` s the update draws from (registered with the graph, so each
            replay draws fresh numbers and moves the generator on, as eager updates do).
    """

    update: Callable[[Any, Any], "UpdateResult"]
    before: Callable[[], None]
    advance: Callable[[int], None]
    period: int | None = None
    optimizers: Sequence[Any] = ()
    generators: Sequence[Any] = ()


@dataclass(frozen=True)
class LayerSpec:
    """Shape metadata of one ``nn.Linear`` or ``nn.Conv2d`` layer (for analytic cost models).

    Attributes:
        name: dotted module name inside the trainer, e.g. ``"q_net.0"``.
        kind: ``"linear"`` or ``"conv2d"``.
        in_features / out_features: Linear sizes, or Conv2d in/out channels.
        kernel_size, stride: Conv2d only (``()`` for Linear).
        params: number of parameters (weights + bias).
    """

    name: str
    kind: str
    in_features: int
    out_features: int
    kernel_size: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    params: int = 0


class Trainer(abc.ABC):
    """Base class for user and built-in trainers (DQN, DDPG, ...).

    Class or instance attributes a subclass sets:
        input_shape: observation shape without the batch axis, e.g. ``(4,)``.
        action_kind: ``"discrete"`` or ``"continuous"``.

    Attributes set by PEARL:
        env_steps: total environment steps taken so far in the run; exploration
            schedules (ε, noise decay) read it. Updated before ``get_action``.

    Constructor convention: ``__init__(self, observation_space, action_space, **hparams)``
    with every hyper-parameter a keyword with a default, so PEARL can rebuild the
    trainer in another process from ``(cls, hparams)`` (classes must be importable:
    defined in a module, or in the ``__main__`` script under ``if __name__ == "__main__"``).
    """

    input_shape: tuple[int, ...]
    action_kind: ClassVar[str]
    env_steps: int = 0
    #: The update's threads yield to other processes (:meth:`use_threads`), so the composer may give
    #: the learner cores the actors use as well. ``False`` for torch's OpenMP pool, which spins.
    threads_yield: bool = False
    #: The update reads ``batch.steps`` (n-step returns, ``ReplayConfig.n_step > 1``): it bootstraps
    #: each sample with ``gamma ** batch.steps`` instead of ``gamma`` (e.g. through
    #: :func:`pearl_core.algorithms.common.bootstrap_discount`), and has a ``gamma`` attribute the
    #: actors sum the rewards with. A trainer that leaves it ``False`` is refused for ``n_step > 1``
    #: before a run starts (it would treat n-step returns as one-step ones).
    supports_n_step: ClassVar[bool] = False
    #: ``update_policy(batch, weights)`` also accepts a *device batch*: every field of ``batch``
    #: (``obs, action, reward, next_obs, done, steps``) a ``torch.Tensor`` on the trainer's ``device``
    #: (a ``torch.device`` attribute) in the stored dtypes (``obs``/``next_obs`` the observation dtype,
    #: ``action`` the action dtype: ``int64`` for ``Discrete``, the ``Box`` dtype for continuous ones,
    #: ``reward`` ``float32``, ``done`` ``bool``, ``steps`` ``int32``), and ``weights`` a ``float32``
    #: ``(B,)`` tensor there. For such a batch it returns ``UpdateResult(td_errors=<detached float32 (B,)
    #: tensor on the trainer's device, the values the host path returns>, metrics={name: detached 0-d
    #: tensor or python float})``, and it never synchronises with the host on the way: no ``.item()``,
    #: ``float(t)``, ``int(t)``, ``bool(t)``, ``.cpu()``, ``.numpy()``, ``.tolist()`` or python ``if``
    #: on a tensor (a GPU learner step stays asynchronous and can be captured as a CUDA graph). Host
    #: batches (numpy arrays) behave as for any trainer: numpy TD errors, float metrics.
    #: :func:`is_device_batch` tells the two apart. ``False``: PEARL hands this trainer host batches only.
    device_batches: ClassVar[bool] = False

    @abc.abstractmethod
    def get_action(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        """Choose actions for a batch of observations.

        Args:
            obs: array of shape ``(n, *input_shape)``.
            explore: add exploration (ε-greedy, action noise) when ``True``;
                act greedily/deterministically when ``False`` (evaluation).

        Returns:
            ``(n,)`` ``int64`` actions for discrete spaces; ``(n, *action_shape)``
            ``float32`` actions inside the space's bounds for continuous ones.
        """

    @abc.abstractmethod
    def update_policy(self, batch: Any, weights: np.ndarray) -> UpdateResult:
        """One gradient step on a replayed batch.

        Args:
            batch: a :class:`pearl_core.replay.Batch` (``obs``, ``action``,
                ``reward``, ``next_obs``, ``done``, ``steps``; leading axis ``B``);
                ``steps`` is all ones unless the run uses n-step returns
                (:attr:`supports_n_step`). Numpy arrays, or torch tensors on the
                trainer's device where it declares :attr:`device_batches`.
            weights: ``(B,)`` ``float32`` importance weights (all ones for uniform
                replay); multiply each sample's loss by its weight.

        Returns:
            An :class:`UpdateResult` with ``B`` per-sample TD errors (a device
            tensor for a device batch, see :attr:`device_batches`).
        """

    @abc.abstractmethod
    def get_weights(self) -> dict[str, np.ndarray]:
        """The acting policy's parameters as numpy arrays (what actors need)."""

    @abc.abstractmethod
    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Load parameters produced by :meth:`get_weights` of another copy."""

    def weight_tensors(self) -> Mapping[str, "torch.Tensor"] | None:
        """The tensors :meth:`get_weights` copies, by the same names (views, not copies), or ``None`` (the
        default): a GPU learner then publishes through :meth:`get_weights`, waiting for the copy. With them
        it copies them to the host asynchronously (:class:`~pearl_core.runtime.devicemove.WeightCopier`)."""
        return None

    def graph_hooks(self) -> GraphHooks | None:
        """The update in the parts a CUDA graph needs (:class:`GraphHooks`), or ``None`` (the default): the
        update runs eagerly, launch by launch. Asked only where :attr:`device_batches` holds and the replay
        is on the trainer's GPU; a trainer answers ``None`` where its current configuration cannot be
        captured (e.g. a CPU engine)."""
        return None

    def use_threads(self, n: int) -> None:
        """Run the learner's updates on ``n`` threads (the plan's learner threads).

        The runtime calls it in the learner's process. The default sets torch's
        intra-op threads. A trainer whose update runs its own threads (the DQN's
        native step) overrides it, and keeps torch's pool at one thread: an idle
        OpenMP pool spins, and would spin against the actors between updates.
        """
        import torch

        torch.set_num_threads(int(n))

    def learner_passes(self) -> Mapping[str, tuple[float, float, float]]:
        """Passes of one update through each network, for the composer's cost models.

        Maps a network's attribute name (``"critic"``) to ``(forward, weight-gradient,
        input-gradient)`` passes per update; a network not named gets one forward pass and,
        if trainable, one backward pass with both gradients (what a DQN's networks take). An
        actor-critic says, e.g., that its critic is evaluated twice (the critic loss and the
        actor loss) and back-propagated twice for its input gradient but once for its weights.
        """
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume training (networks, optimizers, counters).

        The default saves every ``torch.nn.Module`` and ``torch.optim.Optimizer``
        attribute plus ``env_steps``; override to add schedules or RNG state.
        """
        import torch

        out: dict[str, Any] = {"env_steps": self.env_steps}
        for name, value in vars(self).items():
            if isinstance(value, (torch.nn.Module, torch.optim.Optimizer)):
                out[name] = value.state_dict()
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved."""
        import torch

        self.env_steps = int(state.get("env_steps", 0))
        for name, value in vars(self).items():
            if isinstance(value, (torch.nn.Module, torch.optim.Optimizer)) and name in state:
                value.load_state_dict(state[name])


def is_device_batch(batch: Any) -> bool:
    """Whether ``batch`` is a device batch (its ``obs`` a ``torch.Tensor``, :attr:`Trainer.device_batches`).

    Never imports torch: a process that has not imported it holds no tensors.
    """
    return is_tensor(getattr(batch, "obs", None))


def is_tensor(value: Any) -> bool:
    """Whether ``value`` is a ``torch.Tensor``, without importing torch (a process that has not imported it
    holds no tensors)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def layer_specs(trainer: Any) -> list[LayerSpec]:
    """List the ``nn.Linear`` / ``nn.Conv2d`` layers held by a trainer, in attribute order.

    Modules reachable from several attributes (a target network sharing layers)
    are reported once.
    """
    import torch.nn as nn

    specs: list[LayerSpec] = []
    seen: set[int] = set()
    for attr, value in vars(trainer).items():
        if not isinstance(value, nn.Module):
            continue
        for sub, mod in value.named_modules(prefix=attr):
            if id(mod) in seen:
                continue
            seen.add(id(mod))
            params = sum(p.numel() for p in mod.parameters(recurse=False))
            if isinstance(mod, nn.Linear):
                specs.append(LayerSpec(sub, "linear", mod.in_features, mod.out_features, params=params))
            elif isinstance(mod, nn.Conv2d):
                specs.append(
                    LayerSpec(sub, "conv2d", mod.in_channels, mod.out_channels,
                              tuple(mod.kernel_size), tuple(mod.stride), params)
                )
    return specs
