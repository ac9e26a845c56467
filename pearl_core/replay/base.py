"""The replay-manager interface, the value it samples, and uniform replay.

A replay manager composes a :class:`~pearl_core.replay.storage.DataStorage`
(and, for prioritized replay, a :class:`~pearl_core.sumtree.SumTree`); it
never subclasses them. The training loop it serves is::

    replay.add(obs, action, reward, next_obs, done)       # from the actors
    sampled = replay.sample(batch_size)                   # -> SampledBatch
    td_errors = learner.step(sampled.batch, sampled.weights)
    replay.update_priorities(sampled.indices, td_errors)  # back from the learner

Where the storage (and the tree) offer a device face on one torch device
(:mod:`pearl_core.replay.device`), :attr:`ReplayManager.device` names it and the
same loop runs there, with tensors and no host synchronisation::

    sampled = replay.sample_device(batch_size)                  # tensors on replay.device
    replay.update_priorities_device(sampled.indices, td)        # td: a tensor there
    replay.check_device_errors()                                # every N updates: reads the flags back
"""

from __future__ import annotations

import abc
import dataclasses
import operator
from types import SimpleNamespace
from typing import Any, Mapping

import numpy as np

from pearl_core.errors import EmptyTreeError, InvalidDTypeError, InvalidValueError, PearlError, SpecError
from pearl_core.replay.storage import TRANSITION_FIELDS, Batch, DataStorage, check_filled_indices

__all__ = ["ReplayManager", "SampledBatch", "UniformReplay", "check_batch_size", "check_td_errors"]


@dataclasses.dataclass(frozen=True, eq=False)
class SampledBatch:
    """What :meth:`ReplayManager.sample` returns.

    Attributes:
        indices: ``(B,)`` ``int64`` storage slots; pass them back to
            :meth:`ReplayManager.update_priorities`.
        batch: the ``B`` transitions at ``indices`` (copies).
        weights: ``(B,)`` ``float32`` importance-sampling weights in ``(0, 1]``
            (all ones for uniform replay); multiply the per-sample loss by them.
    """

    indices: np.ndarray
    batch: Batch
    weights: np.ndarray

    def __len__(self) -> int:
        return int(self.indices.shape[0])


def check_batch_size(batch_size, owner: str) -> int:
    """Return ``batch_size`` as an ``int >= 1``, or raise.

    Raises:
        InvalidDTypeError: not an integer (``bool`` included).
        InvalidValueError: ``batch_size < 1``.
    """
    if isinstance(batch_size, bool):
        raise InvalidDTypeError(f"{owner}: batch_size must be an int; found {batch_size!r}.")
    try:
        value = operator.index(batch_size)
    except TypeError as exc:
        raise InvalidDTypeError(
            f"{owner}: batch_size must be an int; found {batch_size!r} ({type(batch_size).__name__}). "
            "Fix: pass e.g. batch_size=256."
        ) from exc
    if value < 1:
        raise InvalidValueError(f"{owner}: batch_size must be >= 1; found {value}. Fix: pass e.g. batch_size=256.")
    return value


def check_td_errors(td_errors, n: int, owner: str) -> np.ndarray:
    """Return ``td_errors`` as a 1-D finite ``float64`` array of length ``n``, or raise.

    Raises:
        InvalidValueError: not 1-D, length differs from ``n``, or a NaN/inf
            (names the first bad position).
        InvalidDTypeError: not real numbers.
    """
    arr = np.asarray(td_errors)
    if arr.ndim != 1:
        raise InvalidValueError(
            f"{owner}: td_errors must be a 1-D array; found shape {arr.shape}. "
            "Fix: pass one TD error per sampled index (e.g. td.reshape(-1))."
        )
    if arr.size and arr.dtype.kind not in "iuf":
        raise InvalidDTypeError(
            f"{owner}: td_errors must be real numbers; found dtype {arr.dtype}. Fix: np.asarray(td, dtype=np.float64)."
        )
    if arr.shape[0] != n:
        raise InvalidValueError(
            f"{owner}: {n} indices but {arr.shape[0]} td_errors; expected one TD error per index. "
            "Fix: pass the indices of the SampledBatch the TD errors were computed on."
        )
    arr = arr.astype(np.float64, copy=False)
    if not np.isfinite(arr).all():
        pos = int(np.argmax(~np.isfinite(arr)))
        raise InvalidValueError(
            f"{owner}: td_errors[{pos}] = {arr[pos]!r} is not finite; expected finite TD errors. "
            "Fix: look for a diverging loss, or clip TD errors before updating."
        )
    return arr


