"""The CUDA backend: GPU sum tree (cupy kernels), GPU Data Storage, detection, its analytic model and measurements.

Importing this module touches no device; cupy is imported in
:meth:`CudaBackend.availability` and later. The backend is available when cupy
imports, a device is visible and the sum-tree kernels compile for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pearl_core.errors import BackendUnavailableError, InvalidOptionError
from pearl_core.sdk import Availability, Backend, DeviceInfo, SumTree
from pearl_cuda.detect import list_gpus, probe
from pearl_cuda.device import check_visible, cuda_ordinal

if TYPE_CHECKING:
    from pearl_core.sdk import DataStorage, DeviceRow, DeviceSpec, MeasureRequest, PrimitiveCost, StorageSpec, Workload

__all__ = ["CudaBackend", "probe_cuda"]


def probe_cuda() -> str | None:
    """Why no CUDA device can be used here, or ``None`` if one can (kept for callers of the skeleton)."""
    return probe()


def _kernel_problem() -> str | None:
    try:
        from pearl_cuda import kernels

        kernels.load(0)
    except Exception as exc:  # noqa: BLE001 - report any compile failure as the reason
        return f"a CUDA device is present, but the sum-tree kernels failed to compile ({type(exc).__name__}: {exc})"
    return None


class CudaBackend(Backend):
    """NVIDIA GPUs through cupy (sum tree, Data Storage) and torch (learner).

    Sum-tree options: ``device`` (the plan's device string ``"cuda:N"`` or an
    ordinal; default GPU 0), ``update_strategy`` (``"auto"``, ``"levels"``,
    ``"block"``, ``"grid"``); ``threads`` is accepted and ignored (the runtime
    passes the CPU backend's knob to every backend). A learner placed on
    ``cuda:N`` runs the trainer's own torch code on ``"cuda:N"``
    (:attr:`torch_device_type`); this backend offers no device trainer.
    """

    name = "cuda"
    device_kind = "cuda"
    torch_device_type = "cuda"
    #: Conservative figures for a detected GPU that its details do not give (each listed in the spec's ``assumed``).
    spec_defaults = {"idle_power_w": 30.0, "active_power_w": 250.0, "mem_bandwidth_Bps": 500e9,
                     "memory_bytes": 16 * 2**30}

    def __init__(self) -> None:
        self._availability: Availability | None = None

    def availability(self) -> Availability:
        if self._availability is None:
            problem = probe_cuda() or _kernel_problem()
            self._availability = Availability.no(problem) if problem else Availability.yes()
        return self._availability

    def devices(self) -> list[DeviceInfo]:
        if not self.availability().available:
            return []
        return list_gpus()

    def _require(self, what: str) -> None:
        avail = self.availability()
        if not avail.available:
            raise BackendUnavailableError(f"backend 'cuda' cannot make {what}: {avail.reason}.", backend=self.name)

    def make_sum_tree(self, capacity: int, fanout: int = 16, **options: Any) -> SumTree:
        options.pop("threads", None)
        ordinal = cuda_ordinal(options.pop("device", 0))  # a malformed device fails before anything else
        strategy = options.pop("update_strategy", "auto")
        if options:
            raise InvalidOptionError(f"cuda backend: unknown sum-tree options {sorted(options)}; "
                                     "known: ['device', 'threads', 'update_strategy']")
        self._require("a sum tree")
        check_visible(ordinal, "the sum tree")
        from pearl_cuda.sumtree import CudaSumTree

        return CudaSumTree(capacity, fanout, device=ordinal, update_strategy=strategy)

    def make_storage(self, spec: "StorageSpec", capacity: int, device: str,
                     **options: Any) -> "DataStorage | None":
        """A :class:`~pearl_cuda.storage.CudaStorage` on ``device`` (``"cuda:N"``).

        Options: ``staging_rows`` and ``staging_slots`` (the pinned staging ring).
        """
        ordinal = cuda_ordinal(device)
        unknown = sorted(set(options) - {"staging_rows", "staging_slots"})
        if unknown:
            raise InvalidOptionError(f"cuda backend: unknown storage options {unknown}; "
                                     "known: ['staging_rows', 'staging_slots']")
        self._require("a Data Storage")
        check_visible(ordinal, "the Data Storage")
        from pearl_cuda.storage import CudaStorage

        return CudaStorage(spec, capacity, device=ordinal, **options)

    def analytic_cells(self, device: "DeviceSpec", workload: "Workload") -> "DeviceRow":
        """The GPU's analytic row (:func:`pearl_cuda.model.gpu_row`); touches no device, works without cupy."""
        from pearl_cuda.model import gpu_row

        return gpu_row(device, workload)

    def measure_primitive(self, device: "DeviceSpec", workload: "Workload",
                          request: "MeasureRequest") -> "PrimitiveCost | None":
        """``request`` (``replay``, ``learner`` or ``worker_loop``) measured on this GPU; ``None`` when the backend
        is unavailable here or for the host's primitives. The composer chooses what to ask
        (:mod:`pearl_core.composer.deviceprofile`); see :mod:`pearl_cuda.profile`."""
        if not self.availability().available:
            return None
        from pearl_cuda.profile import measure

        return measure(self, device, workload, request)
