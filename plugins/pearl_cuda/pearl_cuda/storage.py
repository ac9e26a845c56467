"""A Data Storage whose rows live in GPU memory (``CudaBackend.make_storage``).

:class:`CudaStorage` is a :class:`~pearl_core.replay.storage.DataStorage`: the
base class validates and casts every :meth:`add` before anything is written
(bad input changes nothing), keeps ``size``/``cursor`` and the slot rule; this
class only overrides where the rows are:

* :meth:`~CudaStorage.allocate` — one cupy array per field, ``capacity`` rows,
  on GPU ``N``, plus a ring of **pinned** host staging buffers
  (``staging_slots`` of ``staging_rows`` rows each).
* :meth:`~CudaStorage.store` ``(slots, rows)`` — rows are packed into the next
  pinned slot (a host memcpy), then copied to the device asynchronously on the
  storage's own CUDA stream, one copy per run of consecutive slots (a ring
  write is at most two runs). An event per slot says when the slot may be
  refilled (:class:`~pearl_cuda.transport.SlotRing`), so packing chunk ``t + 1``
  overlaps copying chunk ``t``; ``add`` returns without waiting for the copy.
* :meth:`~CudaStorage.gather_into` ``(idx, out)`` — the ``int64`` indices go to
  the device, every field is gathered there (``cupy.take`` on the same stream,
  so it sees every earlier write), then either
  - ``out`` holds torch tensors on this GPU (:meth:`CudaStorage.device_out`,
    what a learner on this GPU samples into: ``DQN.device_batch_slot``): the
    rows are gathered straight into them (cupy views of the tensors by DLPack),
    ordered after the torch work already queued on them and before torch's next
    kernels by events (the host does not wait for the gather), with **no
    device->host copy**; :attr:`CudaStorage.batches_on_device` counts these
    batches; or
  - the batch is copied into the caller's host ``out`` arrays (or new host
    arrays): one blocking device->host copy per field.
* ``field(name)`` — a read-only host copy of the whole field.
* :meth:`CudaStorage.device_out` — destination torch tensors on this GPU for
  a sampled batch (``None`` for any other torch device).
* :meth:`CudaStorage.gather_device` — the device face
  (:class:`~pearl_core.replay.device.DeviceStorage`): the rows at torch indices
  on this GPU gathered into torch tensors there, ordered by events against
  torch's stream, no host copy and no host wait (what the core's replay samples
  through when its tree is on this GPU too).

:attr:`CudaStorage.bytes_h2d` and :attr:`CudaStorage.bytes_d2h` count every
byte this storage moved each way (rows, indices, batches, field reads), so a
check can prove where it lived and what crossed the bus.

Two small seams, :meth:`CudaStorage._torch_device` and
:meth:`CudaStorage._torch_stream`, name torch's side of this GPU; the tests
without a GPU replace them (CPU tensors and a fake stream), the rest of the
device-batch path runs as it is.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from pearl_core.errors import InvalidDTypeError, InvalidValueError
from pearl_core.sdk import TRANSITION_FIELDS, Batch, DataStorage, StorageSpec, torch_dtype
from pearl_cuda.device import cuda_ordinal
from pearl_cuda.interop import is_torch_tensor
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
        batches_on_device: sampled batches gathered into torch tensors on this GPU
            (:meth:`device_out`): their rows never crossed to the host.

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
        self.batches_on_device = 0
        self._views: dict[int, tuple[Any, Any]] = {}  # id(tensor) -> (tensor, its cupy view), from device_out
        self._device_batches: dict[int, dict[str, Any]] = {}  # batch size -> gather_device's own tensors
        super().__init__(spec, capacity)  # validates spec and capacity, then calls allocate

    # ------------------------------------------------------------------ the DataStorage contract
    def allocate(self) -> dict[str, Any]:
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

    def store(self, slots: np.ndarray, rows: Mapping[str, np.ndarray]) -> None:
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

    def gather_into(self, idx: np.ndarray, out: Mapping[str, Any] | None = None) -> Batch:
        """Gather ``idx`` on the device, into ``out``'s torch tensors on this GPU (no host copy, see
        :meth:`device_out`), else copying the batch into ``out``'s host arrays (or new host arrays)."""
        n = int(idx.shape[0])
        if n == 0:
            if out is not None:
                return Batch.of(out)
            return Batch(*(np.empty((0, *self._layout[f][0]), dtype=self._layout[f][1]) for f in TRANSITION_FIELDS))
        if out is not None and _device_destinations(out):
            return self._take_into_tensors(idx, n, out)
        with self._dev:
            gathered = self._gather(idx, n)
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

    # ------------------------------------------------------------------ device batches (a learner on this GPU)
    def device_out(self, batch_size: int, torch_device: Any) -> dict[str, Any] | None:
        """Destination torch tensors on this GPU for sampled batches, or ``None`` (host batches).

        ``None`` when ``torch_device`` is not this storage's GPU (``"cuda"`` alone means torch's current
        GPU), or a stored dtype has no torch dtype. Else one new contiguous ``(batch_size, *shape)``
        tensor per transition field, of the stored dtype (``done``: ``torch.bool``), on this GPU. Given
        to a replay manager's ``sample`` as ``out`` (``DQN.device_batch_slot`` does it), each batch is
        gathered into them on the GPU: its indices cross to the device (``8 * batch_size`` bytes),
        no row comes back, and :attr:`batches_on_device` counts it. Each gather overwrites the
        tensors after the torch work queued on them so far, so read a batch before the next sample
        (or clone it).

        Raises:
            InvalidValueError / InvalidDTypeError: ``batch_size`` is not an int ``>= 1``, or
                ``torch_device`` is not a torch device.
        """
        import torch

        batch_size = _positive_int(batch_size, "batch_size")
        try:
            wanted = torch.device(torch_device)
        except (TypeError, RuntimeError, ValueError) as exc:
            raise InvalidValueError(f"CudaStorage.device_out: torch_device = {torch_device!r} is not a torch device "
                                    f"({exc}). Fix: pass e.g. torch.device('{self.device}').") from exc
        if wanted.type == "cuda" and wanted.index is None:
            wanted = torch.device("cuda", torch.cuda.current_device())
        home = self._torch_device()
        dtypes = {name: _torch_dtype(dtype) for name, (_, dtype) in self._layout.items()}
        if wanted != home or any(d is None for d in dtypes.values()):
            return None
        out = {name: torch.empty((batch_size, *shape), dtype=dtypes[name], device=home)
               for name, (shape, _) in self._layout.items()}
        with self._dev:
            if len(self._views) > 8 * len(TRANSITION_FIELDS):  # keep the views of the latest slots only
                self._views.clear()
            for t in out.values():
                self._views[id(t)] = (t, self._cupy_view(t))
        return out

    def _take_into_tensors(self, idx: np.ndarray, n: int, out: Mapping[str, Any]) -> Batch:
        """The rows at ``idx`` gathered into ``out``'s tensors on this GPU; nothing is copied to the host."""
        with self._dev:
            views = {name: self._destination(name, out[name], n) for name in TRANSITION_FIELDS}  # before any work
            self._gather_into(self._send_indices(idx, n), views)
        self.batches_on_device += 1
        return Batch.of(out)

    def _gather_into(self, dev_idx: Any, views: Mapping[str, Any]) -> None:
        """``cupy.take`` of every field at ``dev_idx`` into ``views`` (cupy views of torch tensors), on this
        storage's stream, after torch's work queued so far (its reads of the last batch, the indices it
        made) and before torch's next kernels; the host does not wait."""
        cp = self._cp
        consumer = self._torch_stream()
        self._stream.wait_event(consumer.record())
        with self._stream:
            for name, arr in self._arrays.items():
                cp.take(arr.view(np.uint8) if arr.dtype == np.bool_ else arr, dev_idx, axis=0, out=views[name])
        consumer.wait_event(self._stream.record())

    def _destination(self, name: str, dst: Any, n: int) -> Any:
        """The cupy view of the tensor ``dst`` that field ``name`` is gathered into, after checking it."""
        shape, dtype = self._layout[name]
        home = self._torch_device()
        fix = f"Fix: sample into the mapping device_out(batch_size, '{home}') returned, or into numpy arrays."
        if dst.device != home:
            raise InvalidValueError(f"CudaStorage: out[{name!r}] is a torch tensor on {dst.device}; this storage "
                                    f"gathers into tensors on {home} only. {fix}")
        if dst.dtype != _torch_dtype(dtype):
            raise InvalidDTypeError(f"CudaStorage: out[{name!r}] has dtype {dst.dtype}; the field is stored as "
                                    f"{dtype} ({_torch_dtype(dtype)}). {fix}")
        if tuple(dst.shape) != (n, *shape) or not dst.is_contiguous():
            raise InvalidValueError(f"CudaStorage: out[{name!r}] has shape {tuple(dst.shape)}"
                                    f"{'' if dst.is_contiguous() else ' (not contiguous)'}; expected a contiguous "
                                    f"{(n, *shape)} for {n} rows. {fix}")
        known = self._views.get(id(dst))
        return known[1] if known is not None and known[0] is dst else self._cupy_view(dst)

    def _cupy_view(self, tensor: Any) -> Any:
        """A cupy array over the tensor's memory (DLPack); ``bool`` as ``uint8`` (as the source is read)."""
        import torch

        t = tensor.detach()
        return self._cp.from_dlpack(t.view(torch.uint8) if t.dtype == torch.bool else t)

    def _torch_device(self) -> Any:
        """torch's name for this storage's GPU (a test without a GPU substitutes the CPU)."""
        import torch

        return torch.device("cuda", self._ordinal)

    def _torch_stream(self) -> Any:
        """torch's current stream on this GPU, as a cupy stream (a test without a GPU substitutes a fake)."""
        import torch

        ptr = torch.cuda.current_stream(self._ordinal).cuda_stream
        return self._cp.cuda.ExternalStream(ptr) if ptr else self._cp.cuda.Stream.null

    # ------------------------------------------------------------------ device face
    @property
    def torch_device(self) -> Any:
        """torch's name for this storage's GPU (the device face's tensors live there)."""
        return self._torch_device()

    def gather_device(self, indices: Any, out: Mapping[str, Any] | None = None) -> Batch:
        """The rows at ``indices`` (an ``int64`` torch tensor on this GPU, e.g. the tree's device-face sample),
        gathered into ``out``'s tensors (:meth:`device_out`'s layout) or into tensors this storage keeps per
        batch size (overwritten by the next gather of that size: read a batch before the next sample, or
        clone it). No host copy and no host wait: the gather waits (by an event) for torch's work queued
        so far, which made the indices, and torch's next kernels wait for the gather.

        Indices are not bound-checked (that would read the device): pass filled slots.
        """
        import torch

        n = int(indices.shape[0])
        if out is None:
            kept = self._device_batches.get(n)
            if kept is None:
                kept = self.device_out(n, self._torch_device())
                if kept is None:
                    raise InvalidDTypeError(
                        f"CudaStorage.gather_device: a stored dtype of {self.spec} has no torch dtype, so the batch "
                        "cannot stay on the GPU as tensors. Fix: store observations/actions as bool, integer or "
                        "float types torch has (e.g. float32), or sample through the host face.")
                self._device_batches[n] = kept
            out = kept
        with self._dev:
            views = {name: self._destination(name, out[name], n) for name in TRANSITION_FIELDS}
            dev_idx = self._cupy_view(indices.to(torch.int64))
            self._gather_into(dev_idx, views)
        self.batches_on_device += 1
        return Batch.of(out)

    def _gather(self, idx: np.ndarray, n: int) -> dict[str, Any]:
        """The rows at host ``idx`` gathered on the storage's stream into device buffers kept for the last
        batch size (the host face copies them back)."""
        cp = self._cp
        dev_idx = self._send_indices(idx, n)
        if not self._gathered or self._gathered["reward"].shape[0] != n:
            self._gathered = {name: cp.empty((n, *shape), dtype=dtype) for name, (shape, dtype) in self._layout.items()}
        with self._stream:
            return {name: cp.take(arr, dev_idx, axis=0, out=self._gathered[name]) for name, arr in self._arrays.items()}

    def _send_indices(self, idx: np.ndarray, n: int) -> Any:
        """The ``n`` host indices in the device index buffer (written on the storage's stream, after every
        earlier gather on it that read the buffer); ``8 * n`` bytes host -> device."""
        cp = self._cp
        if self._idx_dev is None or self._idx_dev.shape[0] < n:
            if self._idx_dev is not None:
                self._stream.synchronize()  # a gather still queued may read the old buffer: let it finish first
            self._idx_dev = cp.empty(max(n, 2 * (0 if self._idx_dev is None else self._idx_dev.shape[0])),
                                     dtype=cp.int64)
        dev_idx = self._idx_dev[:n]
        dev_idx.set(np.ascontiguousarray(idx, dtype=np.int64), stream=self._stream)
        self.bytes_h2d += 8 * n
        return dev_idx

    def synchronize(self) -> None:
        """Wait until every copy this storage issued has finished (tests and benchmarks)."""
        self._stream.synchronize()

    def __repr__(self) -> str:
        return (f"CudaStorage(spec={self._spec}, capacity={self._capacity}, size={self._size}, device={self.device!r}, "
                f"bytes_h2d={self.bytes_h2d}, bytes_d2h={self.bytes_d2h}, batches_on_device={self.batches_on_device})")


def _torch_dtype(dtype: Any) -> Any:
    """The torch dtype of a numpy dtype (:func:`pearl_core.sdk.torch_dtype`), or ``None`` where torch has none."""
    try:
        return torch_dtype(dtype)
    except TypeError:
        return None


def _device_destinations(out: Mapping[str, Any]) -> bool:
    """Whether ``out``'s transition fields are torch tensors (device batch) rather than host arrays.

    Raises:
        InvalidValueError: some fields are tensors and some are not.
    """
    tensors = [name for name in TRANSITION_FIELDS if is_torch_tensor(out[name])]
    if tensors and len(tensors) != len(TRANSITION_FIELDS):
        others = [name for name in TRANSITION_FIELDS if name not in tensors]
        raise InvalidValueError(f"CudaStorage: out has torch tensors for {tensors} but not for {others}; expected "
                                "tensors for every field (device_out's mapping) or host arrays for every field. "
                                "Fix: pass device_out's mapping as it is, or numpy arrays only.")
    return bool(tensors)
