"""The GPU sum tree: resident in device memory, two faces.

* **Host face** — the :class:`~pearl_core.sumtree.SumTree` contract on numpy
  arrays (``update``/``get``/``sample``/``total``). Inputs are validated on the
  host with the core's ``check_*`` helpers *before* anything reaches the device,
  so a rejected call changes nothing; then one host→device copy of the batch,
  the kernels, one device→host copy of the result. The conformance kit runs on
  this face unchanged.
* **Device face** (:class:`~pearl_core.replay.device.DeviceSumTree`) —
  ``update_device``/``get_device``/``sample_device`` take and return cupy
  arrays or torch CUDA tensors (DLPack, zero-copy), ``total_device`` is the
  root as a one-element torch tensor on :attr:`CudaSumTree.torch_device`; none
  synchronises with the host. Bad values cannot corrupt
  memory (kernels bound-check every index), are skipped, and set a bit in a
  device-side error word; :meth:`CudaSumTree.check_errors` reads it (one sync)
  and raises the contract's error. Use the device face between device-resident
  primitives (setting 2), where the batch never leaves the GPU.

The algorithm (kernels/sumtree.cu) is emulated step for step in
:mod:`pearl_cuda.emulation`. Updates run one of three equivalent launch shapes
(``update_strategy``): ``"levels"`` (L + 2 launches, always available),
``"block"`` (one launch of one block, phases split by ``__syncthreads``) and
``"grid"`` (one cooperative launch, phases split by grid syncs); ``"auto"``
picks ``block`` for batches up to :data:`BLOCK_MAX_BATCH` and ``grid`` above
(``levels`` if the device lacks cooperative launch). All produce bit-identical
trees, since every node is recomputed from its children.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from pearl_core.errors import EmptyTreeError, InvalidIndexError, InvalidValueError
from pearl_core.sdk import MASS_DRIFT_RTOL, SumTree, check_indices, check_masses, check_priorities
from pearl_cuda.device import cuda_ordinal
from pearl_cuda.interop import as_device_array, like_input
from pearl_cuda.layout import TreeLayout

__all__ = ["BLOCK_MAX_BATCH", "CudaSumTree", "STRATEGIES", "launch_shape"]

THREADS = 256
#: ``"auto"`` uses the single-block update up to this batch size.
BLOCK_MAX_BATCH = 512
STRATEGIES = ("auto", "levels", "block", "grid")
_MAX_BATCH = 2**31 - 1  # the dedupe owner word is an int32 batch position

ERR_INDEX, ERR_PRIORITY, ERR_MASS, ERR_EMPTY = 1, 2, 4, 8


def launch_shape(n: int, strategy: str, sm_count: int, threads: int = THREADS) -> tuple[int, int]:
    """``(blocks, threads per block)`` of an update of ``n`` items (host logic, tested without a GPU).

    ``block``: one block of up to 1024 threads (a multiple of 32); ``grid``: at
    most one block per SM, so all blocks are resident for the grid syncs;
    ``levels``: one thread per item.
    """
    if n < 1:
        raise InvalidValueError(f"launch_shape: n = {n}; expected an item count >= 1.")
    if strategy == "block":
        return 1, min(1024, max(32, -(-n // 32) * 32))
    blocks = -(-n // threads)
    if strategy == "grid":
        blocks = max(1, min(blocks, sm_count))
    return blocks, threads


def resolve_strategy(strategy: str, n: int, grid_available: bool) -> str:
    """The concrete strategy ``"auto"`` stands for at batch size ``n``."""
    if strategy not in STRATEGIES:
        raise InvalidValueError(f"update_strategy = {strategy!r} is unknown; expected one of {list(STRATEGIES)}.")
    if strategy == "auto":
        if n <= BLOCK_MAX_BATCH:
            return "block"
        return "grid" if grid_available else "levels"
    if strategy == "grid" and not grid_available:
        return "levels"
    return strategy


class CudaSumTree(SumTree):
    """A :class:`SumTree` whose nodes live in GPU memory for its whole life.

    Args:
        capacity, fanout: as the contract.
        device: CUDA device ordinal or device string ``"cuda:N"``.
        update_strategy: ``"auto"``, ``"levels"``, ``"block"`` or ``"grid"`` (see the module docstring).

    Attributes:
        device: ``"cuda:N"``, where the nodes live; ``device_id`` is ``N``.
    """

    def __init__(self, capacity: int, fanout: int = 16, *, device: int | str = 0, update_strategy: str = "auto"):
        import cupy as cp

        from pearl_cuda import kernels

        self.layout = TreeLayout.build(capacity, fanout)
        self.capacity, self.fanout = self.layout.capacity, self.layout.fanout
        resolve_strategy(update_strategy, 1, True)  # validate the name now
        self.update_strategy = update_strategy
        self.device_id = cuda_ordinal(device)
        self.device = f"cuda:{self.device_id}"
        self._cp = cp
        self._device = cp.cuda.Device(self.device_id)
        with self._device:
            self._k = kernels.load(self.device_id)
            self.tree = cp.zeros(self.layout.size, dtype=cp.float64)
            self._owner = cp.full(self.capacity, -1, dtype=cp.int32)
            self._err = cp.zeros(1, dtype=cp.int32)
            self._off = cp.asarray(np.asarray(self.layout.offsets, dtype=np.int64))
            self._spans = cp.asarray(np.asarray(self.layout.spans or (1,), dtype=np.int64))

    # ------------------------------------------------------------------ device face
    def update_device(self, indices: Any, priorities: Any, *, strategy: str | None = None) -> None:
        """Set leaf priorities from device arrays; last duplicate wins; no host sync."""
        idx, origin = as_device_array(indices, np.int64, "indices")
        prio, _ = as_device_array(priorities, np.float64, "priorities")
        if idx.shape[0] != prio.shape[0]:
            raise InvalidValueError(f"indices and priorities differ in length: {idx.shape[0]} indices, "
                                    f"{prio.shape[0]} priorities. Fix: pass one priority per index.")
        with self._device, self._launch_stream(origin):
            self._update(idx, prio, strategy or self.update_strategy)

    def get_device(self, indices: Any) -> Any:
        """Leaf priorities (float64) for device indices, as the input's array type."""
        idx, origin = as_device_array(indices, np.int64, "indices")
        out, result = self._result(int(idx.shape[0]), np.float64, origin)
        with self._device, self._launch_stream(origin):
            got = self._get(idx, out)
        return like_input(got, origin) if result is None else result

    def sample_device(self, masses: Any) -> Any:
        """Leaf indices (int64) for device masses, as the input's array type.

        Masses are checked on the device against the resident total (an invalid
        mass yields index -1 and sets the error word; see :meth:`check_errors`).
        """
        x, origin = as_device_array(masses, np.float64, "masses")
        out, result = self._result(int(x.shape[0]), np.int64, origin)
        with self._device, self._launch_stream(origin):
            got = self._sample(x, out)
        return like_input(got, origin) if result is None else result

    def _launch_stream(self, origin: str) -> Any:
        """Where the device face launches: for torch tensors, torch's current stream on this GPU (the kernels
        run in torch's order, and into a CUDA graph torch is capturing there); else cupy's current stream."""
        if origin != "torch":
            return contextlib.nullcontext()
        import torch

        ptr = torch.cuda.current_stream(self.device_id).cuda_stream
        return self._cp.cuda.ExternalStream(ptr) if ptr else contextlib.nullcontext()

    def _result(self, n: int, dtype: Any, origin: str) -> tuple[Any, Any]:
        """``(cupy out, torch result or None)``: for torch callers the result is allocated by torch (its caching
        allocator knows CUDA graphs: memory a capture used stays the graph's), viewed by cupy."""
        if origin != "torch" or n == 0:
            return None, None
        import torch

        t = torch.empty(n, dtype=torch.float64 if np.dtype(dtype) == np.float64 else torch.int64,
                        device=self.torch_device)
        return self._cp.from_dlpack(t), t

    def total_device(self) -> Any:
        """The root (sum of all priorities) as a 1-element torch tensor on this GPU; a live view, not a copy."""
        import torch

        return torch.from_dlpack(self.tree[0:1])

    @property
    def torch_device(self) -> Any:
        """torch's name for this tree's GPU (where the device face's tensors live)."""
        import torch

        return torch.device("cuda", self.device_id)

    def check_errors(self, clear: bool = True) -> None:
        """Raise the contract's error for bad input seen by device-face calls so far (syncs once)."""
        flags = int(self._err.get()[0])
        if clear and flags:
            self._err.fill(0)
        if flags & ERR_INDEX:
            raise InvalidIndexError(f"a device-face call got an index outside [0, capacity = {self.capacity}); "
                                    "those items were skipped. Fix: check the indices before calling.")
        if flags & ERR_PRIORITY:
            raise InvalidValueError("a device-face update got a negative, NaN or infinite priority; that item was "
                                    "skipped. Fix: clip or replace such priorities before updating.")
        if flags & ERR_EMPTY:
            raise EmptyTreeError("a device-face sample ran while every priority was zero; it returned -1. "
                                 "Fix: insert items with a positive priority before sampling.")
        if flags & ERR_MASS:
            raise InvalidValueError("a device-face sample got a mass outside [0, total); it returned -1. "
                                    "Fix: draw masses as u * total with u in [0, 1).")

    def load(self, priorities: np.ndarray) -> None:
        """Replace every leaf at once (checkpoint restore): one copy, then one rebuild launch per level."""
        prio = check_priorities(priorities, self.capacity)
        cp = self._cp
        with self._device:
            self.tree[self.layout.leaf_offset:self.layout.leaf_offset + self.capacity] = cp.asarray(prio)
            for level in range(self.layout.levels - 1, -1, -1):
                nodes = self.layout.nodes[level]
                self._k.rebuild_level(((nodes + THREADS - 1) // THREADS,), (THREADS,),
                                      (self.tree, self._off, np.int32(level), np.int32(self.fanout), np.int64(nodes)))

    # ------------------------------------------------------------------ host face (the contract)
    def update(self, indices, priorities) -> None:
        idx = check_indices(indices, self.capacity)
        prio = check_priorities(priorities, idx.shape[0])
        if idx.size == 0:
            return
        cp = self._cp
        with self._device:
            self._update(cp.asarray(idx), cp.asarray(prio), self.update_strategy)

    def get(self, indices) -> np.ndarray:
        idx = check_indices(indices, self.capacity)
        if idx.size == 0:
            return np.empty(0, dtype=np.float64)
        with self._device:
            return self._cp.asnumpy(self._get(self._cp.asarray(idx)))

    def total(self) -> float:
        with self._device:
            return float(self.tree[0:1].get()[0])

    def sample(self, masses) -> np.ndarray:
        x = check_masses(masses, self.total())
        if x.size == 0:
            return np.empty(0, dtype=np.int64)
        with self._device:
            return self._cp.asnumpy(self._sample(self._cp.asarray(x)))

    # ------------------------------------------------------------------ launches
    def _update(self, idx, prio, strategy: str) -> None:
        n = int(idx.shape[0])
        if n == 0:
            return
        if n > _MAX_BATCH:
            raise InvalidValueError(f"an update batch has {n} items; at most {_MAX_BATCH} per call. Fix: split it.")
        k, lay = self._k, self.layout
        kind = resolve_strategy(strategy, n, k.update_grid is not None)
        blocks, threads = launch_shape(n, kind, k.sm_count)
        cap, f, levels = np.int64(self.capacity), np.int32(self.fanout), np.int32(lay.levels)
        with self._device:
            if kind == "block":
                k.update_block((1,), (threads,), (self.tree, self._off, self._spans, levels, f, cap, idx, prio,
                                                  np.int64(n), self._owner, self._err))
            elif kind == "grid":
                k.update_grid((blocks,), (threads,), (self.tree, self._off, self._spans, levels, f, cap, idx, prio,
                                                      np.int64(n), self._owner, self._err))
            else:
                k.update_claim((blocks,), (threads,), (idx, np.int64(n), cap, self._owner, self._err))
                k.update_leaves((blocks,), (threads,), (self.tree, np.int64(lay.leaf_offset), cap, idx, prio,
                                                        np.int64(n), self._owner, self._err))
                for level in range(lay.levels - 1, -1, -1):
                    k.update_level((blocks,), (threads,), (self.tree, self._off, np.int32(level), f,
                                                           np.int64(lay.spans[level]), cap, idx, np.int64(n)))

    def _get(self, idx, out=None):
        n = int(idx.shape[0])
        out = self._cp.empty(n, dtype=self._cp.float64) if out is None else out
        if n:
            with self._device:
                self._k.get(((n + THREADS - 1) // THREADS,), (THREADS,),
                            (self.tree, np.int64(self.layout.leaf_offset), np.int64(self.capacity), idx, out,
                             np.int64(n), self._err))
        return out

    def _sample(self, x, out=None):
        n = int(x.shape[0])
        out = self._cp.empty(n, dtype=self._cp.int64) if out is None else out
        if n:
            with self._device:
                self._k.sample(((n + THREADS - 1) // THREADS,), (THREADS,),
                               (self.tree, self._off, np.int32(self.layout.levels), np.int32(self.fanout),
                                np.float64(-1.0), x, out, np.int64(n), self._err))
        return out


# The kernel's mass check recomputes total * (1 + 1e-6); keep it equal to the contract's constant.
assert MASS_DRIFT_RTOL == 1e-6, "update the literal in kernels/sumtree.cu (pearl_sample) too"
