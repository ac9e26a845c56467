"""The behaviour a backend plugin gives the core.

A backend describes one kind of device (``cpu``, ``cuda``, ``fpga`` or any kind a
third party adds). The core asks it whether it can run here, which devices it
sees, and for kernels: the sum tree and, optionally, native learner steps.
Backends report; the composer decides where each primitive runs.

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
from typing import Any, Callable, ClassVar, Mapping

from pearl_core.sumtree import SumTree


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
            The conformance kit only tests fanouts the backend declares.

    Instantiation must be cheap and must not touch a device; device libraries are
    imported in :meth:`availability` or later.

    Optional cost-model methods (not part of this class; the composer looks for
    them): ``analytic_cells(device, workload)`` and ``profile_cells(device,
    workload, *, iterations, warmup)``, see :mod:`pearl_core.composer.costs`.
    """

    name: ClassVar[str]
    device_kind: ClassVar[str]
    max_fanout: ClassVar[int | None] = None

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
        which asks the backends of the learner device's kind. Known names and the
        factory each returns:

        ``"dqn_mlp"``
            one DQN update of a ReLU MLP (:mod:`pearl_core.algorithms.mlp_engine`
            states the math). ``factory(online, target, exp_avgs, exp_avg_sqs,
            steps, batch)`` returns an object whose ``step(obs, actions, rewards,
            next_obs, done, weights, gamma, huber_delta, max_grad_norm,
            double_dqn, lr, beta1, beta2, eps)`` updates the arrays in place and
            returns ``(|delta| per sample, loss, mean q)``; ``max_grad_norm`` 0
            means no clipping. The CPU backend provides it.

        Must be cheap and must not raise for an unknown name (return ``None``).
        """
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r} kind={self.device_kind!r}>"
