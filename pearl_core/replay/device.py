"""The replay's device face: the iteration in the array namespace of the storage.

A storage whose rows live in torch tensors, and a sum tree whose nodes do, on
the same torch device, let :class:`~pearl_core.replay.PrioritizedReplay` run a
whole learner iteration there: masses, sampling, the gather, importance
weights, the running max priority and the priority write-back are tensor
operations, with no host synchronisation (nothing is read back). The host face
(numpy in, numpy out, every input checked) stays the contract every backend
implements; the device face is an extra a backend offers where its memory is
not the host's (``pearl_cuda``'s ``CudaSumTree``/``CudaStorage``), the way
TorchRL's storages carry their device.

* :class:`DeviceSumTree` / :class:`DeviceStorage` — the two faces, as
  :class:`typing.Protocol` s the replay checks for.
* :class:`TorchSumTree` — an n-ary sum tree in torch operations, on any torch
  device (the CPU in tests, a GPU where no backend offers kernels).
* :class:`TorchStorage` — a :class:`~pearl_core.replay.storage.DataStorage`
  whose rows are torch tensors on one device.
* :func:`device_face` — the torch device a storage and a tree share, or ``None``.

The device face does not check its input (a check would read the device): it
takes the replay's own indices, and bad priorities are masked and flagged on
the device (:meth:`TorchSumTree.update_device`), read back when the caller asks.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping, Protocol, runtime_checkable

import numpy as np

from pearl_core.errors import InvalidValueError
from pearl_core.replay.storage import TRANSITION_FIELDS, Batch, DataStorage, StorageSpec
from pearl_core.sumtree import SumTree, check_capacity_fanout, check_indices, check_masses, check_priorities

if TYPE_CHECKING:
    import torch

__all__ = ["DeviceStorage", "DeviceSumTree", "TorchStorage", "TorchSumTree", "device_face", "torch_dtype"]


@runtime_checkable
class DeviceSumTree(Protocol):
    """A sum tree's device face: torch tensors in and out, on :attr:`torch_device`, no host sync.

    ``update_device(indices, priorities)``: ``int64``/``float64`` ``(n,)`` tensors; a repeated index
    keeps its last priority (the contract's rule). ``get_device(indices)``: ``float64`` priorities.
    ``sample_device(masses)``: ``int64`` leaf indices for ``float64`` masses in ``[0, total)``.
    ``total_device()``: the root as a ``float64`` tensor of one element (a view is fine).
    """

    torch_device: Any

    def update_device(self, indices: Any, priorities: Any) -> None: ...

    def get_device(self, indices: Any) -> Any: ...

    def sample_device(self, masses: Any) -> Any: ...

    def total_device(self) -> Any: ...


@runtime_checkable
class DeviceStorage(Protocol):
    """A data storage's device face: ``gather_device(indices, out=None)`` returns a
    :class:`~pearl_core.replay.storage.Batch` of tensors on :attr:`torch_device` (the stored dtypes,
    ``done`` as ``torch.bool``), gathered into ``out`` (one tensor per field) when given; no host sync."""

    torch_device: Any

    def gather_device(self, indices: Any, out: Mapping[str, Any] | None = None) -> Batch: ...


def device_face(storage: Any, tree: Any | None = None) -> "torch.device | None":
    """The torch device on which ``storage`` (and ``tree``, if given) offer their device faces, or ``None``
    (a host storage, a tree without the face, or the two on different devices)."""
    if not isinstance(storage, DeviceStorage):
        return None
    import torch

    dev = torch.device(storage.torch_device)
    if tree is None:
        return dev
    if not isinstance(tree, DeviceSumTree) or torch.device(tree.torch_device) != dev:
        return None
    return dev


def torch_dtype(dtype: Any) -> "torch.dtype":
    """The torch dtype of a numpy dtype (``bool`` -> ``torch.bool``)."""
    import torch

    return torch.from_numpy(np.empty(0, dtype=np.dtype(dtype))).dtype


class TorchSumTree(SumTree):
    """An n-ary sum tree whose nodes are one ``float64`` tensor on a torch device.

    Level ``l`` (``0`` the root, ``depth`` the leaves) stores the children of every node of level
    ``l - 1`` as consecutive blocks of ``fanout``; the last level's padding leaves hold zero. One
    extra element at the end takes the writes a batch discards (a repeated index's earlier
    priorities, a masked bad priority), so no call needs a variable-sized tensor or a host read.

    Host face: the :class:`~pearl_core.sumtree.SumTree` contract, every input checked.
    Device face (:class:`DeviceSumTree`): tensors on :attr:`torch_device`, unchecked; a negative or
    non-finite priority is skipped (the slot keeps its priority) and sets :attr:`bad_priorities`.

    Complexity per item: ``update`` and ``sample`` ``O(fanout * depth)``, as a batch of ``depth``
    gathers of ``(n, fanout)``.

    Args:
        capacity, fanout: as the contract.
        device: a torch device (``"cpu"``, ``"cuda:0"``).
    """

    #: Its device face is torch operations on the current stream that keep no per-call buffer: a CUDA graph
    #: may capture it (:meth:`~pearl_core.replay.ReplayManager.graph_unsafe`).
    graph_safe = True

    def __init__(self, capacity: int, fanout: int = 16, *, device: Any = "cpu"):
        import torch

        capacity, fanout = check_capacity_fanout(capacity, fanout)
        self.capacity, self.fanout = capacity, fanout
        self.torch_device = torch.device(device)
        depth = max(1, math.ceil(math.log(capacity, fanout) - 1e-12))
        while fanout ** depth < capacity:  # log rounding
            depth += 1
        self.depth = depth
        nodes = [math.ceil(capacity / fanout ** (depth - level)) for level in range(depth + 1)]
        stored = [1] + [nodes[level - 1] * fanout for level in range(1, depth + 1)]
        offsets = [0]
        for size in stored[:-1]:
            offsets.append(offsets[-1] + size)
        self._offsets = offsets
        self._leaf = offsets[-1]
        self._scratch = offsets[-1] + stored[-1]
        self.nodes = torch.zeros(self._scratch + 1, dtype=torch.float64, device=self.torch_device)
        self._ramp = torch.arange(fanout, dtype=torch.int64, device=self.torch_device)
        self._bad = torch.zeros((), dtype=torch.bool, device=self.torch_device)

    # ------------------------------------------------------------------ device face
    def update_device(self, indices: "torch.Tensor", priorities: "torch.Tensor") -> None:
        """Set leaf priorities; the last of a repeated index wins; bad priorities are skipped and flagged."""
        import torch

        n = int(indices.shape[0])
        if n == 0:
            return
        order = torch.argsort(indices, stable=True)
        idx = indices[order]
        prio = priorities[order].to(torch.float64)
        ok = torch.isfinite(prio) & (prio >= 0)
        self._bad |= ~ok.all()
        last = torch.ones(n, dtype=torch.bool, device=idx.device)
        if n > 1:
            last[:-1] = idx[1:] != idx[:-1]
        keep = last & ok
        self.nodes[torch.where(keep, idx + self._leaf, self._scratch)] = torch.where(keep, prio, 0.0)
        parent = idx // self.fanout
        for level in range(self.depth - 1, -1, -1):
            children = self.nodes[self._offsets[level + 1] + parent.unsqueeze(1) * self.fanout + self._ramp]
            self.nodes[self._offsets[level] + parent] = children.sum(dim=1)
            parent = parent // self.fanout

    def get_device(self, indices: "torch.Tensor") -> "torch.Tensor":
        """The ``float64`` leaf priorities at ``indices``."""
        return self.nodes[indices + self._leaf]

    def sample_device(self, masses: "torch.Tensor") -> "torch.Tensor":
        """The ``int64`` leaf each mass falls in (the smallest index whose inclusive prefix sum exceeds it);
        a mass at or past a node's sum (float drift) goes to that node's last non-zero child."""
        import torch

        x = masses.to(torch.float64)
        node = torch.zeros(x.shape[0], dtype=torch.int64, device=x.device)
        last = self.fanout - 1
        for level in range(self.depth):
            children = self.nodes[self._offsets[level + 1] + node.unsqueeze(1) * self.fanout + self._ramp]
            prefix = children.cumsum(dim=1)
            pick = (prefix <= x.unsqueeze(1)).sum(dim=1)
            last_nonzero = last - (children.flip(1) > 0).to(torch.int8).argmax(dim=1)
            pick = torch.where(pick > last, last_nonzero, pick)
            before = prefix.gather(1, pick.unsqueeze(1)).squeeze(1) - children.gather(1, pick.unsqueeze(1)).squeeze(1)
            x = (x - before).clamp_min(0.0)
            node = node * self.fanout + pick
        return node.clamp_(max=self.capacity - 1)

    def total_device(self) -> "torch.Tensor":
        """The root, a one-element ``float64`` view (not a copy)."""
        return self.nodes[0:1]

    @property
    def bad_priorities(self) -> bool:
        """Whether a device-face update skipped a negative or non-finite priority (reads the device)."""
        return bool(self._bad)

    # ------------------------------------------------------------------ host face (the contract)
    def update(self, indices, priorities) -> None:
        import torch

        idx = check_indices(indices, self.capacity)
        prio = check_priorities(priorities, idx.shape[0])
        if idx.size:
            self.update_device(torch.from_numpy(idx).to(self.torch_device),
                               torch.from_numpy(prio).to(self.torch_device))

    def get(self, indices) -> np.ndarray:
        import torch

        idx = check_indices(indices, self.capacity)
        return self.get_device(torch.from_numpy(idx).to(self.torch_device)).cpu().numpy()

    def total(self) -> float:
        return float(self.nodes[0])

    def sample(self, masses) -> np.ndarray:
        import torch

        x = check_masses(masses, self.total())
        if x.size == 0:
            return np.empty(0, dtype=np.int64)
        return self.sample_device(torch.from_numpy(x).to(self.torch_device)).cpu().numpy()

    def __repr__(self) -> str:
        return f"TorchSumTree(capacity={self.capacity}, fanout={self.fanout}, device={self.torch_device})"


class TorchStorage(DataStorage):
    """A :class:`~pearl_core.replay.storage.DataStorage` whose rows are torch tensors on one device.

    :meth:`add` validates and casts on the host, as the base class does, then copies the rows to the
    device; the host face's gathers (:meth:`gather`, a sample into host arrays) copy back. The device
    face, :meth:`gather_device`, keeps the batch where the rows are.

    Args:
        spec, capacity: as :class:`DataStorage`.
        device: a torch device (``"cpu"``, ``"cuda:0"``).
    """

    #: As :attr:`TorchSumTree.graph_safe`.
    graph_safe = True

    def __init__(self, spec: StorageSpec, capacity: int, *, device: Any = "cpu"):
        import torch

        self.torch_device = torch.device(device)
        self.device = str(self.torch_device)
        super().__init__(spec, capacity)

    def allocate(self) -> dict[str, Any]:
        import torch

        return {name: torch.zeros((self.capacity, *shape), dtype=torch_dtype(dtype), device=self.torch_device)
                for name, (shape, dtype) in self._layout.items()}

    def store(self, slots: np.ndarray, rows: Mapping[str, np.ndarray]) -> None:
        import torch

        dst = torch.from_numpy(np.ascontiguousarray(slots)).to(self.torch_device)
        for name, values in rows.items():
            self._arrays[name].index_copy_(0, dst, torch.from_numpy(np.ascontiguousarray(values)).to(self.torch_device))

    def gather_into(self, idx: np.ndarray, out: Mapping[str, np.ndarray] | None = None) -> Batch:
        import torch

        rows = self.gather_device(torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64)).to(self.torch_device))
        if out is None:
            return Batch(*(getattr(rows, name).cpu().numpy() for name in TRANSITION_FIELDS))
        for name in TRANSITION_FIELDS:
            out[name][...] = getattr(rows, name).cpu().numpy()
        return Batch.of(out)

    def field(self, name: str) -> np.ndarray:
        """A read-only host copy of one whole field (it reads the device)."""
        if name not in self._arrays:
            raise InvalidValueError(f"TorchStorage has no field {name!r}; expected one of {list(TRANSITION_FIELDS)}.")
        view = self._arrays[name].cpu().numpy()
        view.flags.writeable = False
        return view

    def gather_device(self, indices: "torch.Tensor", out: Mapping[str, "torch.Tensor"] | None = None) -> Batch:
        """The rows at device ``indices`` (filled slots, unchecked), as tensors here; into ``out`` if given."""
        import torch

        if out is None:
            return Batch(*(self._arrays[name].index_select(0, indices) for name in TRANSITION_FIELDS))
        for name in TRANSITION_FIELDS:
            torch.index_select(self._arrays[name], 0, indices, out=out[name])
        return Batch(*(out[name] for name in TRANSITION_FIELDS))

    def __repr__(self) -> str:
        return f"TorchStorage(spec={self.spec}, capacity={self.capacity}, size={self.size}, device={self.device})"
