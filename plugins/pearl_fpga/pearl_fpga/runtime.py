"""OpenCL runtimes the FPGA kernels run on: dpctl (the product path) and pyopencl (checking only).

The kernels in ``pearl_fpga/kernels/*.cl`` are plain OpenCL C. The host code
(:mod:`pearl_fpga.sumtree`, :mod:`pearl_fpga.learner`) talks to them through the
small :class:`Runtime` surface below (allocate, copy in, copy out, launch), so
the same host code drives

* :class:`DpctlRuntime`: the backend's runtime. It picks, in this order, the
  **Intel FPGA Emulation Device** (``opencl:accelerator``), else an OpenCL CPU
  device (``opencl:cpu``). Real FPGA hardware is only reachable through
  :meth:`DpctlRuntime.from_binary` ("load an offline-compiled image"), which is
  **untested**: this project has built no bitstream and run none.
* :class:`PyOpenCLRuntime`: used by ``scripts/oclgrind_check.py`` to run the same
  host code under oclgrind (invalid accesses, races) and pocl (compiler messages;
  ``dpctl.program`` build errors carry no log). Not used by the backend.

Everything here is *functional emulation*: a timing measured on either runtime
is a CPU timing, never an FPGA timing, and nothing in the plugin reports it as one.

Environment: the intel-opencl wheels install ``.icd`` files holding an
unrelocated placeholder path, so the OpenCL ICD loader would find no platform.
:func:`ensure_icd_env` points ``OCL_ICD_FILENAMES`` at the environment's own
``lib/libintelocl.so`` and ``lib/libintelocl_emu.so`` when the variable is unset
and both files exist. It must run before ``dpctl`` is first imported;
:func:`import_dpctl` does both.
"""

from __future__ import annotations

import ctypes
import os
import sys
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pearl_core.errors import DeviceRuntimeError

from pearl_fpga import counters

__all__ = ["DpctlRuntime", "PyOpenCLRuntime", "Runtime", "ensure_icd_env", "import_dpctl", "kernel_source"]

ICD_LIBS = ("libintelocl.so", "libintelocl_emu.so")
#: dpctl filter strings tried in order by :meth:`DpctlRuntime.default`.
DEVICE_PREFERENCE = ("opencl:accelerator", "opencl:cpu")
EMULATION_NOTE = "functional emulation — no bitstream built or run"


def ensure_icd_env() -> str | None:
    """Set ``OCL_ICD_FILENAMES`` to this environment's Intel OpenCL libraries if unset; return its value."""
    if os.environ.get("OCL_ICD_FILENAMES"):
        return os.environ["OCL_ICD_FILENAMES"]
    libs = [Path(sys.prefix) / "lib" / name for name in ICD_LIBS]
    if all(p.is_file() for p in libs):
        os.environ["OCL_ICD_FILENAMES"] = ":".join(str(p) for p in libs)
        return os.environ["OCL_ICD_FILENAMES"]
    return None


def import_dpctl():
    """Import dpctl after :func:`ensure_icd_env` (raises ``ImportError`` when not installed)."""
    ensure_icd_env()
    import dpctl  # imported lazily on purpose: importing the plugin touches no device

    return dpctl


def kernel_source(name: str) -> str:
    """The OpenCL C source shipped as package data, e.g. ``kernel_source("sumtree.cl")``."""
    return resources.files("pearl_fpga").joinpath("kernels", name).read_text(encoding="utf-8")


class Runtime:
    """Allocate device buffers, copy, and launch kernels of one program source (in-order queue)."""

    description: str
    emulated: bool = True

    def alloc(self, nbytes: int) -> Any:
        raise NotImplementedError

    def write(self, buf: Any, host: np.ndarray) -> None:
        """Copy a contiguous host array to the start of ``buf`` (blocking)."""
        raise NotImplementedError

    def read(self, buf: Any, host: np.ndarray) -> np.ndarray:
        """Fill the contiguous host array from the start of ``buf`` (blocking; waits for queued kernels)."""
        raise NotImplementedError

    def copy(self, dst: Any, src: Any, nbytes: int) -> None:
        """Device-to-device copy, ordered after queued kernels."""
        raise NotImplementedError

    def kernel(self, source: str, name: str, options: str = "") -> Any:
        raise NotImplementedError

    def launch(self, kernel: Any, global_size: Sequence[int], args: Sequence[Any]) -> None:
        """Enqueue ``kernel``; ``args`` are buffers or numpy scalars (``np.int64``, ``np.float64``, ...)."""
        raise NotImplementedError

    def finish(self) -> None:
        raise NotImplementedError


_CTYPES = {np.dtype(np.int64): ctypes.c_longlong, np.dtype(np.int32): ctypes.c_int,
           np.dtype(np.float64): ctypes.c_double, np.dtype(np.float32): ctypes.c_float}


