"""Prioritized experience replay over any :class:`~pearl_core.sumtree.SumTree`.

Leaf ``i`` of the tree holds the priority of storage slot ``i``. Priorities are
``p_i = (|delta_i| + eps) ** alpha``; a slot is drawn with probability
``P(i) = p_i / sum_j p_j`` and its importance weight is
``w_i = (N * P(i)) ** -beta / max_k w_k`` over the sampled batch, with ``N`` the
number of stored transitions and ``beta`` annealed linearly to ``beta_final``.

The tree's total must stay finite for sampling to work, so no priority may
exceed :attr:`PrioritizedReplay.priority_limit` (the largest float divided by
twice the capacity: even a tree full of such priorities sums to a finite total,
and new transitions can still enter at the running maximum).
:meth:`~PrioritizedReplay.update_priorities` rejects a batch holding a larger
one before touching the tree.

A TD error belongs to the transition it was computed on, not to its slot: the
manager counts the writes to every slot, each sample remembers the counts of its
slots, and the write-back skips a slot written again in between (the ring
wrapped onto it), so the new transition keeps the priority it entered with.
"""

from __future__ import annotations

import collections
import math
import operator
from typing import Any, Mapping

import numpy as np

from pearl_core.errors import EmptyTreeError, InvalidDTypeError, InvalidValueError, PearlError, SpecError
from pearl_core.replay.base import ReplayManager, SampledBatch, _weights_out, check_batch_size, check_td_errors
from pearl_core.replay.storage import DataStorage, check_filled_indices
from pearl_core.sumtree import SumTree

__all__ = ["PrioritizedReplay"]

#: Sampled batches whose write-back is awaited, remembered with their slots' write counts; a batch
#: further back (sampled and never written back) is forgotten, and a later write-back of it is not checked.
PENDING_BATCHES = 64


def _real(name: str, value, low: float, high: float = math.inf, *, open_low: bool = False) -> float:
    if isinstance(value, bool):
        raise InvalidDTypeError(f"PrioritizedReplay: {name} must be a real number; found {value!r}.")
    try:
        out = float(value)
    except (TypeError, ValueError) as exc:
        raise InvalidDTypeError(f"PrioritizedReplay: {name} must be a real number; found {value!r}.") from exc
    above = out > low if open_low else out >= low
    if not (math.isfinite(out) and above and out <= high):
        bounds = f"{'(' if open_low else '['}{low}, {high}{']' if math.isfinite(high) else ')'}"
        raise InvalidValueError(
            f"PrioritizedReplay: {name} = {value!r} is out of range; expected a finite value in {bounds}. "
            "Fix: the usual values are alpha=0.6, beta=0.4, beta_final=1.0, eps=1e-6."
        )
    return out


