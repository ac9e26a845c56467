"""The behaviour a backend plugin gives the core.

A backend describes one kind of device (``cpu``, ``cuda``, ``fpga`` or any kind a
third party adds). The core asks it whether it can run here, which devices it
sees, and for every primitive the composer may place on such a device:

========================  ==========================================  =====================================
primitive                 method                                      when it returns ``None`` / not defined
========================  ==========================================  =====================================
replay manager            :meth:`Backend.make_sum_tree` (required)    --
learner                   :meth:`Backend.device_trainer` (a device    the trainer's own torch code on
                          trainer for an algorithm), or               :attr:`Backend.torch_device_type`, with
                          :meth:`Backend.learner_kernel` (a native    the backend's learner kernels; without
                          step the trainer calls)                     either, a learner here is refused
Data Storage              :meth:`Backend.make_storage`                host memory on a ``cpu`` device;
                                                                      refused on any other kind
queue transports (LAQ,    :meth:`Backend.make_transport`              shared-memory pipe queues
LDQ) to a learner here                                                (:class:`~pearl_core.runtime.queues.PipeQueue`)
========================  ==========================================  =====================================

Backends report; the composer decides where each primitive runs, checks that
every placement can be executed here (:mod:`pearl_core.placement`), and the
runtime asks the backend that owns the plan's device — never one by name.

A backend may also be a cost model for its kind: the composer calls
``analytic_cells`` and ``profile_cells`` on backends that define them (the
protocols :class:`~pearl_core.composer.costs.AnalyticCostModel` and
:class:`~pearl_core.composer.costs.ProfiledCostModel` state their signatures).
This module sits below the composer and imports nothing from it.

Typical use::

    from pearl_core.plugins import get_backend

    backend = get_backend("cpu")
    tree = backend.make_sum_tree(capacity=2**20, fanout=16)
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping

from pearl_core.sumtree import SumTree

if TYPE_CHECKING:
    from pearl_core.replay.storage import DataStorage, StorageSpec


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run on this machine, and if not, why."""

    available: bool
    reason: str | None = None

    @classmethod
    def yes(cls) -> "Availability":
        return cls(True, None)

    @classmethod
    def no(cls, reason: str) -> "Availability":
        return cls(False, reason)


@dataclass(frozen=True)
class DeviceInfo:
    """One device a backend detects (or is told about by a hardware spec).

    Attributes:
        name: unique, human-readable device name, e.g. ``"cpu0"`` or ``"cuda:0"``.
        kind: device kind, the backend's ``device_kind``.
        backend: name of the backend that reports it.
        description: one line for people, e.g. the processor model.
        details: kind-specific facts (cores, memory bytes, compute capability, ...).
    """

    name: str
    kind: str
    backend: str
    description: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)