class DpctlRuntime(Runtime):
    """Kernels on a dpctl in-order queue, buffers in USM device memory."""

    def __init__(self, queue, description: str, emulated: bool = True):
        self.queue = queue
        self.description = description
        self.emulated = emulated
        self._programs: dict[tuple[str, str], Any] = {}
        self._kernels: dict[tuple[str, str, str], Any] = {}
        self._names: dict[int, str] = {}  # id(kernel) -> kernel name, for the launch counters
        self._dm = import_dpctl().memory

    @classmethod
    def default(cls) -> "DpctlRuntime":
        """The FPGA Emulation Device if present, else an OpenCL CPU device (shared per process)."""
        return _default_dpctl_runtime()

    @classmethod
    def from_binary(cls, image: str | os.PathLike, filter_string: str = "opencl:accelerator") -> "DpctlRuntime":
        """UNTESTED: use a real FPGA through an offline-compiled image (``aoc``/``icpx -fintelfpga`` output).

        Kernels are then looked up by name in that image instead of being built
        from source; the image must be compiled from ``pearl_fpga/kernels/*.cl``
        with the same macros (``-DUF=...``). No bitstream was built or run while
        writing this plugin, so this path has never executed on hardware.
        """
        dpctl = import_dpctl()
        import dpctl.program as dpp

        queue = dpctl.SyclQueue(filter_string, property="in_order")
        rt = cls(queue, f"{queue.sycl_device.name} (offline image {image}; untested)", emulated=False)
        rt._image = dpp.create_program_from_spirv(queue, Path(image).read_bytes())  # type: ignore[attr-defined]
        return rt

    def alloc(self, nbytes: int):
        return self._dm.MemoryUSMDevice(max(8, int(nbytes)), queue=self.queue)

    def write(self, buf, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        if host.nbytes:
            self.queue.memcpy(buf, host, host.nbytes)

    def read(self, buf, host: np.ndarray) -> np.ndarray:
        if host.nbytes:
            self.queue.memcpy(host, buf, host.nbytes)
        return host

    def copy(self, dst, src, nbytes: int) -> None:
        if nbytes:
            self.queue.memcpy(dst, src, int(nbytes))

    def kernel(self, source: str, name: str, options: str = ""):
        key = (source, options, name)
        if key in self._kernels:
            return self._kernels[key]
        prog = getattr(self, "_image", None) or self._programs.get(key[:2])
        if prog is None:
            import dpctl.program as dpp

            prog = self._programs[key[:2]] = dpp.create_program_from_source(self.queue, source, options)
        kern = self._kernels[key] = prog.get_sycl_kernel(name)
        self._names[id(kern)] = name
        return kern

    def launch(self, kernel, global_size: Sequence[int], args: Sequence[Any]) -> None:
        conv = [(_CTYPES[np.asarray(a).dtype](a.item()) if isinstance(a, np.generic) else a) for a in args]
        self.queue.submit(kernel, conv, [int(g) for g in global_size])
        counters.record(self._names.get(id(kernel), "?"))

    def finish(self) -> None:
        self.queue.wait()


@lru_cache(maxsize=1)
def _default_dpctl_runtime() -> DpctlRuntime:
    dpctl = import_dpctl()
    errors = []
    for fs in DEVICE_PREFERENCE:
        try:
            queue = dpctl.SyclQueue(fs, property="in_order")
        except Exception as exc:  # noqa: BLE001 - SyclQueueCreationError and driver errors alike
            errors.append(f"{fs}: {exc}")
            continue
        dev = queue.sycl_device
        if not dev.has_aspect_fp64:
            errors.append(f"{fs}: {dev.name} has no fp64 (the sum tree keeps float64 priorities)")
            continue
        return DpctlRuntime(queue, f"{dev.name} [{fs}]", emulated=True)
    raise DeviceRuntimeError("no usable OpenCL device through dpctl; tried " + "; ".join(errors) + ". Fix: "
                             "install an OpenCL runtime with an fp64 device (e.g. Intel's FPGA emulator).")


class PyOpenCLRuntime(Runtime):
    """The same surface over pyopencl (for oclgrind and pocl checks; not used by the backend)."""

    def __init__(self, context=None):
        import pyopencl as cl

        self.cl = cl
        self.ctx = context or cl.create_some_context(interactive=False)
        self.queue = cl.CommandQueue(self.ctx)
        dev = self.ctx.devices[0]
        self.description = f"{dev.name} [{dev.platform.name}]"
        self._programs: dict[tuple[str, str], Any] = {}
        self._kernels: dict[tuple[str, str, str], Any] = {}

    def alloc(self, nbytes: int):
        return self.cl.Buffer(self.ctx, self.cl.mem_flags.READ_WRITE, size=max(8, int(nbytes)))

    def write(self, buf, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        if host.nbytes:
            self.cl.enqueue_copy(self.queue, buf, host)

    def read(self, buf, host: np.ndarray) -> np.ndarray:
        if host.nbytes:
            self.cl.enqueue_copy(self.queue, host, buf)
        return host

    def copy(self, dst, src, nbytes: int) -> None:
        if nbytes:
            self.cl.enqueue_copy(self.queue, dst, src, byte_count=int(nbytes))

    def kernel(self, source: str, name: str, options: str = ""):
        key = (source, options, name)
        if key not in self._kernels:
            prog = self._programs.get(key[:2])
            if prog is None:
                prog = self._programs[key[:2]] = self.cl.Program(self.ctx, source).build(options=options.split())
            self._kernels[key] = self.cl.Kernel(prog, name)
        return self._kernels[key]

    def launch(self, kernel, global_size: Sequence[int], args: Sequence[Any]) -> None:
        kernel(self.queue, tuple(int(g) for g in global_size), None, *args)

    def finish(self) -> None:
        self.queue.finish()
