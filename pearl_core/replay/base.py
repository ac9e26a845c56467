"""The replay-manager interface, the value it samples, and uniform replay.

A replay manager composes a :class:`~pearl_core.replay.storage.DataStorage`
(and, for prioritized replay, a :class:`~pearl_core.sumtree.SumTree`); it
never subclasses them. The training loop it serves is::

    replay.add(obs, action, reward, next_obs, done)       # from the actors
    sampled = replay.sample(batch_size)                   # -> SampledBatch
    td_errors = learner.step(sampled.batch, sampled.weights)
    replay.update_priorities(sampled.indices, td_errors)  # back from the learner
"""

from __future__ import annotations

import abc
import dataclasses
import operator
from typing import Mapping

import numpy as np

from pearl_core.errors import EmptyTreeError, InvalidDTypeError, InvalidValueError, SpecError
from pearl_core.replay.storage import Batch, DataStorage, check_filled_indices

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
        return SampledBatch(indices=indices, batch=self._storage._take(indices, out), weights=weights)

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
