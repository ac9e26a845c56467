"""The CUDA backend (skeleton).

This version registers the backend and reports honestly why it cannot be used:
either no CUDA stack/device is visible, or the kernels are not shipped yet. The
GPU sum-tree kernels and learner arrive with the CUDA backend issue.
"""

from __future__ import annotations

from typing import Any

from pearl_core.backend import Availability, Backend, DeviceInfo
from pearl_core.errors import BackendUnavailableError
from pearl_core.sumtree import SumTree

NOT_SHIPPED = "this version of pearl-cuda ships no GPU kernels yet"


def probe_cuda() -> str | None:
    """Return why no CUDA device can be used here, or ``None`` if one can."""
    try:
        import cupy
    except ImportError as exc:
        return f"cupy is not installed ({exc}); install it with `pip install pearl-cuda[cuda12]`"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - cupy raises its own error types
        return f"no usable CUDA driver or device ({type(exc).__name__}: {exc})"
    if count == 0:
        return "no CUDA device is visible"
    return None


class CudaBackend(Backend):
    """NVIDIA GPUs through cupy and torch (kernels not shipped yet)."""

    name = "cuda"
    device_kind = "cuda"

    def availability(self) -> Availability:
        problem = probe_cuda()
        return Availability.no(problem or f"a CUDA device is present, but {NOT_SHIPPED}")

    def devices(self) -> list[DeviceInfo]:
        return []

    def make_sum_tree(self, capacity: int, fanout: int = 16, **options: Any) -> SumTree:
        raise BackendUnavailableError(
            f"backend 'cuda' cannot make a sum tree: {self.availability().reason}.", backend=self.name
        )