class PrioritizedReplay(ReplayManager):
    """Proportional prioritized replay composing a data storage and a sum tree.

    New transitions enter at the running maximum priority (``1.0`` until a
    larger priority has been set), so each is likely to be replayed at least
    once; slots overwritten by wraparound are reset to it as well.

    At construction the tree must hold zero at every unfilled slot (else it
    could sample rows that do not exist); filled slots whose priority is zero
    (a storage filled before this manager existed) are set to the running max,
    and a non-zero existing priority above ``1.0`` raises the running max.

    Complexity per call, with ``T_s``/``T_u`` the tree's per-item sample/update
    cost (``O(fanout * depth)`` for an n-ary tree): ``add`` ``O(n * T_u)``,
    ``sample`` ``O(B * (T_s + row_bytes))``, ``update_priorities`` ``O(B * T_u)``.

    Args:
        storage: the data storage; ``storage.capacity`` must equal ``tree.capacity``.
        tree: any :class:`SumTree` implementation (a backend's or the reference).
        alpha: priority exponent, ``>= 0`` (``0`` is uniform over filled slots).
        beta: importance-sampling exponent at the first sample, in ``[0, 1]``.
        beta_final: the exponent reached after ``beta_steps`` samples, in ``[0, 1]``.
        beta_steps: number of :meth:`sample` calls over which ``beta`` is
            annealed linearly, ``>= 0`` (``0`` means ``beta_final`` throughout).
        eps: added to ``|delta|`` so that no stored slot has priority zero, ``> 0``.
        stratified: draw mass ``k`` of a batch of ``B`` uniformly inside the
            ``k``-th of ``B`` equal segments of ``[0, total)`` (lower variance);
            otherwise every mass is ``u * total`` with ``u ~ U[0, 1)``.
        rng: a ``numpy.random.Generator``, a seed, or ``None``.

    Raises:
        SpecError: ``tree`` is not a :class:`SumTree`, the capacities differ, or
            the tree has a non-zero priority at an unfilled slot.
        InvalidValueError: a hyper-parameter out of range.
        InvalidDTypeError: a hyper-parameter of the wrong type.
    """

    def __init__(
        self,
        storage: DataStorage,
        tree: SumTree,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_final: float = 1.0,
        beta_steps: int = 100_000,
        eps: float = 1e-6,
        stratified: bool = True,
        rng: np.random.Generator | int | None = None,
    ):
        super().__init__(storage, rng)
        if not isinstance(tree, SumTree):
            raise SpecError(
                f"PrioritizedReplay needs a pearl_core.sumtree.SumTree; found {type(tree).__name__}. "
                "Fix: pass a backend's sum tree, or pearl_core.testing.ReferenceSumTree for tests."
            )
        if tree.capacity != storage.capacity:
            raise SpecError(
                f"PrioritizedReplay: tree capacity {tree.capacity} != storage capacity {storage.capacity}; "
                "expected one leaf per storage slot. Fix: build both with the same capacity."
            )
        self._alpha = _real("alpha", alpha, 0.0)
        self._beta0 = _real("beta", beta, 0.0, 1.0)
        self._beta_final = _real("beta_final", beta_final, 0.0, 1.0)
        self._eps = _real("eps", eps, 0.0, open_low=True)
        try:
            if isinstance(beta_steps, bool):
                raise TypeError
            self._beta_steps = operator.index(beta_steps)
        except TypeError as exc:
            raise InvalidDTypeError(f"PrioritizedReplay: beta_steps must be an int; found {beta_steps!r}.") from exc
        if self._beta_steps < 0:
            raise InvalidValueError(f"PrioritizedReplay: beta_steps must be >= 0; found {self._beta_steps}.")
        self._tree = tree
        self._stratified = bool(stratified)
        self._ramp = np.empty(0)  # 0, 1, ..., B - 1 for the stratified masses (kept per batch size)
        self._steps = 0
        self._max_priority = 1.0
        self._limit = float(np.finfo(np.float64).max) / (2.0 * storage.capacity)
        self._writes = np.zeros(storage.capacity, dtype=np.int64)  # writes to each slot, through add()
        self._pending: collections.deque = collections.deque(maxlen=PENDING_BATCHES)  # (indices, writes)
        self._adopt_tree()

    def _adopt_tree(self) -> None:
        size = self._storage.size
        current = np.asarray(self._tree.get(np.arange(self._tree.capacity, dtype=np.int64)), dtype=np.float64)
        stray = np.flatnonzero(current[size:])
        if stray.size:
            slot = size + int(stray[0])
            raise SpecError(
                f"PrioritizedReplay: the tree has priority {current[slot]!r} at slot {slot}, but the storage "
                f"has only {size} filled slots; expected 0 at every unfilled slot. Fix: pass a fresh tree."
            )
        if size:
            self._max_priority = max(1.0, float(current[:size].max()))
            unset = np.flatnonzero(current[:size] == 0.0)
            if unset.size:
                self._tree.update(unset, np.full(unset.shape[0], self._max_priority))

    @property
    def tree(self) -> SumTree:
        """The composed sum tree."""
        return self._tree

    @property
    def alpha(self) -> float:
        """Priority exponent."""
        return self._alpha

    @property
    def eps(self) -> float:
        """Offset added to ``|delta|``."""
        return self._eps

    @property
    def stratified(self) -> bool:
        """Whether masses are drawn one per equal segment."""
        return self._stratified

    @property
    def steps(self) -> int:
        """Number of successful :meth:`sample` calls so far."""
        return self._steps

    @property
    def beta(self) -> float:
        """The exponent the next :meth:`sample` uses.

        ``beta + min(steps / beta_steps, 1) * (beta_final - beta)``; exactly
        ``beta_final`` once ``steps >= beta_steps``.
        """
        if self._steps >= self._beta_steps:
            return self._beta_final
        return self._beta0 + (self._steps / self._beta_steps) * (self._beta_final - self._beta0)

    @property
    def beta_final(self) -> float:
        """The exponent reached after ``beta_steps`` samples."""
        return self._beta_final

    @property
    def beta_steps(self) -> int:
        """Number of samples over which beta is annealed."""
        return self._beta_steps

    @property
    def priority_limit(self) -> float:
        """The largest priority accepted: ``float64 max / (2 * capacity)``, so the tree's total stays finite."""
        return self._limit

    @property
    def max_priority(self) -> float:
        """The running maximum priority new transitions enter with (``>= 1.0``); reads the device once
        the device face has been used."""
        if self._dev is not None:
            return max(self._max_priority, float(self._dev.max))
        return self._max_priority

    def add(self, obs, action, reward, next_obs, done, steps=None) -> np.ndarray:
        """Store ``n`` transitions, each at the running max priority.

        Shapes, dtypes and errors as :meth:`DataStorage.add`; bad input changes
        neither the storage nor the tree.

        Returns:
            The ``int64`` slots written, length ``min(n, capacity)``.
        """
        slots = self._storage.add(obs, action, reward, next_obs, done, steps)
        if slots.size:
            self._writes[slots] += 1  # slots of one add are distinct
            if self._dev is not None:  # the running max is on the device: no read-back
                import torch

                dev_slots = torch.from_numpy(slots).to(self.device)
                self._dev.writes[dev_slots] += 1
                self._tree.update_device(dev_slots, self._dev.max.expand(slots.shape[0]))
            else:
                self._tree.update(slots, np.full(slots.shape[0], self._max_priority))
        return slots

    def priorities(self, indices) -> np.ndarray:
        """Return the ``float64`` priorities of filled slots ``indices`` (priority retrieval).

        Raises:
            InvalidIndexError: an index outside ``[0, size)``.
        """
        idx = check_filled_indices(indices, self._storage.size, self._storage.capacity)
        return np.asarray(self._tree.get(idx), dtype=np.float64)

    def sample(self, batch_size: int, out: Mapping[str, np.ndarray] | None = None) -> SampledBatch:
        """Draw ``batch_size`` slots with probability ``p_i / total`` and weight them.

        ``out``: destination arrays, see :meth:`ReplayManager.sample`.

        Uses the current :attr:`beta`, then advances :attr:`steps` by one (a
        call that raises does not).

        Returns:
            A :class:`SampledBatch`: ``int64`` indices in ``[0, size)``, the
            gathered batch and ``float32`` weights ``(N * P(i)) ** -beta``
            divided by their maximum over the batch.

        Raises:
            InvalidDTypeError: ``batch_size`` is not an int.
            InvalidValueError: ``batch_size < 1``.
            EmptyTreeError: nothing stored yet (or every priority is zero).
        """
        n = check_batch_size(batch_size, "PrioritizedReplay.sample")
        self._check_not_empty()
        total = float(self._tree.total())
        if not total > 0.0:
            raise EmptyTreeError(
                f"PrioritizedReplay.sample: the tree total is {total!r} with {self._storage.size} stored "
                "transitions; expected a positive total. Fix: update priorities with eps > 0."
            )
        u = self._rng.random(n)
        if self._stratified:
            if self._ramp.shape[0] != n:
                self._ramp = np.arange(n, dtype=np.float64)
            masses = u + self._ramp
            masses *= total / n
        else:
            masses = u * total
        indices = np.asarray(self._tree.sample(masses), dtype=np.int64)
        probs = np.asarray(self._tree.get(indices), dtype=np.float64) / total
        if not (probs > 0.0).all():
            raise PearlError(
                f"PrioritizedReplay.sample: {type(self._tree).__name__}.sample returned a zero-priority "
                "slot, which breaks the SumTree contract. Fix: run the conformance suite on that backend."
            )
        weights = (self._storage.size * probs) ** -self.beta
        weights /= weights.max()
        # tree.get accepted the indices (< capacity) and each has a positive priority, which only
        # a filled slot has: they are valid, and the gather needs no second check
        batch = self._storage.gather_into(indices, out)
        self._steps += 1
        self._pending.append((indices.copy(), self._writes[indices]))
        w = _weights_out(out, n)
        w[:] = weights
        return SampledBatch(indices=indices, batch=batch, weights=w)

    def _unchanged_slots(self, idx: np.ndarray) -> np.ndarray | None:
        """For the write-back of a remembered sampled batch with these indices (the oldest such): a mask
        of the slots not written since that sample; ``None`` for indices no remembered sample drew."""
        for k, (seen, writes) in enumerate(self._pending):
            if seen.shape == idx.shape and np.array_equal(seen, idx):
                del self._pending[k]
                return self._writes[idx] == writes
        return None

    def state_dict(self) -> dict:
        """:meth:`ReplayManager.state_dict` plus ``priorities`` (of the filled slots) and ``sample_steps``
        (where the β schedule stands)."""
        out = super().state_dict()
        n = self._storage.size
        out["priorities"] = self.priorities(np.arange(n, dtype=np.int64)) if n else np.zeros(0)
        out["sample_steps"] = self.steps
        return out

    # -- the device face (see ReplayManager.device) ---------------------------------------------
    def _face_tree(self) -> Any:
        return self._tree

    def _device_state(self):
        fresh = self._dev is None
        dev = super()._device_state()
        if fresh:
            import torch

            # from here on the running max lives on the device (host-face calls keep it there too)
            dev.max = torch.tensor(self._max_priority, dtype=torch.float64, device=self.device)
            dev.ramp = None
            dev.writes = torch.from_numpy(self._writes).to(self.device)  # per-slot write counts there
            dev.pending = collections.deque(maxlen=PENDING_BATCHES)  # (indices tensor, its slots' writes)
        return dev

    def _device_uniforms(self, n: int) -> Any:
        """``n`` ``float64`` draws from ``U[0, 1)`` on the device (the host face draws them with numpy)."""
        import torch

        return torch.rand(n, dtype=torch.float64, device=self.device, generator=self._dev.gen)

    def sample_device(self, batch_size: int, out: Mapping[str, Any] | None = None) -> SampledBatch:
        """:meth:`sample` on :attr:`device`, with the same arithmetic (see
        :meth:`ReplayManager.sample_device`): masses from the resident total, the tree's device-face
        sample and priorities, weights ``(N * P(i)) ** -beta / max``, the gather; nothing read back."""
        n = check_batch_size(batch_size, "PrioritizedReplay.sample_device")
        self._check_not_empty()
        sampled = self._draw_device(n, out, self._storage.size, self.beta)
        self._steps += 1
        self._dev.pending.append((sampled.indices, self._dev.writes[sampled.indices]))
        return sampled

    def _draw_device(self, n: int, out: Mapping[str, Any] | None, size: Any, beta: Any) -> SampledBatch:
        """The device draw for ``size`` filled slots and exponent ``beta`` (python numbers, or 0-d tensors
        on the device for a graph)."""
        import torch

        dev = self._device_state()
        total = self._tree.total_device()[0]
        u = self._device_uniforms(n)
        if self._stratified:
            if dev.ramp is None or dev.ramp.shape[0] != n:
                dev.ramp = torch.arange(n, dtype=torch.float64, device=self.device)
            masses = (u + dev.ramp) * (total / n)
        else:
            masses = u * total
        indices = self._tree.sample_device(masses)
        probs = self._tree.get_device(indices) / total
        dev.bad_tree |= ~(probs > 0.0).all()  # a zero-priority slot breaks the tree's contract
        w = (size * probs).pow(-beta)
        weights = self._device_weights(n, out)
        torch.div(w, w.max(), out=w)
        weights.copy_(w)
        return SampledBatch(indices=indices, batch=self._storage.gather_device(indices, out), weights=weights)

    def update_priorities_device(self, indices: Any, td_errors: Any) -> None:
        """:meth:`update_priorities` on :attr:`device` for the replay's own sampled ``indices`` (see
        :meth:`ReplayManager.update_priorities_device`): ``(|delta| + eps) ** alpha`` written to the tree
        and folded into the running max, with no read-back; a batch holding a non-finite priority or one
        above :attr:`priority_limit` keeps its slots' priorities and is flagged instead. For the indices
        tensor a :meth:`sample_device` returned (the same object), a slot written since that sample keeps
        its priority too (the ring overwrote it: the TD error is not its transition's)."""
        dev = self._device_state()
        fresh = None
        for k, (seen, writes) in enumerate(dev.pending):
            if seen is indices:
                del dev.pending[k]
                fresh = dev.writes[indices] == writes
                break
        self._write_back(indices, td_errors, fresh)

    def _write_back(self, indices: Any, td_errors: Any, fresh: Any) -> None:
        import torch

        dev = self._device_state()
        prio = (td_errors.detach().to(torch.float64).abs() + self._eps).pow(self._alpha)
        ok = (torch.isfinite(prio) & (prio <= self._limit)).all()
        dev.bad_td |= ~ok
        if fresh is not None:
            ok = ok & fresh
        prio = torch.where(ok, prio, self._tree.get_device(indices))
        torch.maximum(dev.max, prio.max(), out=dev.max)
        self._tree.update_device(indices, prio)

    # -- the graph face (see ReplayManager.graph_sample) ------------------------------------------
    def graph_sample(self, batch_size: int, out: Mapping[str, Any] | None = None) -> SampledBatch:
        """:meth:`sample_device` with the slot count and the annealed ``beta`` read from the device scalars
        :meth:`graph_sync` set (``beta`` from the sample count, which the draw moves on there): the same
        arithmetic up to the rounding of ``pow`` with a tensor exponent (relative 1e-12)."""
        import torch

        g = self._graph_scalars()
        b0, bf, bsteps = self._beta0, self._beta_final, self._beta_steps
        beta = torch.where(g.steps >= bsteps, bf, b0 + (g.steps / bsteps) * (bf - b0))
        sampled = self._draw_device(check_batch_size(batch_size, "PrioritizedReplay.graph_sample"), out,
                                    g.size, beta)
        g.steps += 1
        return sampled

    def graph_write_back(self, indices: Any, td_errors: Any) -> None:
        """:meth:`update_priorities_device` for a graph's own draw (the ring cannot have written a slot
        between the draw and the write-back: both are in one launch)."""
        self._write_back(indices, td_errors, None)

    def graph_advance(self, count: int) -> None:
        self._steps += int(count)

    def update_priorities(self, indices, td_errors, *, checked: bool = False) -> None:
        """Set ``p_i = (|delta_i| + eps) ** alpha`` for each sampled slot.

        All input is validated before the tree is touched. A repeated index
        keeps the priority of its last occurrence (the tree's rule); the running
        max considers every value written. When ``indices`` are those of one of
        the last :data:`PENDING_BATCHES` samples not yet written back, a slot
        written by :meth:`add` since that sample is skipped: the ring wrapped
        onto it, and its new transition keeps the priority it entered with.

        Args:
            indices: 1-D integer array-like of filled slots (``< size``).
            td_errors: 1-D real array-like of the same length, finite.
            checked: skip validation (see :meth:`ReplayManager.update_priorities`).

        Raises:
            InvalidIndexError: an index outside ``[0, size)``.
            InvalidDTypeError: non-integer indices or non-real TD errors.
            InvalidValueError: not 1-D, length mismatch, a NaN/inf TD error, or
                a priority above :attr:`priority_limit` (the tree's total would
                overflow); the tree is left as it was.
        """
        if checked:  # the caller's own sampled indices and validated TD errors
            idx, td = indices, td_errors
        else:
            idx = check_filled_indices(indices, self._storage.size, self._storage.capacity)
            td = check_td_errors(td_errors, idx.shape[0], "PrioritizedReplay.update_priorities")
        if idx.size == 0:
            return
        prio = np.abs(td)
        prio += self._eps
        if self._alpha <= 1.0:  # x ** alpha <= max(x, 1): finite TD errors give finite priorities
            prio **= self._alpha
        else:
            with np.errstate(over="ignore"):  # overflow is detected and reported just below
                prio **= self._alpha
            if not np.isfinite(prio).all():
                pos = int(np.argmax(~np.isfinite(prio)))
                raise InvalidValueError(
                    f"PrioritizedReplay.update_priorities: td_errors[{pos}] = {td[pos]!r} gives priority "
                    f"{prio[pos]!r} with alpha = {self._alpha}; expected a finite priority. Fix: clip TD errors."
                )
        top = float(prio.max())
        if top > self._limit:  # the tree's total could overflow: sampling would break for good
            pos = int(np.argmax(prio))
            raise InvalidValueError(
                f"PrioritizedReplay.update_priorities: td_errors[{pos}] = {float(td[pos])!r} gives priority {top!r} "
                f"(alpha = {self._alpha}), above the limit {self._limit:.4g} = largest float / (2 * capacity "
                f"{self._storage.capacity}) that keeps the tree's total finite; nothing was updated and the "
                "replay still samples. Fix: clip TD errors (or the loss) in the trainer; a TD error this large "
                "usually means the learner diverged."
            )
        fresh = self._unchanged_slots(idx)  # after every check: a refused write-back can be retried
        if fresh is not None and not fresh.all():  # stale slots: their TD errors are not their transitions'
            idx, prio = idx[fresh], prio[fresh]
            if idx.size == 0:
                return
            top = float(prio.max())
        self._tree.update(idx, prio)
        self._max_priority = max(self._max_priority, top)
        if self._dev is not None:
            self._dev.max.clamp_(min=top)