_UNSET = object()


def _weights_out(out: Mapping[str, np.ndarray] | None, n: int) -> np.ndarray:
    """The ``float32`` array sampled weights go to: ``out["weights"]`` if given, else a new one."""
    if out is not None and "weights" in out:
        return out["weights"]
    return np.empty(n, np.float32)


class ReplayManager(abc.ABC):
    """Replay over a :class:`DataStorage`: add, sample, update priorities.

    Subclasses implement :meth:`sample` and :meth:`update_priorities`; both
    validate all input before changing any state.

    Args:
        storage: the data storage this manager samples from. Add through the
            manager, not the storage, so that priorities stay in step.
        rng: a ``numpy.random.Generator``, a seed, or ``None`` (fresh entropy).

    Raises:
        SpecError: ``storage`` is not a :class:`DataStorage`.
        InvalidDTypeError: ``rng`` is not usable by ``numpy.random.default_rng``.
    """

    #: Whether :meth:`update_priorities` changes what :meth:`sample` draws. ``False`` for
    #: uniform replay, whose update only validates: a caller that validated the TD errors
    #: itself may skip the call.
    keeps_priorities: bool = True

    def __init__(self, storage: DataStorage, rng: np.random.Generator | int | None = None):
        if not isinstance(storage, DataStorage):
            raise SpecError(
                f"{type(self).__name__} needs a DataStorage; found {type(storage).__name__}. "
                "Fix: DataStorage(StorageSpec.from_spaces(...), capacity)."
            )
        try:
            self._rng = np.random.default_rng(rng)
        except (TypeError, ValueError) as exc:
            raise InvalidDTypeError(
                f"{type(self).__name__}: rng must be a numpy Generator, an int seed or None; found {rng!r}."
            ) from exc
        self._storage = storage
        self._face: Any = _UNSET
        self._dev: SimpleNamespace | None = None

    @property
    def storage(self) -> DataStorage:
        """The composed data storage."""
        return self._storage

    @property
    def capacity(self) -> int:
        """The storage capacity."""
        return self._storage.capacity

    @property
    def size(self) -> int:
        """Number of stored transitions."""
        return self._storage.size

    def __len__(self) -> int:
        return self._storage.size

    def add(self, obs, action, reward, next_obs, done, steps=None) -> np.ndarray:
        """Store a batch of ``n`` transitions; see :meth:`DataStorage.add` for shapes and errors.

        Returns:
            The ``int64`` slots written, length ``min(n, capacity)``.
        """
        return self._storage.add(obs, action, reward, next_obs, done, steps)

    @abc.abstractmethod
    def sample(self, batch_size: int, out: Mapping[str, np.ndarray] | None = None) -> SampledBatch:
        """Draw ``batch_size`` transitions (with replacement).

        Args:
            batch_size: rows to draw.
            out: optional destination arrays, one per transition field (``(batch_size,
                *shape)`` of the stored dtype, e.g. a learner's batch slot) and optionally
                ``"weights"`` (``(batch_size,)`` ``float32``): rows (and weights) are written
                straight into them, and the returned batch holds them.

        Raises:
            InvalidValueError: ``batch_size < 1``.
            EmptyTreeError: nothing to sample from yet.
        """

    @abc.abstractmethod
    def update_priorities(self, indices, td_errors, *, checked: bool = False) -> None:
        """Feed back one TD error per sampled index.

        ``checked=True`` skips validation, for a caller that already holds the
        replay's own sampled ``int64`` indices and TD errors validated by
        :func:`check_td_errors` (the runtime's learner step validates once).

        Raises:
            InvalidIndexError: an index that is not a filled slot.
            InvalidValueError: length mismatch or a non-finite TD error.
        """

    def state_dict(self) -> dict[str, Any]:
        """The contents, as numpy arrays, for a checkpoint: ``size``, ``cursor``, ``capacity`` and one array
        per transition field (the filled rows, in slot order); :func:`~pearl_core.replay.storage.load_storage_state`
        puts them back into a new storage. Prioritized replay adds ``priorities`` and ``sample_steps``."""
        storage = self._storage
        n = storage.size
        out: dict[str, Any] = {"size": n, "cursor": storage.cursor, "capacity": storage.capacity}
        rows = storage.gather(np.arange(n, dtype=np.int64)) if n else None  # a frame storage rebuilds only these
        for name in TRANSITION_FIELDS:
            out[name] = getattr(rows, name) if rows is not None else np.array(storage.field(name)[:0])
        return out

    # -- the device face ---------------------------------------------------------------------
    def _face_tree(self) -> Any:
        """The tree whose device face the iteration needs too (``None``: the storage's alone)."""
        return None

    @property
    def device(self) -> Any:
        """The ``torch.device`` on which :meth:`sample_device` and :meth:`update_priorities_device` run
        (the storage and the tree offer their device faces there), or ``None``: host face only."""
        if self._face is _UNSET:
            from pearl_core.replay.device import device_face

            self._face = device_face(self._storage, self._face_tree())
        return self._face

    def _device_state(self) -> SimpleNamespace:
        """The device side's state, made at first use: a torch generator seeded from this manager's numpy
        generator (a seeded manager draws the same batches run after run), the error flag."""
        if self._dev is None:
            import torch

            dev = self.device
            if dev is None:
                raise SpecError(
                    f"{type(self).__name__}: the device face needs a storage (and a tree) on one torch device; "
                    f"found {type(self._storage).__name__} on {self._storage.device!r}. Fix: use sample() and "
                    "update_priorities() (the host face), or a storage/tree with a device face "
                    "(pearl_core.replay.device.TorchStorage/TorchSumTree, or a backend's)."
                )
            gen = torch.Generator(device=dev)
            gen.manual_seed(int(self._rng.integers(0, 2**63 - 1)))
            self._dev = SimpleNamespace(gen=gen, bad_td=torch.zeros((), dtype=torch.bool, device=dev),
                                        bad_tree=torch.zeros((), dtype=torch.bool, device=dev))
        return self._dev

    def sample_device(self, batch_size: int, out: Mapping[str, Any] | None = None) -> SampledBatch:
        """:meth:`sample` on :attr:`device`: a :class:`SampledBatch` of tensors there (``int64`` indices,
        the batch, ``float32`` weights), gathered into ``out`` (one tensor per transition field, and
        optionally ``"weights"``) when given. Reads nothing back from the device.

        Raises:
            SpecError: the replay has no device face (:attr:`device` is ``None``).
            InvalidDTypeError, InvalidValueError, EmptyTreeError: as :meth:`sample`.
        """
        raise NotImplementedError

    def update_priorities_device(self, indices: Any, td_errors: Any) -> None:
        """:meth:`update_priorities` on :attr:`device` for the replay's own sampled ``indices`` and one TD
        error per index (a tensor there). Nothing is read back: a non-finite TD error (or a priority above
        the limit) leaves the batch's priorities as they were and sets a flag that
        :meth:`check_device_errors` reports."""
        raise NotImplementedError

    def check_device_errors(self) -> None:
        """Report (and clear) what the device face flagged since the last check; reads the device once.

        Raises:
            InvalidValueError: a batch of TD errors held a NaN/inf (or, for prioritized replay, gave a
                priority above the limit); those batches changed no priority.
            PearlError: the tree sampled a zero-priority slot (a backend breaking the contract).
        """
        if self._dev is None:
            return
        import torch

        flags = torch.stack([self._dev.bad_td, self._dev.bad_tree]).tolist()
        self._dev.bad_td.zero_()
        self._dev.bad_tree.zero_()
        if flags[1]:
            raise PearlError(
                f"{type(self).__name__}.sample_device: the tree sampled a zero-priority slot or was given a bad "
                "priority, which breaks the SumTree contract. Fix: run the conformance suite on that backend."
            )
        if flags[0]:
            raise InvalidValueError(
                f"{type(self).__name__}.update_priorities_device: a batch of TD errors since the last check held "
                "a NaN/inf or a priority too large for the tree; expected finite TD errors. That batch changed no "
                "priority. Fix: look for a diverging loss, or clip TD errors before updating."
            )

    # -- the graph face (pearl_core.runtime.graphstep) --------------------------------------------
    # A CUDA graph replays the device work of one capture and none of its python: the draw reads the slot
    # count (and prioritized replay's sample count, for beta) from 0-d device tensors that graph_sync()
    # refreshes before each launch, and the python counters move on in graph_advance() after it.
    def graph_unsafe(self) -> str | None:
        """Why this replay's iteration cannot be captured as a CUDA graph, or ``None``: its storage (and
        tree) offer the device face and declare ``graph_safe = True`` (their device faces launch on the
        current stream and allocate nothing that outlives a call: :class:`~pearl_core.replay.device.TorchStorage`,
        :class:`~pearl_core.replay.device.TorchSumTree`)."""
        if self.device is None:
            return "the replay has no device face on the learner's device"
        for part in (self._storage, self._face_tree()):
            if part is not None and not getattr(type(part), "graph_safe", False):
                return (f"{type(part).__name__} does not declare graph_safe = True (its device face may launch on "
                        "another stream or allocate per call)")
        return None

    def _graph_scalars(self) -> SimpleNamespace:
        dev = self._device_state()
        if not hasattr(dev, "graph"):
            import torch

            dev.graph = SimpleNamespace(size=torch.zeros((), dtype=torch.float64, device=self.device),
                                        steps=torch.zeros((), dtype=torch.float64, device=self.device))
        return dev.graph

    def graph_sync(self) -> None:
        """Before a launch: the slot count and the sample count into their device scalars (two fills, no
        read-back)."""
        self._check_not_empty()
        g = self._graph_scalars()
        g.size.fill_(float(self._storage.size))
        g.steps.fill_(float(getattr(self, "_steps", 0)))

    def graph_sample(self, batch_size: int, out: Mapping[str, Any] | None = None) -> SampledBatch:
        """:meth:`sample_device` as a graph captures it: no python state read that changes between launches,
        none changed (:meth:`graph_advance` does that after the launch)."""
        raise NotImplementedError

    def graph_write_back(self, indices: Any, td_errors: Any) -> None:
        """:meth:`update_priorities_device` for the indices of :meth:`graph_sample` in the same launch."""
        raise NotImplementedError

    def graph_advance(self, count: int) -> None:
        """``count`` graphed draws were replayed: move the python counters on."""

    def _device_weights(self, n: int, out: Mapping[str, Any] | None) -> Any:
        if out is not None and "weights" in out:
            return out["weights"]
        import torch

        return torch.empty(n, dtype=torch.float32, device=self.device)

    def _check_not_empty(self) -> None:
        if self._storage.size == 0:
            raise EmptyTreeError(
                f"{type(self).__name__}.sample: the storage is empty (size 0); expected at least one "
                "stored transition. Fix: add transitions before sampling."
            )


