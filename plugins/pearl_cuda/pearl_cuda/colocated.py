"""Setting 2 on one GPU: Replay Manager, Data Storage and learner co-located.

:class:`DeviceReplay` keeps the experiences (struct-of-arrays ring) and the sum
tree in device memory. One training iteration touches the host only to launch
kernels::

    masses  = stratified(BS) * total            on the device (torch), total read from the tree's root
    indices = tree.sample_device(masses)        cupy kernel, torch in / torch out (DLPack)
    batch   = storage[indices]                  gather on the device
    weights = (N * p / total) ** -beta / max    on the device
    ... trainer step on the batch ...
    tree.update_device(indices, (|td| + eps) ** alpha)   straight back, no host copy

Insertions are the only host traffic: actor rows go through pinned staging
buffers (:class:`~pearl_cuda.transport.HostToDevice`) and enter at the running
max priority (kept on the device). The formulas (:func:`ring_slots`,
:func:`stratified_masses`, :func:`importance_weights`,
:func:`priorities_from_td`) take an array module-like ``torch`` and are tested
on CPU tensors.

The runtime's trainers take numpy batches today; :func:`colocated_step` hands
them device tensors when the trainer says it accepts them
(``accepts_device_batches = True``) and otherwise copies the batch to the host
(a round trip, reported by ``DeviceReplay.host_round_trips``).

The runtime's setting-2 worker does not use this module: it composes the
core's ``PrioritizedReplay`` over ``CudaBackend.make_storage``
(:class:`~pearl_cuda.storage.CudaStorage`) and ``make_sum_tree``, whose
sampling runs on the host face, so each batch goes GPU -> host -> GPU (the
README's "What is GPU-resident in a run" states the traffic and what the core
would need to avoid it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pearl_core.errors import InvalidValueError, NothingToReadError

__all__ = ["DeviceBatch", "DeviceReplay", "colocated_step", "importance_weights", "priorities_from_td",
           "ring_slots", "stratified_masses"]


def ring_slots(pos: int, n: int, capacity: int) -> np.ndarray:
    """Slots written by inserting ``n`` rows at ring position ``pos`` (the last ``capacity`` win)."""
    if n < 0 or capacity < 1 or not 0 <= pos < capacity:
        raise InvalidValueError(f"ring insert of n={n} rows at pos={pos} into capacity={capacity} is invalid; expected "
                                f"n >= 0, capacity >= 1 and 0 <= pos < capacity.")
    return (pos + np.arange(n, dtype=np.int64)) % capacity


def stratified_masses(torch: Any, batch_size: int, total: Any, generator: Any = None, device: Any = None) -> Any:
    """``(k + u_k) / BS * total`` for ``k < BS``, ``u_k ~ U[0, 1)``: one mass per stratum (float64)."""
    u = torch.rand(batch_size, dtype=torch.float64, device=device, generator=generator)
    k = torch.arange(batch_size, dtype=torch.float64, device=device)
    return (k + u) * (total / batch_size)


def importance_weights(torch: Any, p: Any, total: Any, size: int, beta: float) -> Any:
    """``w_i = (N * P(i)) ** -beta / max_j w_j`` with ``P(i) = p_i / total`` (float32)."""
    w = (size * (p / total)).pow(-beta)
    return (w / w.max()).to(torch.float32)


def priorities_from_td(torch: Any, td: Any, alpha: float, eps: float) -> Any:
    """``(|td| + eps) ** alpha`` as float64."""
    return (td.abs().to(torch.float64) + eps).pow(alpha)


@dataclass
class DeviceBatch:
    """A sampled batch, every field a device tensor."""

    obs: Any
    action: Any
    reward: Any
    next_obs: Any
    done: Any
    weights: Any
    indices: Any


class DeviceReplay:
    """Prioritized replay with storage and tree on one GPU (needs torch with CUDA and cupy).

    Args:
        obs_shape, obs_dtype, action_shape, action_dtype: one row's layout.
        capacity, fanout: replay size and tree fanout.
        alpha, beta, eps: PER exponents and priority floor.
        device: torch device string (``"cuda:0"``).
        insert_rows: rows per insertion message (pinned staging slot size).
        seed: sampler seed.
    """

    def __init__(self, obs_shape: tuple[int, ...], obs_dtype: Any, action_shape: tuple[int, ...], action_dtype: Any,
                 capacity: int, fanout: int = 16, *, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6,
                 device: str = "cuda:0", insert_rows: int = 256, seed: int = 0):
        import torch

        from pearl_cuda.sumtree import CudaSumTree
        from pearl_cuda.transport import HostToDevice

        self.torch = torch
        self.device = torch.device(device)
        self.capacity, self.alpha, self.beta, self.eps = capacity, alpha, beta, eps
        self.tree = CudaSumTree(capacity, fanout, device=self.device.index or 0)
        td = lambda d: torch.from_numpy(np.empty(0, dtype=np.dtype(d))).dtype  # noqa: E731
        self.store = {
            "obs": torch.zeros((capacity, *obs_shape), dtype=td(obs_dtype), device=self.device),
            "next_obs": torch.zeros((capacity, *obs_shape), dtype=td(obs_dtype), device=self.device),
            "action": torch.zeros((capacity, *action_shape), dtype=td(action_dtype), device=self.device),
            "reward": torch.zeros(capacity, dtype=torch.float32, device=self.device),
            "done": torch.zeros(capacity, dtype=torch.bool, device=self.device),
        }
        self.staging = HostToDevice({"obs": (obs_shape, obs_dtype), "next_obs": (obs_shape, obs_dtype),
                                     "action": (action_shape, action_dtype), "reward": ((), np.float32),
                                     "done": ((), np.bool_)}, insert_rows, device=device)
        self.insert_rows = insert_rows
        self.max_priority = torch.ones((), dtype=torch.float64, device=self.device)
        self.pos = 0
        self.size = 0
        self.gen = torch.Generator(device=self.device)
        self.gen.manual_seed(seed)
        self.host_round_trips = 0

    def add(self, obs, action, reward, next_obs, done) -> None:
        """Insert host rows: pinned staging, async copy, scatter into the ring, max priority."""
        from pearl_cuda.transport import chunk_rows

        torch = self.torch
        cols = {"obs": obs, "action": action, "reward": reward, "next_obs": next_obs, "done": done}
        n_all = len(reward)
        for a, b in chunk_rows(n_all, self.insert_rows):
            views, event = self.staging.send({k: np.asarray(v)[a:b] for k, v in cols.items()})
            torch.cuda.current_stream(self.device).wait_event(event)
            # ring_slots on the device (no host copy of the indices)
            slots = (torch.arange(b - a, dtype=torch.int64, device=self.device) + self.pos) % self.capacity
            for k, t in self.store.items():
                t.index_copy_(0, slots, views[k].to(t.dtype))
            self.tree.update_device(slots, self.max_priority.expand(b - a).contiguous())
            self.pos = int((self.pos + (b - a)) % self.capacity)
            self.size = min(self.capacity, self.size + (b - a))

    def sample(self, batch_size: int) -> DeviceBatch:
        torch = self.torch
        if self.size == 0:
            raise NothingToReadError("DeviceReplay.sample: the replay is empty (size 0); expected at least one row. "
                                    "Fix: insert rows first.")
        total = torch.from_dlpack(self.tree.total_device()).clone()
        masses = stratified_masses(torch, batch_size, total, self.gen, self.device)
        idx = self.tree.sample_device(masses)
        p = self.tree.get_device(idx)
        w = importance_weights(torch, p, total, self.size, self.beta)
        s = self.store
        return DeviceBatch(s["obs"][idx], s["action"][idx], s["reward"][idx], s["next_obs"][idx], s["done"][idx], w,
                           idx)

    def update_priorities(self, indices: Any, td_errors: Any) -> None:
        torch = self.torch
        td = td_errors if isinstance(td_errors, torch.Tensor) else torch.as_tensor(np.asarray(td_errors))
        prio = priorities_from_td(torch, td.to(self.device, non_blocking=True), self.alpha, self.eps)
        torch.maximum(self.max_priority, prio.max(), out=self.max_priority)
        self.tree.update_device(indices, prio)


def colocated_step(trainer: Any, replay: DeviceReplay, batch_size: int) -> Any:
    """One setting-2 iteration: sample on the device, train, priorities straight back to the tree."""
    from types import SimpleNamespace

    b = replay.sample(batch_size)
    if getattr(trainer, "accepts_device_batches", False):
        batch, weights = b, b.weights
    else:  # today's trainers read numpy: one device->host copy of the batch (counted)
        replay.host_round_trips += 1
        batch = SimpleNamespace(**{k: getattr(b, k).cpu().numpy() for k in ("obs", "action", "reward", "next_obs",
                                                                          "done")})
        weights = b.weights.cpu().numpy()
    result = trainer.update_policy(batch, weights)
    replay.update_priorities(b.indices, result.td_errors)
    return result
