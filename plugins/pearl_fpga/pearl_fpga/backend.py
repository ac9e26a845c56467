"""The FPGA backend: pipelined OpenCL kernels through dpctl, analytic cost model.

What runs here is **functional emulation — no bitstream built or run**. The
kernels (``pearl_fpga/kernels/*.cl``) execute on the Intel FPGA Emulation Device
when the ``pearl-fpga[emulator]`` extra is installed, else on an OpenCL CPU
device; both are CPUs underneath. The composer's FPGA cells therefore always
come from the analytic model (:mod:`pearl_fpga.model`, the paper's Eq. 2-6):
this backend deliberately has no ``measure_primitive``, so an emulator timing can
never be reported as an FPGA timing. The model reads the board's resources from the hardware spec, which
the backend declares (:attr:`FpgaBackend.spec_fields`): a device without them is not modelled (its row's
note names the missing fields).
"""

from __future__ import annotations

from typing import Any

from pearl_core.errors import BackendUnavailableError, InvalidOptionError, InvalidValueError
from pearl_core.sdk import Availability, Backend, DeviceInfo, SumTree, check_capacity_fanout

from pearl_fpga.runtime import EMULATION_NOTE


def probe_dpctl() -> str | None:
    """Return why dpctl cannot be used here, or ``None`` if it imports."""
    try:
        from pearl_fpga.runtime import import_dpctl

        import_dpctl()
    except ImportError as exc:
        return f"dpctl is not installed ({exc}); install it with `pip install pearl-fpga[emulator]`"
    except Exception as exc:  # noqa: BLE001 - a broken OpenCL runtime raises at import
        return f"dpctl failed to import ({type(exc).__name__}: {exc})"
    return None


def probe_runtime():
    """``(runtime, None)`` when a usable OpenCL device is reached (kernels built), else ``(None, why)``."""
    problem = probe_dpctl()
    if problem:
        return None, problem
    from pearl_fpga.runtime import DpctlRuntime, kernel_source

    try:
        rt = DpctlRuntime.default()
        rt.kernel(kernel_source("sumtree.cl"), "rm_sample_level")  # the device must build our kernels
    except Exception as exc:  # noqa: BLE001 - no device, no fp64, or a driver that cannot build
        return None, (f"dpctl imports but no usable OpenCL device was reached ({exc}). Fix: install "
                      "`pearl-fpga[emulator]` into this environment (it brings the FPGA Emulation Device); "
                      "OCL_ICD_FILENAMES, if you set it, must name existing OpenCL drivers")
    return rt, None


def _check_device(device) -> None:
    if str(device) not in ("fpga", "fpga:0"):
        raise InvalidValueError(f"backend 'fpga': device = {device!r}; expected 'fpga:0' (this plugin drives one "
                                "OpenCL device). Fix: place the primitive on fpga:0.")


class FpgaBackend(Backend):
    """FPGAs through OpenCL kernels driven by dpctl (functional emulation — no bitstream built or run)."""

    name = "fpga"
    device_kind = "fpga"
    torch_device_type = None  # torch does not run on an FPGA: the learner is the pipeline (device_trainer)
    #: The hardware-spec fields the Eq. 2-6 model reads (the board's resources and clock): the composer asks
    #: :meth:`analytic_cells` only for a device that has them all, and detection copies them from a device's details.
    spec_fields = ("dsp_blocks", "ram_blocks", "ram_block_bits", "logic_ram_blocks", "logic_ram_block_bits",
                   "clock_hz")

    def availability(self) -> Availability:
        _, problem = probe_runtime()
        return Availability.no(problem) if problem else Availability.yes()

    def devices(self) -> list[DeviceInfo]:
        rt, problem = probe_runtime()
        if problem:
            return []
        dev = rt.queue.sycl_device
        return [DeviceInfo(
            name="fpga-emu0",
            kind=self.device_kind,
            backend=self.name,
            description=f"{dev.name}: {EMULATION_NOTE}",
            details={"emulated": True, "runtime": rt.description, "driver": dev.driver_version,
                     "fp64": bool(dev.has_aspect_fp64),
                     "timings": "analytic model only (emulator timings are CPU timings)"},
        )]

    def make_sum_tree(self, capacity: int, fanout: int = 16, **options: Any) -> SumTree:
        """A :class:`~pearl_fpga.sumtree.PipelinedSumTree`.

        Options: ``runtime`` picks another OpenCL runtime; ``threads`` (passed by the core's
        runtime wiring to every backend) is accepted and ignored: the tree's parallelism is
        its level pipeline and the batch, not host threads.
        """
        capacity, fanout = check_capacity_fanout(capacity, fanout)
        runtime = options.pop("runtime", None)
        options.pop("threads", None)
        _check_device(options.pop("device", "fpga:0"))
        if options:
            raise InvalidOptionError(
                f"backend 'fpga' got unknown sum-tree options {sorted(options)}; expected 'runtime', 'threads' or "
                "'device'. Fix: drop the others."
            )
        from pearl_fpga.sumtree import PipelinedSumTree

        return PipelinedSumTree(capacity, fanout, runtime=runtime or self._runtime("make a sum tree"))

    def _runtime(self, what: str):
        rt, problem = probe_runtime()
        if problem:
            raise BackendUnavailableError(f"backend 'fpga' cannot {what}: {problem}.", backend=self.name)
        return rt

    def device_trainer(self, trainer_cls, device, config):
        """:class:`~pearl_fpga.dqn.FpgaDQN` for :class:`pearl_core.algorithms.DQN` (or ``FpgaDQN``), with the plan's
        learner pipeline: ``dp``/``uf`` from the device's ``learner_dp``/``learner_uf`` (``co_learner_*`` in
        setting 2, where the RM shares the FPGA), 1/1 when the plan gives none. Other trainers: ``None``
        (a user's DQN subclass may change the update, which the pipeline would silently not do)."""
        import functools

        from pearl_core.sdk import DQN

        from pearl_fpga.dqn import FpgaDQN

        if trainer_cls not in (DQN, FpgaDQN):
            return None
        prefix = "co_learner" if int(config.get("setting", 1)) == 2 and "co_learner_dp" in config else "learner"
        dp, uf = config.get(f"{prefix}_dp", 1), config.get(f"{prefix}_uf", 1)
        return functools.partial(FpgaDQN, dp=int(dp), uf=uf)

    def make_storage(self, spec, capacity, device, **options):
        """:class:`~pearl_fpga.storage.FpgaStorage`: the Data Storage in the FPGA's board memory (emulated)."""
        _check_device(device)
        if options:
            raise InvalidOptionError(f"backend 'fpga' got unknown storage options {sorted(options)}; expected none. "
                                     "Fix: drop them.")
        from pearl_fpga.storage import FpgaStorage

        return FpgaStorage(spec, capacity, device=device, runtime=self._runtime("make a Data Storage"))

    def analytic_cells(self, device, workload):
        """The paper's Eq. 2-6 model of a described FPGA (:func:`pearl_fpga.model.device_row`); no device touched."""
        from pearl_fpga.model import device_row

        return device_row(device, workload)
