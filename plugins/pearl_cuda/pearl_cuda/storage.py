"""A Data Storage whose rows live in GPU memory (``CudaBackend.make_storage``).

:class:`CudaStorage` is a :class:`~pearl_core.replay.storage.DataStorage`: the
base class validates and casts every :meth:`add` before anything is written
(bad input changes nothing), keeps ``size``/``cursor`` and the slot rule; this
class only overrides where the rows are:

* ``_allocate`` — one cupy array per field, ``capacity`` rows, on GPU ``N``,
  plus a ring of **pinned** host staging buffers (``staging_slots`` of
  ``staging_rows`` rows each).
* ``_store(slots, rows)`` — rows are packed into the next pinned slot (a host
  memcpy), then copied to the device asynchronously on the storage's own CUDA
  stream, one copy per run of consecutive slots (a ring write is at most two
  runs). An event per slot says when the slot may be refilled
  (:class:`~pearl_cuda.transport.SlotRing`), so packing chunk ``t + 1``
  overlaps copying chunk ``t``; ``add`` returns without waiting for the copy.
* ``_take(idx, out)`` — the ``int64`` indices go to the device, every field
  is gathered there (``cupy.take`` into per-batch-size device buffers, on the
  same stream, so it sees every earlier write), and the batch is copied into
  the caller's host ``out`` arrays (or new host arrays): one device->host copy
  per field, which waits for the gather.
* ``field(name)`` — a read-only host copy of the whole field.
* :meth:`CudaStorage.gather_device` — the device face: the gathered fields as
  cupy arrays on the GPU, no host copy (for a device-resident sampler).

:attr:`CudaStorage.bytes_h2d` and :attr:`CudaStorage.bytes_d2h` count every
byte this storage moved each way (rows, indices, batches, field reads), so a
check can prove where it lived and what crossed the bus.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from pearl_core.errors import InvalidDTypeError, InvalidValueError
from pearl_core.replay.storage import TRANSITION_FIELDS, Batch, DataStorage, StorageSpec
from pearl_cuda.device import cuda_ordinal
from pearl_cuda.transport import SlotRing, chunk_rows

__all__ = ["DEFAULT_STAGING_BYTES", "CudaStorage", "consecutive_runs"]

#: Bytes of one pinned staging slot when ``staging_rows`` is not given (rows = this // row bytes).
DEFAULT_STAGING_BYTES = 4 * 2**20


def consecutive_runs(slots: np.ndarray) -> list[tuple[int, int, int]]:
    """``[(first slot, first row, length), ...]``: ``slots`` split where it stops counting up by one.

    Host logic: ``slots[r0:r0 + n] == range(s0, s0 + n)`` for each run ``(s0, r0, n)``.
    """
    n = int(slots.shape[0])
    if n == 0:
        return []
    breaks = np.flatnonzero(np.diff(slots) != 1) + 1
    starts = np.concatenate(([0], breaks)).tolist()
    ends = np.concatenate((breaks, [n])).tolist()
    return [(int(slots[a]), a, b - a) for a, b in zip(starts, ends)]


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidDTypeError(f"CudaStorage: {name} = {value!r} ({type(value).__name__}); expected an int >= 1. "
                                f"Fix: pass e.g. {name}=4.")
    if value < 1:
        raise InvalidValueError(f"CudaStorage: {name} = {value}; expected an int >= 1. Fix: pass e.g. {name}=4.")
    return int(value)


class CudaStorage(DataStorage):
    """The struct-of-arrays ring of :class:`DataStorage`, resident on one GPU (needs cupy).

    Args:
        spec: the observation/action layout.
        capacity: number of slots, ``>= 1``.
        device: ``"cuda:N"`` or an ordinal (default GPU 0).
        staging_rows: rows per pinned staging slot; default
            ``DEFAULT_STAGING_BYTES // row_bytes`` (at least 1, at most ``capacity``).
        staging_slots: pinned staging slots in rotation, ``>= 1`` (default 4).

    Attributes:
        device: ``"cuda:N"``, where the rows live.
        bytes_h2d: bytes copied host -> device so far (rows stored, indices of gathers).
        bytes_d2h: bytes copied device -> host so far (gathered batches, field reads).

    Raises:
        as :class:`DataStorage`, plus ``InvalidValueError``/``InvalidDTypeError``
        for a malformed device string or staging option.
    """

    def __init__(self, spec: StorageSpec, capacity: int, *, device: Any = 0, staging_rows: int | None = None,
                 staging_slots: int = 4):
        self._ordinal = cuda_ordinal(device)
        self.device = f"cuda:{self._ordinal}"
        self._staging_rows_opt = None if staging_rows is None else _positive_int(staging_rows, "staging_rows")
        self._staging_slots = _positive_int(staging_slots, "staging_slots")
        self.bytes_h2d = 0
        self.bytes_d2h = 0
        super().__init__(spec, capacity)  # validates spec and capacity, then calls _allocate

    # ------------------------------------------------------------------ the DataStorage hooks
    def _allocate(self) -> dict[str, Any]:
        import cupy as cp

        self._cp = cp
        self._dev = cp.cuda.Device(self._ordinal)
        self._row_bytes = {name: int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
                           for name, (shape, dtype) in self._layout.items()}
        row_bytes = max(1, sum(self._row_bytes.values()))
        rows = self._staging_rows_opt or max(1, DEFAULT_STAGING_BYTES // row_bytes)
        self.staging_rows = min(rows, self._capacity)
        with self._dev:
            self._stream = cp.cuda.Stream(non_blocking=True)
            arrays = {name: cp.zeros((self._capacity, *shape), dtype=dtype)
                      for name, (shape, dtype) in self._layout.items()}
            self._staging = [{name: self._pinned((self.staging_rows, *shape), dtype)
                              for name, (shape, dtype) in self._layout.items()} for _ in range(self._staging_slots)]
        self._ring = SlotRing(self._staging_slots)
        self._idx_dev = None  # device int64 indices of the last gather (grown on demand)
        self._gathered: dict[str, Any] = {}  # device gather buffers for the last batch size
        return arrays

    def _pinned(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A numpy array in page-locked host memory (DMA-able, so the copy from it is asynchronous)."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        mem = self._cp.cuda.alloc_pinned_memory(max(1, count * dtype.itemsize))
        return np.ndarray(shape, dtype=dtype, buffer=mem)  # as cupyx.empty_pinned does; the array keeps mem alive

    def _store(self, slots: np.ndarray, rows: Mapping[str, np.ndarray]) -> None:
        """Pack validated rows into pinned slots and copy them to the device (asynchronously, in order)."""
        n = int(slots.shape[0])
        if n == 0:
            return
        cp = self._cp
        with self._dev:
            for a, b in chunk_rows(n, self.staging_rows):
                slot = self._ring.acquire()  # waits until the copy that last read this slot finished
                staged = self._staging[slot]
                for name, values in rows.items():
                    staged[name][: b - a] = values[a:b]
                for s0, r0, m in consecutive_runs(slots[a:b]):
                    for name, arr in self._arrays.items():
                        arr[s0:s0 + m].set(staged[name][r0:r0 + m], stream=self._stream)
                event = cp.cuda.Event(disable_timing=True)
                event.record(self._stream)
                self._ring.release(slot, event)
        self.bytes_h2d += n * sum(self._row_bytes.values())

    def _take(self, idx: np.ndarray, out: Mapping[str, np.ndarray] | None = None) -> Batch:
        """Gather ``idx`` on the device, then copy the batch into ``out`` (or new host arrays)."""
        n = int(idx.shape[0])
        if n == 0:
            if out is not None:
                return Batch.of(out)
            return Batch(*(np.empty((0, *self._layout[f][0]), dtype=self._layout[f][1]) for f in TRANSITION_FIELDS))
        with self._dev:
            gathered = self._gather(idx, n, reuse=True)
            host = {}
            for name in TRANSITION_FIELDS:
                dst = None if out is None else out[name]
                if dst is not None and not (isinstance(dst, np.ndarray) and dst.flags.c_contiguous
                                            and dst.dtype == gathered[name].dtype
                                            and dst.shape == gathered[name].shape):
                    dst[...] = gathered[name].get(stream=self._stream)  # caller's odd layout: copy via a temporary
                    host[name] = dst
                else:
                    host[name] = gathered[name].get(stream=self._stream, out=dst)  # blocking: waits for the gather
        self.bytes_d2h += n * sum(self._row_bytes.values())
        return Batch.of(out) if out is not None else Batch.of(host)

    def field(self, name: str) -> np.ndarray:
        """A read-only host copy of one whole field (all ``capacity`` rows): one device->host copy."""
        if name not in self._layout:
            raise InvalidValueError(f"DataStorage has no field {name!r}; expected one of {list(TRANSITION_FIELDS)}.")
        with self._dev:
            host = self._arrays[name].get(stream=self._stream)
        host.flags.writeable = False
        self.bytes_d2h += self._capacity * self._row_bytes[name]
        return host

    # ------------------------------------------------------------------ device face
    def gather_device(self, indices: Any) -> dict[str, Any]:
        """The rows at device ``indices`` (cupy array or CUDA tensor), as new cupy arrays; no host copy.

        The gather runs on the storage's stream after every earlier write; the
        caller's current stream is made to wait for it (no host sync).
        Indices are not bound-checked (that would sync): pass filled slots,
        e.g. from ``CudaSumTree.sample_device`` after ``check_errors``;
        cupy wraps an out-of-range index.
        """
        from pearl_cuda.interop import as_device_array

        with self._dev:
            idx, _ = as_device_array(indices, np.int64, "indices")
            gathered = self._gather_device_idx(idx, reuse=False)
            self._cp.cuda.get_current_stream().wait_event(self._stream.record())
        return gathered

    def _gather(self, idx: np.ndarray, n: int, reuse: bool) -> dict[str, Any]:
        cp = self._cp
        if self._idx_dev is None or self._idx_dev.shape[0] < n:
            self._idx_dev = cp.empty(max(n, 2 * (0 if self._idx_dev is None else self._idx_dev.shape[0])),
                                     dtype=cp.int64)
        dev_idx = self._idx_dev[:n]
        # The index buffer is rewritten only after the previous gather's blocking copies returned.
        dev_idx.set(np.ascontiguousarray(idx, dtype=np.int64), stream=self._stream)
        self.bytes_h2d += 8 * n
        return self._gather_device_idx(dev_idx, reuse=reuse)

    def _gather_device_idx(self, dev_idx: Any, reuse: bool) -> dict[str, Any]:
        cp = self._cp
        n = int(dev_idx.shape[0])
        if reuse and (not self._gathered or self._gathered["reward"].shape[0] != n):
            self._gathered = {name: cp.empty((n, *shape), dtype=dtype) for name, (shape, dtype) in self._layout.items()}
        with self._stream:
            if reuse:
                return {name: cp.take(arr, dev_idx, axis=0, out=self._gathered[name])
                        for name, arr in self._arrays.items()}
            return {name: cp.take(arr, dev_idx, axis=0) for name, arr in self._arrays.items()}

    def synchronize(self) -> None:
        """Wait until every copy this storage issued has finished (tests and benchmarks)."""
        self._stream.synchronize()

    def __repr__(self) -> str:
        return (f"CudaStorage(spec={self._spec}, capacity={self._capacity}, size={self._size}, device={self.device!r}, "
                f"bytes_h2d={self.bytes_h2d}, bytes_d2h={self.bytes_d2h})")