class Backend(abc.ABC):
    """A device backend. Subclass it in a plugin and register the class.

    Class attributes:
        name: registry key used by :func:`pearl_core.plugins.get_backend`.
        device_kind: kind of device it drives (``"cpu"``, ``"cuda"``, ``"fpga"``, ...).
        max_fanout: largest sum-tree fanout supported, or ``None`` for any ``>= 2``.
            The conformance kit only tests fanouts the backend declares, and the
            composer does not place a replay manager with a larger fanout here.
        torch_device_type: the torch device type of this kind's devices
            (``"cpu"``, ``"cuda"``), or ``None`` when torch cannot run on them.
            A learner placed on ``<kind>:<i>`` without a :meth:`device_trainer`
            keeps its torch networks on ``"<torch_device_type>:<i>"`` (``"cpu"``
            when ``None``; it must then use one of this backend's learner kernels).

    Instantiation must be cheap and must not touch a device; device libraries are
    imported in :meth:`availability` or later.

    Optional cost-model methods (not part of this class; the composer looks for
    them): ``analytic_cells(device, workload)`` and ``profile_cells(device,
    workload, *, iterations, warmup)``, see :mod:`pearl_core.composer.costs`.
    """

    name: ClassVar[str]
    device_kind: ClassVar[str]
    max_fanout: ClassVar[int | None] = None
    torch_device_type: ClassVar[str | None] = None

    @abc.abstractmethod
    def availability(self) -> Availability:
        """Report whether this backend can run here; never raise for a missing device."""

    @abc.abstractmethod
    def devices(self) -> list[DeviceInfo]:
        """The devices this backend detects; empty when unavailable."""

    @abc.abstractmethod
    def make_sum_tree(self, capacity: int, fanout: int = 16, **options: Any) -> SumTree:
        """Create an all-zero sum tree on this backend's device.

        Args:
            capacity: number of leaves, ``>= 1``.
            fanout: children per node, ``>= 2`` and ``<= max_fanout`` if declared.
            **options: backend-specific tuning (e.g. ``threads`` for the CPU backend).
        """

    def learner_kernel(self, name: str) -> Callable[..., Any] | None:
        """A native implementation of a named learner step on this backend's device, or ``None``.

        Optional: the default returns ``None`` and the trainer keeps its own code.
        Trainers receive kernels through :func:`pearl_core.plugins.kernel_lookup`,
        which asks the backends of the learner device's kind. The ABI is typed, in
        :mod:`pearl_core.kernels` (exported by :mod:`pearl_core.sdk`): per name, a factory
        protocol, a kernel protocol (a ``batch`` attribute and ``step(args) -> result``) and the
        frozen records ``step`` takes and returns; :data:`pearl_core.kernels.KERNELS` maps each
        name to them. The trainer calls the factory once over numpy views of its tensors (the
        kernel writes them in place) and then ``step`` once per update with one argument record.

        ``"dqn_mlp"``
            one DQN update of a ReLU MLP (:mod:`pearl_core.algorithms.mlp_engine` states the
            math): :class:`~pearl_core.kernels.DQNKernelFactory` makes a
            :class:`~pearl_core.kernels.DQNKernel`, whose ``step`` takes a
            :class:`~pearl_core.kernels.DQNStepArgs` and returns a
            :class:`~pearl_core.kernels.DQNStepResult`. The CPU backend provides it.

        ``"dqn_cnn"``
            the same DQN update when layer 0 is one unpadded ``Conv2d`` (then ReLU and a flatten in
            torch's order: the small image encoder of :mod:`pearl_core.algorithms.cnn`):
            :class:`~pearl_core.kernels.DQNConvKernelFactory` (a
            :class:`~pearl_core.kernels.ConvShape` before the arrays), the same kernel and records
            on observations flattened to ``(B, channels * height * width)`` float32. The CPU
            backend provides it.

        ``"td3_mlp"``
            one TD3 update (two critics) or DDPG update (one critic) of ReLU MLPs, the actor ending
            in ``tanh`` (:mod:`pearl_core.algorithms.ac_engine` states what stays with the trainer;
            its ``update_policy`` is the math): :class:`~pearl_core.kernels.TD3KernelFactory`,
            :class:`~pearl_core.kernels.TD3Kernel`, :class:`~pearl_core.kernels.ACStepArgs` ->
            :class:`~pearl_core.kernels.ACStepResult`. The CPU backend provides it.

        ``"sac_mlp"``
            one SAC update: :class:`~pearl_core.kernels.SACKernelFactory`,
            :class:`~pearl_core.kernels.SACKernel`, :class:`~pearl_core.kernels.SACStepArgs` ->
            :class:`~pearl_core.kernels.SACStepResult`. The CPU backend provides it.

        ``pearl_core.testing``'s :class:`~pearl_core.testing.DQNKernelConformance`,
        :class:`~pearl_core.testing.DQNConvKernelConformance` and
        :class:`~pearl_core.testing.ActorCriticKernelConformance` check a kernel against the
        protocols, the records and the trainers' torch path.

        Must be cheap and must not raise for an unknown name (return ``None``).
        """
        return None

    def device_trainer(self, trainer_cls: type, device: str,
                       config: Mapping[str, Any]) -> Callable[..., Any] | None:
        """A trainer class that runs ``trainer_cls``'s algorithm on ``device``, or ``None``.

        Optional: the default returns ``None`` (the trainer runs its own code,
        see :attr:`torch_device_type` and :meth:`learner_kernel`). Return a
        :class:`~pearl_core.trainer.Trainer` subclass, or
        ``functools.partial(TrainerSubclass, **device_settings)`` to bind the
        plan's device settings. The runtime
        calls ``factory(observation_space, action_space, **kwargs)`` with the
        run's trainer keyword arguments (and ``seed``/``total_env_steps`` when the
        trainer class takes them), in the learner's process; the result must be
        a :class:`~pearl_core.trainer.Trainer` whose weights match
        ``trainer_cls``'s (actors run ``trainer_cls`` on the host).

        Args:
            trainer_cls: the run's trainer class, e.g. :class:`pearl_core.algorithms.DQN`.
                Offer a device trainer only for classes whose algorithm it
                implements exactly (a user's subclass that overrides the update
                is not DQN any more).
            device: the plan's device string, e.g. ``"fpga:0"``.
            config: the plan's configuration of this device for the learner
                (the composer's matrix-row ``config``, e.g. ``{"learner_dp": 2,
                "learner_uf": "4,4,2"}``) and ``"setting"`` (1 or 2, the protocol
                setting); only ``"setting"`` for a hand-written plan.

        Must be cheap, must not touch a device, and must not raise for a class
        it does not support (return ``None``).
        """
        return None

    def make_storage(self, spec: "StorageSpec", capacity: int, device: str,
                     **options: Any) -> "DataStorage | None":
        """A Data Storage resident on ``device``, or ``None`` when this backend has none.

        Optional: the default returns ``None``. A ``cpu`` device then gets the
        core's host-memory :class:`~pearl_core.replay.storage.DataStorage`; on
        any other kind the composer refuses the placement. The object returned
        must behave as :class:`~pearl_core.replay.storage.DataStorage` (subclass
        it and implement the public contract ``allocate``/``store``/``gather_into``/``field``;
        :class:`pearl_core.testing.StorageConformance` holds it to that) and report its
        device in ``.device``.
        """
        return None

    def make_transport(self, role: str, maxsize: int, ctx: Any) -> Any | None:
        """A bounded message queue for ``role`` between the host and a learner on this kind, or ``None``.

        Optional: the default returns ``None`` (a shared-memory
        :class:`~pearl_core.runtime.queues.PipeQueue`). ``role`` is ``"laq"``
        (host -> learner) or ``"ldq"`` (learner -> host); ``ctx`` is the
        multiprocessing context the run's processes are started with. The
        queue must have :class:`~pearl_core.runtime.queues.PipeQueue`'s surface
        (``put``/``get`` with ``block``/``timeout`` raising ``queue.Full`` /
        ``queue.Empty``, ``put_nowait``, ``get_nowait``, ``poll(timeout)``,
        ``reader`` (an object :func:`multiprocessing.connection.wait` accepts),
        ``close_sender``, ``close_receiver``, ``close``), keep order, never drop
        or duplicate a message, stay bounded by ``maxsize``, raise ``EOFError``
        from ``get`` once the sender is gone and nothing is left, and pickle
        into the worker process. :class:`pearl_core.testing.TransportConformance`
        checks all of that.
        """
        return None

    def settings(self) -> Mapping[str, Any]:
        """Backend-side settings that change what its kernels measure (build flags, environment).

        Optional: the default is empty. JSON values only; they are part of the
        profile cache key, so a changed setting is measured again instead of
        served from the cache.
        """
        return {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r} kind={self.device_kind!r}>"