class UniformReplay(ReplayManager):
    """Uniform replay: every filled slot is equally likely; no tree.

    ``sample`` draws slots i.i.d. uniformly from ``[0, size)`` (with
    replacement) and returns all-ones weights. ``update_priorities`` validates
    its input and does nothing else, so that a training loop can treat both
    kinds of replay alike.

    Complexity: ``sample`` is ``O(B * row_bytes)`` (the gather).
    """

    keeps_priorities = False

    def sample(self, batch_size: int, out: Mapping[str, np.ndarray] | None = None) -> SampledBatch:
        """Draw ``batch_size`` filled slots uniformly with replacement (``out``: see :meth:`ReplayManager.sample`).

        Returns:
            A :class:`SampledBatch` with ``int64`` indices in ``[0, size)`` and
            ``float32`` weights equal to 1.

        Raises:
            InvalidDTypeError: ``batch_size`` is not an int.
            InvalidValueError: ``batch_size < 1``.
            EmptyTreeError: the storage is empty.
        """
        n = check_batch_size(batch_size, "UniformReplay.sample")
        self._check_not_empty()
        indices = self._rng.integers(0, self._storage.size, size=n, dtype=np.int64)
        # indices drawn from [0, size) here: valid by construction, no second check
        weights = _weights_out(out, n)
        weights[:] = 1.0
        return SampledBatch(indices=indices, batch=self._storage.gather_into(indices, out), weights=weights)

    def sample_device(self, batch_size: int, out: Mapping[str, Any] | None = None) -> SampledBatch:
        """:meth:`sample` on :attr:`device` (see :meth:`ReplayManager.sample_device`): slots drawn there."""
        import torch

        n = check_batch_size(batch_size, "UniformReplay.sample_device")
        self._check_not_empty()
        dev = self._device_state()
        indices = torch.randint(0, self._storage.size, (n,), generator=dev.gen, device=self.device)
        weights = self._device_weights(n, out)
        weights.fill_(1.0)
        return SampledBatch(indices=indices, batch=self._storage.gather_device(indices, out), weights=weights)

    def update_priorities_device(self, indices: Any, td_errors: Any) -> None:
        """Flag a non-finite TD error (:meth:`check_device_errors` reports it); store nothing."""
        import torch

        self._device_state().bad_td |= ~torch.isfinite(td_errors).all()

    def graph_sample(self, batch_size: int, out: Mapping[str, Any] | None = None) -> SampledBatch:
        """Slots ``floor(u * size)`` from the device slot count (uniform as :meth:`sample_device`'s, not the
        same draws)."""
        import torch

        n = check_batch_size(batch_size, "UniformReplay.graph_sample")
        dev, g = self._device_state(), self._graph_scalars()
        u = torch.rand(n, dtype=torch.float64, generator=dev.gen, device=self.device)
        indices = torch.minimum((u * g.size).floor_(), g.size - 1).to(torch.int64)
        weights = self._device_weights(n, out)
        weights.fill_(1.0)
        return SampledBatch(indices=indices, batch=self._storage.gather_device(indices, out), weights=weights)

    def graph_write_back(self, indices: Any, td_errors: Any) -> None:
        self.update_priorities_device(indices, td_errors)

    def update_priorities(self, indices, td_errors, *, checked: bool = False) -> None:
        """Validate ``indices`` and ``td_errors`` as prioritized replay would; store nothing.

        Args:
            indices: 1-D integer array-like of filled slots.
            td_errors: 1-D real array-like of the same length, finite.

        Raises:
            InvalidIndexError: an index outside ``[0, size)``.
            InvalidDTypeError: non-integer indices or non-real TD errors.
            InvalidValueError: not 1-D, length mismatch, or a NaN/inf TD error.
        """
        if checked:
            return
        idx = check_filled_indices(indices, self._storage.size, self._storage.capacity)
        check_td_errors(td_errors, idx.shape[0], "UniformReplay.update_priorities")
