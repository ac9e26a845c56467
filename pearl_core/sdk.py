"""The typed surface for backend authors: everything a plugin needs from the core, in one module.

A plugin (this repository's ``pearl_cpu``, ``pearl_cuda``, ``pearl_fpga``, the guide's
``pearl_example_numpy``, or a third party's) imports only four core modules:

- ``pearl_core.sdk`` (this module): the names below;
- ``pearl_core.errors``: the exceptions it raises;
- ``pearl_core.hookspecs``: ``hookimpl``, to register its backends;
- ``pearl_core.testing`` (and its submodules): the conformance kit, in its tests.

Never composer or runtime internals: ``tests/test_sdk.py`` fails on any other
``pearl_core`` import in a plugin package, wherever it stands (module level, inside a
function, under ``TYPE_CHECKING``).

The names, by group:

- **Backend contract** — :class:`Backend` (the class a plugin subclasses; its docstrings are
  the contract), :class:`Availability` (whether a device can be used, and why not),
  :class:`DeviceInfo` (one device a backend sees).
- **Sum tree** — :class:`SumTree` (the contract a backend's tree implements) and the shared
  input checks a tree runs before touching its device (:func:`check_capacity_fanout`,
  :func:`check_indices`, :func:`check_priorities`, :func:`check_masses`), with
  :data:`MASS_DRIFT_RTOL` (the relative drift of the total mass a tree may show).
- **Data Storage** — :class:`DataStorage` (the host storage, subclassed by a device storage,
  which implements its public contract ``allocate`` / ``store`` / ``gather_into`` / ``field``),
  :class:`StorageSpec` (its field layout), :class:`Batch` (a gathered batch) and
  :data:`TRANSITION_FIELDS` (the field names of a transition).
- **Device faces** — :class:`DeviceSumTree` and :class:`DeviceStorage`, the protocols a tree and a
  storage whose memory is not the host's also offer (torch tensors in and out, no host
  synchronisation), so that the core's replay runs the learner iteration on their device;
  :func:`torch_dtype` maps a stored numpy dtype to torch's.
- **Device and work descriptions** — :class:`DeviceSpec` (a device as the hardware spec
  describes it), :class:`Workload` (one training iteration) and :class:`LearnerLayer` (one
  layer of its learner network): what a backend is asked to measure or model.
- **Cost records** — named, frozen records (no positional rows to decode, no string keys):
  :class:`DeviceRow` (a device's row of the assignment matrix, what ``analytic_cells`` and
  ``profile_cells`` return), :class:`CostCell` (one cell: seconds and where they came from),
  :data:`CELL_NAMES` (the cells a row holds); :class:`MeasureRequest` (what the composer asks a
  backend's ``measure_primitive`` to measure: one of :data:`PRIMITIVES` at given threads) and
  :class:`PrimitiveCost` (its answer); :class:`RunMeasurement` (one host variant's calibration run)
  and :class:`DeviceCosts` (a measured host's named measurements, ``DeviceRow.costs``).
- **Model helpers** — kind-neutral figures of one learner step of the built-in trainers, for a
  backend's analytic model (``analytic_cells``): :func:`learner_ops` (dispatched ops),
  :func:`learner_bytes` (bytes moved), :func:`layer_passes` (layer evaluations) and
  :data:`GEMM_EFFICIENCY` (achieved fraction of peak in small GEMMs). The core's own model is the
  host CPU's (:mod:`pearl_core.composer.analytic`); a GPU's lives in its plugin (``pearl_cuda.model``).
- **Measuring helpers** — ``profile_actor_step``, ``profile_learner``, ``profile_message_hop``,
  ``profile_replay_ops``, ``profile_worker_loop`` (time a primitive on a present device). The
  composer owns the policy (thread counts, host variants, calibration runs:
  :mod:`pearl_core.composer.hostprofile`); a backend measures what it is asked.
- **Transports** — :class:`MessageQueue` (what the runtime needs of a queue) and
  :class:`PipeQueue` (the core's shared-memory queue, to wrap or extend).
- **Learner kernels** — the typed ABI of :meth:`Backend.learner_kernel` (:mod:`pearl_core.kernels`):
  the frozen step records (:class:`DQNStepArgs`/:class:`DQNStepResult`, :class:`ACStepArgs`/
  :class:`ACStepResult`, :class:`SACStepArgs`/:class:`SACStepResult`, with :class:`AdamHyper` and
  :class:`ConvShape`), the factory and kernel protocols (:class:`DQNKernelFactory`,
  :class:`DQNConvKernelFactory`, :class:`DQNKernel`, :class:`TD3KernelFactory`, :class:`TD3Kernel`,
  :class:`SACKernelFactory`, :class:`SACKernel`), :data:`KERNELS` (name -> :class:`KernelSpec`) and
  :func:`check_kernel_result`.
- **Trainers** — :class:`DQN` (the core's DQN, for a device trainer that subclasses it) and
  :class:`UpdateResult` (what a trainer's update returns).

The names are re-exported from the modules that define them today (the same objects). The
backend contract and the sum tree load with this module (``import pearl_core`` loads them
anyway); every other name loads its module on first use (PEP 562), so importing a plugin's
backend stays as light as before: no composer, no torch (``DQN``), no device library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pearl_core.backend import Availability, Backend, DeviceInfo
from pearl_core.sumtree import (
    MASS_DRIFT_RTOL,
    SumTree,
    check_capacity_fanout,
    check_indices,
    check_masses,
    check_priorities,
)

if TYPE_CHECKING:  # what a type checker sees; at run time __getattr__ loads these on first use
    from pearl_core.algorithms.dqn import DQN
    from pearl_core.composer.analytic import GEMM_EFFICIENCY, layer_passes, learner_bytes, learner_ops
    from pearl_core.composer.matrix import (
        CELL_NAMES,
        PRIMITIVES,
        CostCell,
        DeviceCosts,
        DeviceRow,
        MeasureRequest,
        PrimitiveCost,
        RunMeasurement,
    )
    from pearl_core.composer.profiling import (
        profile_actor_step,
        profile_learner,
        profile_message_hop,
        profile_replay_ops,
        profile_worker_loop,
    )
    from pearl_core.composer.spec import DeviceSpec
    from pearl_core.composer.workload import LearnerLayer, Workload
    from pearl_core.kernels import (
        ACStepArgs,
        ACStepResult,
        AdamHyper,
        ConvShape,
        DQNConvKernelFactory,
        DQNKernel,
        DQNKernelFactory,
        DQNStepArgs,
        DQNStepResult,
        KERNELS,
        KernelSpec,
        SACKernel,
        SACKernelFactory,
        SACStepArgs,
        SACStepResult,
        TD3Kernel,
        TD3KernelFactory,
        check_kernel_result,
    )
    from pearl_core.replay.device import DeviceStorage, DeviceSumTree, torch_dtype
    from pearl_core.replay.storage import TRANSITION_FIELDS, Batch, DataStorage, StorageSpec
    from pearl_core.runtime.energy import NvmlCounters
    from pearl_core.runtime.queues import MessageQueue, PipeQueue
    from pearl_core.trainer import UpdateResult

__all__ = [
    # Backend contract
    "Availability",
    "Backend",
    "DeviceInfo",
    # Sum tree
    "MASS_DRIFT_RTOL",
    "SumTree",
    "check_capacity_fanout",
    "check_indices",
    "check_masses",
    "check_priorities",
    # Data Storage
    "Batch",
    "DataStorage",
    "StorageSpec",
    "TRANSITION_FIELDS",
    # Device faces
    "DeviceStorage",
    "DeviceSumTree",
    "torch_dtype",
    # Device and work descriptions
    "DeviceSpec",
    "LearnerLayer",
    "Workload",
    # Cost records
    "CELL_NAMES",
    "CostCell",
    "DeviceCosts",
    "DeviceRow",
    "MeasureRequest",
    "PRIMITIVES",
    "PrimitiveCost",
    "RunMeasurement",
    # Model helpers
    "GEMM_EFFICIENCY",
    "layer_passes",
    "learner_bytes",
    "learner_ops",
    # Measuring helpers
    "profile_actor_step",
    "profile_learner",
    "profile_message_hop",
    "profile_replay_ops",
    "profile_worker_loop",
    "NvmlCounters",
    # Transports
    "MessageQueue",
    "PipeQueue",
    # Learner kernels
    "ACStepArgs",
    "ACStepResult",
    "AdamHyper",
    "ConvShape",
    "DQNConvKernelFactory",
    "DQNKernel",
    "DQNKernelFactory",
    "DQNStepArgs",
    "DQNStepResult",
    "KERNELS",
    "KernelSpec",
    "SACKernel",
    "SACKernelFactory",
    "SACStepArgs",
    "SACStepResult",
    "TD3Kernel",
    "TD3KernelFactory",
    "check_kernel_result",
    # Trainers
    "DQN",
    "UpdateResult",
]

# name -> the module that defines it, loaded on first use (keep in step with the TYPE_CHECKING block).
_LAZY: dict[str, str] = {
    **dict.fromkeys(("Batch", "DataStorage", "StorageSpec", "TRANSITION_FIELDS"), "pearl_core.replay.storage"),
    **dict.fromkeys(("DeviceStorage", "DeviceSumTree", "torch_dtype"), "pearl_core.replay.device"),
    "DeviceSpec": "pearl_core.composer.spec",
    **dict.fromkeys(("LearnerLayer", "Workload"), "pearl_core.composer.workload"),
    **dict.fromkeys(("CELL_NAMES", "CostCell", "DeviceCosts", "DeviceRow", "MeasureRequest", "PRIMITIVES",
                     "PrimitiveCost", "RunMeasurement"), "pearl_core.composer.matrix"),
    **dict.fromkeys(("GEMM_EFFICIENCY", "layer_passes", "learner_bytes", "learner_ops"),
                    "pearl_core.composer.analytic"),
    **dict.fromkeys(("profile_actor_step", "profile_learner", "profile_message_hop", "profile_replay_ops",
                     "profile_worker_loop"), "pearl_core.composer.profiling"),
    **dict.fromkeys(("MessageQueue", "PipeQueue"), "pearl_core.runtime.queues"),
    "NvmlCounters": "pearl_core.runtime.energy",
    **dict.fromkeys(("ACStepArgs", "ACStepResult", "AdamHyper", "ConvShape", "DQNConvKernelFactory", "DQNKernel",
                     "DQNKernelFactory", "DQNStepArgs", "DQNStepResult", "KERNELS", "KernelSpec", "SACKernel",
                     "SACKernelFactory", "SACStepArgs", "SACStepResult", "TD3Kernel", "TD3KernelFactory",
                     "check_kernel_result"), "pearl_core.kernels"),
    "DQN": "pearl_core.algorithms.dqn",
    "UpdateResult": "pearl_core.trainer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pearl_core.sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
