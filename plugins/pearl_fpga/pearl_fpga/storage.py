"""Data Storage in the FPGA's board memory (``kernels/storage.cl``): the experiences live on the device.

:class:`FpgaStorage` is a :class:`~pearl_core.replay.storage.DataStorage` whose
five field arrays are device buffers. The base class validates and casts every
insertion first (a bad call changes nothing); then the rows are written as
one packet per field and the ``ds_scatter`` kernel puts them in their ring
slots. Sampling uploads the batch's indices and ``ds_gather`` collects the
rows into a packet that is read into the caller's arrays (the learner's batch
slot). Only the packets cross the host link: the storage itself never does.

Functional emulation, as the rest of this plugin: on the FPGA Emulation Device
"board memory" is host RAM behind the OpenCL runtime; ``bytes_to_device`` /
``bytes_from_device`` and the kernel counters (:mod:`pearl_fpga.counters`)
say what moved and what ran.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from pearl_core.sdk import TRANSITION_FIELDS, Batch, DataStorage, StorageSpec

from pearl_fpga import counters
from pearl_fpga.runtime import Runtime, kernel_source

__all__ = ["DeviceRows", "FpgaStorage"]


class DeviceRows:
    """A device buffer that a sampled batch's field is gathered into, so that it stays on the device.

    Pass a mapping of these (and a host ``"weights"`` array) as ``out`` to
    :meth:`~pearl_core.replay.base.ReplayManager.sample`: :class:`FpgaStorage`
    gathers the rows into the buffers and reads nothing back. ``as_float``: a
    ``bool`` field is written as ``float32`` 0/1 (what the learner's loss stage reads).
    """

    def __init__(self, buf, shape: tuple[int, ...], as_float: bool = False):
        self.buf, self.shape, self.as_float = buf, tuple(shape), as_float


class FpgaStorage(DataStorage):
    """Data Storage resident on an FPGA (emulated); see the module docstring.

    Args:
        spec, capacity: as :class:`~pearl_core.replay.storage.DataStorage`.
        device: the plan's device string (``"fpga:0"``), reported as :attr:`device`.
        runtime: the OpenCL runtime (default :meth:`pearl_fpga.runtime.DpctlRuntime.default`).
    """

    def __init__(self, spec: StorageSpec, capacity: int, *, device: str = "fpga:0", runtime: Runtime | None = None):
        if runtime is None:
            from pearl_fpga.runtime import DpctlRuntime

            runtime = DpctlRuntime.default()
        self.rt = runtime
        self.device = device
        self.bytes_to_device = 0
        self.bytes_from_device = 0
        src = kernel_source("storage.cl")
        self._k_scatter = runtime.kernel(src, "ds_scatter")
        self._k_gather = runtime.kernel(src, "ds_gather")
        self._k_gather_bool = runtime.kernel(src, "ds_gather_bool_f32")
        self.batches_on_device = 0  # sampled batches gathered into device buffers (never read by the host)
        self._staging: dict[str, tuple[int, object]] = {}
        super().__init__(spec, capacity)

    # -- the DataStorage contract (allocate, store, gather_into) -------------------------
    def _row_bytes(self, name: str) -> int:
        shape, dtype = self._layout[name]
        return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize

    def allocate(self) -> dict:
        return {name: self.rt.alloc(self._capacity * self._row_bytes(name)) for name in self._layout}

    def _buffer(self, role: str, nbytes: int):
        """A device packet buffer of at least ``nbytes`` for ``role`` (grown by doubling, then reused)."""
        have = self._staging.get(role)
        if have is None or have[0] < nbytes:
            size = max(nbytes, 2 * have[0]) if have else nbytes
            have = self._staging[role] = (size, self.rt.alloc(size))
        return have[1]

    def store(self, slots: np.ndarray, rows: Mapping[str, np.ndarray]) -> None:
        n = len(slots)
        if n == 0:
            return
        sbuf = self._buffer("slots", 8 * n)
        self.rt.write(sbuf, np.ascontiguousarray(slots, dtype=np.int64))
        self.bytes_to_device += 8 * n
        for name, values in rows.items():
            rb = self._row_bytes(name)
            packet = np.ascontiguousarray(values).view(np.uint8).reshape(-1)
            pbuf = self._buffer(f"in:{name}", n * rb)
            self.rt.write(pbuf, packet)
            self.rt.launch(self._k_scatter, [n * rb], [pbuf, sbuf, np.int64(rb), self._arrays[name]])
            self.bytes_to_device += n * rb
        self.rt.finish()

    def gather_into(self, idx: np.ndarray, out: Mapping[str, np.ndarray] | None = None) -> Batch:
        n = len(idx)
        ibuf = self._buffer("idx", 8 * max(n, 1))
        self.rt.write(ibuf, np.ascontiguousarray(idx, dtype=np.int64))
        self.bytes_to_device += 8 * n
        result = {}
        on_device = out is not None and any(isinstance(out[name], DeviceRows) for name in TRANSITION_FIELDS)
        for name in TRANSITION_FIELDS:
            shape, dtype = self._layout[name]
            rb = self._row_bytes(name)
            dst = out[name] if out is not None else np.empty((n, *shape), dtype=dtype)
            if isinstance(dst, DeviceRows):
                if n and dst.as_float:
                    self.rt.launch(self._k_gather_bool, [n], [self._arrays[name], ibuf, dst.buf])
                elif n:
                    self.rt.launch(self._k_gather, [n * rb], [self._arrays[name], ibuf, np.int64(rb), dst.buf])
            elif n:
                obuf = self._buffer(f"out:{name}", n * rb)
                self.rt.launch(self._k_gather, [n * rb], [self._arrays[name], ibuf, np.int64(rb), obuf])
                if dst.flags.c_contiguous and dst.dtype == dtype:
                    self.rt.read(obuf, dst.reshape(-1).view(np.uint8))
                else:
                    host = np.empty((n, *shape), dtype=dtype)
                    self.rt.read(obuf, host.reshape(-1).view(np.uint8))
                    dst[...] = host
                self.bytes_from_device += n * rb
            result[name] = dst
        if on_device:
            self.batches_on_device += 1
        else:
            counters.record(counters.BATCH_TO_HOST)
        return Batch.of(result)

    def device_rows_fit(self, obs_dim: int) -> bool:
        """Whether batches can be gathered straight into the learner pipeline's buffers: ``float32``
        observations of ``obs_dim`` values, scalar ``int64`` actions (the stored layout of a Discrete task)."""
        (o_shape, o_dtype), (a_shape, a_dtype) = self._layout["obs"], self._layout["action"]
        return (np.dtype(o_dtype) == np.float32 and int(np.prod(o_shape, dtype=np.int64)) == obs_dim
                and a_shape == () and np.dtype(a_dtype) == np.int64)

    def field(self, name: str) -> np.ndarray:
        """A read-only host copy of one whole field (all ``capacity`` rows), read from the device."""
        if name not in self._layout:
            return super().field(name)  # the base class's error for an unknown name
        shape, dtype = self._layout[name]
        host = np.empty((self._capacity, *shape), dtype=dtype)
        self.rt.read(self._arrays[name], host.reshape(-1).view(np.uint8))
        self.bytes_from_device += host.nbytes
        host.flags.writeable = False
        return host

    def __repr__(self) -> str:
        return f"FpgaStorage(device={self.device!r}, spec={self._spec}, capacity={self._capacity}, size={self._size})"
