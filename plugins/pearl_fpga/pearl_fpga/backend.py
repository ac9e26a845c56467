"""The FPGA backend (skeleton).

This version registers the backend and reports honestly why it cannot be used.
The pipelined OpenCL kernels, their dpctl execution on the FPGA Emulation Device
and the analytic cost model arrive with the FPGA backend issue. No bitstream is
built or run by this plugin.
"""

from __future__ import annotations

from typing import Any

from pearl_core.backend import Availability, Backend, DeviceInfo
from pearl_core.errors import BackendUnavailableError
from pearl_core.sumtree import SumTree

NOT_SHIPPED = "this version of pearl-fpga ships no FPGA kernels yet"


def probe_dpctl() -> str | None:
    """Return why dpctl cannot be used here, or ``None`` if it imports."""
    try:
        import dpctl  # noqa: F401
    except ImportError as exc:
        return f"dpctl is not installed ({exc}); install it with `pip install pearl-fpga[emulator]`"
    except Exception as exc:  # noqa: BLE001 - a broken OpenCL runtime raises at import
        return f"dpctl failed to import ({type(exc).__name__}: {exc})"
    return None


class FpgaBackend(Backend):
    """FPGAs through OpenCL/SYCL kernels driven by dpctl (kernels not shipped yet)."""

    name = "fpga"
    device_kind = "fpga"

    def availability(self) -> Availability:
        problem = probe_dpctl()
        return Availability.no(problem or f"dpctl imports, but {NOT_SHIPPED}")

    def devices(self) -> list[DeviceInfo]:
        return []

    def make_sum_tree(self, capacity: int, fanout: int = 16, **options: Any) -> SumTree:
        raise BackendUnavailableError(
            f"backend 'fpga' cannot make a sum tree: {self.availability().reason}.", backend=self.name
        )

    def analytic_cells(self, device, workload):
        """The paper's Eq. 2-6 model of a described FPGA (:func:`pearl_fpga.model.device_row`); no device touched."""
        from pearl_fpga.model import device_row

        return device_row(device, workload)
