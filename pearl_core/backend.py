"""The behaviour a backend plugin gives the core.

A backend describes one kind of device (``cpu``, ``cuda``, ``fpga`` or any kind a
third party adds). The core asks it whether it can run here, which devices it
sees, and for kernels (today: the sum tree). Backends report; the composer
decides where each primitive runs.

Typical use::

    backend = pearl_core.get_backend("cpu")
    tree = backend.make_sum_tree(capacity=2**20, fanout=16)
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping

from pearl_core.sumtree import SumTree

if TYPE_CHECKING:
    from pearl_core.composer.matrix import DeviceRow
    from pearl_core.composer.spec import DeviceSpec
    from pearl_core.composer.workload import Workload


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
        name: registry key used by :func:`pearl_core.get_backend`.
        device_kind: kind of device it drives (``"cpu"``, ``"cuda"``, ``"fpga"``, ...).
        max_fanout: largest sum-tree fanout supported, or ``None`` for any ``>= 2``.
            The conformance kit only tests fanouts the backend declares.

    Instantiation must be cheap and must not touch a device; device libraries are
    imported in :meth:`availability` or later.
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

    def analytic_cells(self, device: "DeviceSpec", workload: "Workload") -> "DeviceRow | None":
        """Model a device of this kind that is described in a hardware spec (present or not).

        Optional: the default returns ``None`` and the composer falls back to its
        own models (CPU and GPU) or marks the device unusable. Called even when
        the backend is unavailable here, so it must not touch a device.

        Args:
            device: the device as the spec describes it (resources, clock, power).
            workload: batch sizes, replay configuration and learner layers.

        Returns:
            A :class:`~pearl_core.composer.matrix.DeviceRow` for ``device.name``
            with ``"analytic"`` cells: per-iteration seconds and watts of the RM
            operations, the learner and both co-located, **excluding**
            communication (Algorithm 1 adds it from the spec's links). Leave a
            cell ``None`` (and say why in ``notes``) when the primitive cannot run
            there, e.g. RM and learner do not fit one FPGA together.
        """
        return None

    def profile_cells(self, device: "DeviceSpec", workload: "Workload", *, iterations: int = 1000,
                      warmup: int = 50) -> "DeviceRow | None":
        """Measure a *present* device of this kind on synthetic data.

        Optional: the default returns ``None`` and the composer falls back to
        :meth:`analytic_cells`. Called only when :meth:`availability` says yes and
        the spec's device is one this backend detects. The composer caches the
        returned row on disk, keyed by backend name and version, device and
        workload, so implementations need not cache.

        Args:
            device: the device as the spec (or detection) describes it.
            workload: batch sizes, replay configuration and learner layers.
            iterations: timed iterations per cell (medians are reported).
            warmup: untimed iterations before timing.

        Returns:
            A :class:`~pearl_core.composer.matrix.DeviceRow` for ``device.name`` with
            ``"profiled"`` cells (compute only, like :meth:`analytic_cells`) and the
            tuning found (thread split, streams, ...) in ``config``.
        """
        return None

    def learner_kernel(self, name: str) -> Callable[..., Any] | None:
        """A native implementation of a named learner step on this backend's device, or ``None``.

        Optional: the default returns ``None`` and the trainer keeps its own code.
        Known names and the factory each returns:

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
