"""Transports between the host and a GPU, and within one GPU.

Three channels, one per direction the runtime needs (:data:`TRANSPORTS`):

* :class:`HostToDevice` (``cpu -> cuda``): actors' rows are packed into one of
  ``slots`` **pinned** host buffers, then copied to a device buffer with
  ``non_blocking=True`` on the channel's own CUDA stream; an event per slot
  says when the slot may be refilled, so packing batch t+1 overlaps copying
  batch t. This is how insertions reach a co-located RM/DS/learner (setting 2).
* :class:`DeviceToHost` (``cuda -> cpu``): TD errors / indices copied into a
  pinned host buffer asynchronously; ``wait()`` returns the numpy view.
* :class:`DeviceLocal` (``cuda -> cuda``, same GPU): producer and consumer
  share preallocated device buffers; only an event is passed, never bytes.

The slot bookkeeping (:class:`SlotRing`, :func:`chunk_rows`) is plain Python
and tested without a GPU. The core has no transport registry yet, so
:data:`TRANSPORTS` is this plugin's table, keyed like the CPU runtime's links
``(source kind, destination kind)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from pearl_core.errors import InvalidValueError, NothingToReadError

__all__ = ["DeviceLocal", "DeviceToHost", "HostToDevice", "SlotRing", "TRANSPORTS", "chunk_rows"]


def chunk_rows(n_rows: int, slot_rows: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` splitting ``n_rows`` into pieces of at most ``slot_rows``."""
    if slot_rows < 1:
        raise InvalidValueError(f"chunk_rows: slot_rows = {slot_rows}; expected an integer >= 1.")
    return [(a, min(a + slot_rows, n_rows)) for a in range(0, max(n_rows, 0), slot_rows)]


class SlotRing:
    """Round-robin slots whose reuse waits for the copy that last used them.

    ``acquire()`` returns the next slot index and the token (an event) that
    must complete before it is overwritten; ``release(slot, token)`` records the
    token of the copy just issued. Tokens are opaque; ``wait`` is called on them.
    """

    def __init__(self, slots: int, wait=lambda token: token.synchronize()):
        if slots < 1:
            raise InvalidValueError(f"SlotRing: slots = {slots}; expected an integer >= 1.")
        self.slots = slots
        self._tokens: list[Any] = [None] * slots
        self._next = 0
        self._wait = wait

    def acquire(self) -> int:
        slot = self._next
        self._next = (self._next + 1) % self.slots
        token = self._tokens[slot]
        if token is not None:
            self._wait(token)
            self._tokens[slot] = None
        return slot

    def release(self, slot: int, token: Any) -> None:
        self._tokens[slot] = token


@dataclass(frozen=True)
class Field:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype


class HostToDevice:
    """Pinned staging buffers and asynchronous host-to-device copies (needs torch with CUDA).

    Args:
        fields: ``{name: (per-row shape, numpy dtype)}``.
        rows: rows per slot (the insertion batch).
        slots: pinned buffers in rotation.
        device: torch device string.
    """

    def __init__(self, fields: Mapping[str, tuple[tuple[int, ...], Any]], rows: int, slots: int = 4,
                 device: str = "cuda:0"):
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.rows = rows
        self.fields = [Field(n, tuple(s), np.dtype(d)) for n, (s, d) in fields.items()]
        self.stream = torch.cuda.Stream(device=self.device)
        self.ring = SlotRing(slots)
        self.host = [{f.name: torch.empty((rows, *f.shape), dtype=_torch_dtype(torch, f.dtype)).pin_memory()
                      for f in self.fields} for _ in range(slots)]
        self.dev = [{f.name: torch.empty((rows, *f.shape), dtype=_torch_dtype(torch, f.dtype), device=self.device)
                     for f in self.fields} for _ in range(slots)]

    def send(self, arrays: Mapping[str, np.ndarray]) -> tuple[dict[str, Any], Any]:
        """Stage ``arrays`` (``n <= rows`` rows each) and start the copy.

        Returns ``(device views of n rows, event)``; work that reads the views
        must ``wait_event`` on the event (the consumer's stream), no host sync.
        """
        torch = self.torch
        n = len(next(iter(arrays.values())))
        if n > self.rows:
            raise InvalidValueError(f"{n} rows do not fit a {self.rows}-row slot; expected at most {self.rows}. "
                                    "Fix: split with chunk_rows first.")
        slot = self.ring.acquire()
        host, dev = self.host[slot], self.dev[slot]
        for f in self.fields:
            host[f.name][:n].numpy()[...] = np.asarray(arrays[f.name]).reshape((n, *f.shape))
        self.stream.wait_stream(torch.cuda.current_stream(self.device))  # dev slot no longer read
        with torch.cuda.stream(self.stream):
            for f in self.fields:
                dev[f.name][:n].copy_(host[f.name][:n], non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        self.ring.release(slot, event)
        return {f.name: dev[f.name][:n] for f in self.fields}, event


class DeviceToHost:
    """Asynchronous device-to-host copies into a pinned buffer (needs torch with CUDA)."""

    def __init__(self, rows: int, dtype: Any = np.float32, device: str = "cuda:0"):
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(device=self.device)
        self.host = torch.empty(rows, dtype=_torch_dtype(torch, np.dtype(dtype))).pin_memory()
        self._event = None
        self._n = 0

    def send(self, tensor: Any) -> None:
        n = int(tensor.shape[0])
        self.stream.wait_stream(self.torch.cuda.current_stream(self.device))
        with self.torch.cuda.stream(self.stream):
            self.host[:n].copy_(tensor, non_blocking=True)
            self._event = self.torch.cuda.Event()
            self._event.record(self.stream)
        self._n = n

    def wait(self) -> np.ndarray:
        if self._event is not None:
            self._event.synchronize()
        return self.host[: self._n].numpy()


class DeviceLocal:
    """A GPU-local channel: shared device buffers, ordering by events, zero bytes copied."""

    def __init__(self) -> None:
        self._item: tuple[Any, Any] | None = None

    def send(self, tensors: Any) -> None:
        import torch

        event = torch.cuda.Event()
        event.record()
        self._item = (tensors, event)

    def receive(self) -> Any:
        import torch

        if self._item is None:
            raise NothingToReadError("DeviceLocal.receive: nothing was sent; expected a send() first. "
                                    "Fix: call send() before receive().")
        tensors, event = self._item
        torch.cuda.current_stream().wait_event(event)
        self._item = None
        return tensors


def _torch_dtype(torch: Any, dtype: np.dtype) -> Any:
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


#: ``(source kind, destination kind) -> transport class``.
TRANSPORTS: dict[tuple[str, str], type] = {("cpu", "cuda"): HostToDevice, ("cuda", "cpu"): DeviceToHost,
                                           ("cuda", "cuda"): DeviceLocal}
