"""Data Storage (DS): the experiences themselves, in a struct-of-arrays ring buffer.

A :class:`DataStorage` preallocates one array per field of a transition
``(obs, action, reward, next_obs, done, steps)`` from a :class:`StorageSpec` and a
capacity, writes batches into consecutive slots (wrapping around), and gathers
batches by slot index. It knows nothing about priorities: a replay manager
composes it with a sum tree whose leaf ``i`` describes slot ``i``.

Slots fill from 0 upwards, so the filled slots are always exactly
``range(size)``; once ``size == capacity`` new rows overwrite the oldest ones.
"""

from __future__ import annotations

import dataclasses
import operator
from collections import abc
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from pearl_core.errors import InvalidDTypeError, InvalidValueError, SpecError
from pearl_core.replay.memory import allocate_fields
from pearl_core.sumtree import check_indices

if TYPE_CHECKING:
    import torch

__all__ = ["STEPS_DTYPE", "TRANSITION_FIELDS", "Batch", "DataStorage", "StorageSpec", "check_filled_indices",
           "copy_rows", "discount_table", "discounts", "load_storage_state", "transition_rows"]

#: dtype kinds a stored field may have: bool, signed int, unsigned int, float.
_FIELD_KINDS = "biuf"


@dataclasses.dataclass(frozen=True, eq=False)
class Batch:
    """A batch of ``B`` transitions: one array per transition field.

    The dataclass fields ARE the transition schema (:data:`TRANSITION_FIELDS`):
    every buffer, slot, checkpoint and message that holds transitions iterates
    them instead of naming them one by one. Arrays sampled from a replay manager
    are copies (or the caller's own ``out`` arrays), never views of the storage; a device batch's are tensors.

    Attributes:
        obs: ``(B, *obs_shape)`` of ``obs_dtype``.
        action: ``(B, *action_shape)`` of ``action_dtype``.
        reward: ``(B,)`` ``float32``.
        next_obs: ``(B, *obs_shape)`` of ``obs_dtype``.
        done: ``(B,)`` ``bool``: the episode *terminated* within the transition (no bootstrap).
        steps: ``(B,)`` ``int32``, ``k >= 1``: the environment steps the transition spans. A
            one-step transition has ``k = 1``; an n-step one (``RunConfig.n_step``) holds
            ``reward = sum_{j<k} gamma^j r_{t+j}`` and ``next_obs = s_{t+k}``, and a learner
            discounts its bootstrap by ``gamma ** k`` (:func:`discounts`). ``None`` (the default
            when a batch is built by hand) means one step per row: a numpy batch gets ones.

    Why the exponent ``k`` and not the discount ``gamma ** k`` itself: ``gamma`` is a
    hyper-parameter of the trainer, not of the data. Storing ``k`` keeps every
    one-step transition independent of ``gamma`` (callers that add five fields, old
    checkpoints and replays built without a trainer all mean ``k = 1``), and the learner
    turns ``k`` into ``gamma ** k`` with the same ``gamma`` the actors summed the rewards with
    (both read it from the trainer built from the same config).
    """

    obs: np.ndarray | torch.Tensor
    action: np.ndarray | torch.Tensor
    reward: np.ndarray | torch.Tensor
    next_obs: np.ndarray | torch.Tensor
    done: np.ndarray | torch.Tensor
    steps: np.ndarray | torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.steps is None and isinstance(self.reward, np.ndarray):
            object.__setattr__(self, "steps", np.ones(self.reward.shape[0], np.int32))

    def __len__(self) -> int:
        return int(self.reward.shape[0])

    @classmethod
    def of(cls, arrays: Mapping[str, np.ndarray]) -> "Batch":
        """A batch over the transition fields of ``arrays`` (extra keys are ignored; no copy).

        A mapping without ``steps`` (one-step rows) gets ones, as :class:`Batch` does."""
        return cls(**{name: arrays[name] for name in TRANSITION_FIELDS[:-1]}, steps=arrays.get("steps"))


#: The fields of one transition, in :meth:`DataStorage.add` order. Defined once, by :class:`Batch`.
TRANSITION_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Batch))

#: The dtype of :attr:`Batch.steps` (the environment steps a transition spans).
STEPS_DTYPE = np.dtype(np.int32)


def discount_table(gamma: float, max_steps: int) -> np.ndarray:
    """``float32`` ``[gamma ** 0, ..., gamma ** max_steps]``, by repeated multiplication in float64.

    Entry 1 is exactly ``float32(gamma)``, so a one-step transition is discounted bitwise as a
    learner that multiplies by the scalar ``gamma`` in float32 would.
    """
    out = np.empty(int(max_steps) + 1, np.float64)
    out[0] = 1.0
    for k in range(1, out.shape[0]):
        out[k] = out[k - 1] * float(gamma)
    return out.astype(np.float32)


def discounts(steps, gamma: float) -> np.ndarray | None:
    """Per-row ``float32`` ``gamma ** steps`` of a host ``steps`` array (``None``: every row one step).

    Returns ``None`` for ``steps is None`` so a caller can keep its scalar-``gamma`` path.
    """
    if steps is None:
        return None
    k = np.asarray(steps)
    if k.size == 0:
        return np.zeros(0, np.float32)
    return discount_table(gamma, int(k.max()))[k.reshape(-1)]


def _getter(src):
    """``name -> array`` for a mapping (by key) or an object with the fields as attributes (a :class:`Batch`).

    Decided once per call of the helpers below: they run once per actor step.
    """
    return src.__getitem__ if isinstance(src, abc.Mapping) else src.__getattribute__


def _field_of(get, name: str, rows: int):
    """Field ``name`` via ``get``; a source without ``steps`` (written before n-step returns) holds one-step rows."""
    if name != "steps":
        return get(name)
    try:
        value = get(name)
    except (KeyError, AttributeError):
        value = None
    return np.ones(rows, STEPS_DTYPE) if value is None else value


def transition_rows(src, n: int | None = None) -> tuple[np.ndarray, ...]:
    """The transition fields of ``src`` (a mapping or a :class:`Batch`), first ``n`` rows, in add order.

    A source without ``steps`` gives ones (one-step transitions)."""
    get = _getter(src)
    rows = len(get("reward"))
    if n is None:
        return tuple(_field_of(get, name, rows) for name in TRANSITION_FIELDS)
    return tuple(_field_of(get, name, rows)[:n] for name in TRANSITION_FIELDS)


def copy_rows(dst, src, *, dst_start: int = 0, src_start: int = 0, n: int | None = None) -> None:
    """Copy ``n`` rows of every transition field from ``src`` into ``dst`` (mappings or batches).

    ``dst[f][dst_start:dst_start + n] = src[f][src_start:src_start + n]`` for each field ``f``;
    ``n`` defaults to all of ``src`` from ``src_start``. numpy casts as assignment does. A ``src``
    without ``steps`` copies ones.
    """
    get_dst, get_src = _getter(dst), _getter(src)
    rows = get_src("reward").shape[0]
    if n is None:
        n = rows - src_start
    d, s = slice(dst_start, dst_start + n), slice(src_start, src_start + n)
    for name in TRANSITION_FIELDS:
        get_dst(name)[d] = _field_of(get_src, name, rows)[s]


def _shape(value, what: str) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)):
        value = (value,)
    try:
        dims = tuple(operator.index(d) for d in value)
    except TypeError as exc:
        raise SpecError(
            f"StorageSpec.{what} must be a tuple of non-negative ints; found {value!r}. "
            "Fix: pass e.g. (4,) for a vector or () for a scalar."
        ) from exc
    if any(d < 0 for d in dims):
        raise SpecError(f"StorageSpec.{what} must not have negative dimensions; found {dims}.")
    return dims


def _dtype(value, what: str) -> np.dtype:
    try:
        dtype = np.dtype(value)
    except TypeError as exc:
        raise SpecError(f"StorageSpec.{what} = {value!r} is not a numpy dtype. Fix: pass e.g. np.float32.") from exc
    if dtype.kind not in _FIELD_KINDS:
        raise SpecError(
            f"StorageSpec.{what} = {dtype} is not storable; expected a bool, integer or real floating "
            "dtype. Fix: encode the value numerically (e.g. np.float32 or np.int64)."
        )
    return dtype


def _space_layout(space, what: str) -> tuple[tuple[int, ...], np.dtype]:
    try:
        from gymnasium import spaces  # optional dependency (pearl-core[rl]); only needed here
    except ImportError as exc:
        raise SpecError(
            "StorageSpec.from_spaces needs gymnasium, which is not installed. "
            "Fix: pip install 'pearl-core[rl]', or build StorageSpec(obs_shape=..., ...) directly."
        ) from exc
    if isinstance(space, spaces.Discrete):
        return (), np.dtype(np.int64)
    if isinstance(space, spaces.Box):
        return tuple(int(d) for d in space.shape), np.dtype(space.dtype)
    raise SpecError(
        f"{what} {space!r} ({type(space).__name__}) is not supported by StorageSpec.from_spaces; "
        "expected gymnasium.spaces.Box or gymnasium.spaces.Discrete. Fix: flatten the space "
        "(e.g. gymnasium.wrappers.FlattenObservation) or build StorageSpec(...) by hand."
    )


@dataclasses.dataclass(frozen=True)
class StorageSpec:
    """Shape and dtype of one transition's observation and action.

    Rewards are always stored as ``float32``, done flags as ``bool`` and the steps a
    transition spans as ``int32``, so they need no spec. Shapes exclude the batch axis; ``()`` is a scalar.

    Attributes:
        obs_shape: shape of one observation (``obs`` and ``next_obs``).
        obs_dtype: numpy dtype of observations (bool, integer or float).
        action_shape: shape of one action; ``()`` for a discrete action.
        action_dtype: numpy dtype of actions (bool, integer or float).

    Raises:
        SpecError: a shape is not a tuple of non-negative ints, or a dtype is
            not bool, integer or real floating.
    """

    obs_shape: tuple[int, ...]
    obs_dtype: np.dtype
    action_shape: tuple[int, ...]
    action_dtype: np.dtype

    def __post_init__(self) -> None:
        # Normalise in place so that equal specs compare (and hash) equal.
        object.__setattr__(self, "obs_shape", _shape(self.obs_shape, "obs_shape"))
        object.__setattr__(self, "obs_dtype", _dtype(self.obs_dtype, "obs_dtype"))
        object.__setattr__(self, "action_shape", _shape(self.action_shape, "action_shape"))
        object.__setattr__(self, "action_dtype", _dtype(self.action_dtype, "action_dtype"))

    @classmethod
    def from_spaces(cls, observation_space, action_space) -> StorageSpec:
        """Build the spec of a gymnasium environment's spaces.

        ``Box`` maps to its own shape and dtype; ``Discrete`` maps to a scalar
        ``int64`` (shape ``()``). Both arguments follow the same rule.

        Args:
            observation_space: a ``gymnasium.spaces.Box`` or ``Discrete``.
            action_space: a ``gymnasium.spaces.Box`` or ``Discrete``.

        Returns:
            The matching :class:`StorageSpec`.

        Raises:
            SpecError: a space of any other type (the message names it), or
                gymnasium is not installed.
        """
        obs_shape, obs_dtype = _space_layout(observation_space, "observation_space")
        action_shape, action_dtype = _space_layout(action_space, "action_space")
        return cls(obs_shape, obs_dtype, action_shape, action_dtype)

    def fields(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Per-row ``(shape, dtype)`` of each transition field, in :data:`TRANSITION_FIELDS` order."""
        layout = {"obs": (self.obs_shape, self.obs_dtype), "action": (self.action_shape, self.action_dtype),
                  "reward": ((), np.dtype(np.float32)), "next_obs": (self.obs_shape, self.obs_dtype),
                  "done": ((), np.dtype(np.bool_)), "steps": ((), STEPS_DTYPE)}
        return {name: layout[name] for name in TRANSITION_FIELDS}


def check_filled_indices(indices, size: int, capacity: int, what: str = "indices") -> np.ndarray:
    """Return ``indices`` as a 1-D ``int64`` array of filled slots, or raise.

    Args:
        indices: 1-D integer array-like.
        size: number of filled slots; valid indices are ``0 <= i < size``.
        capacity: the storage capacity, quoted in the error message.
        what: the argument's name, quoted in error messages.

    Raises:
        InvalidValueError: not 1-D.
        InvalidDTypeError: not integers.
        InvalidIndexError: an index outside ``[0, size)`` (names the first one).
    """
    fix = f" Only filled slots are valid (capacity {capacity}). Fix: use the indices returned by add() or sample()."
    return check_indices(indices, size, what, bound="size", fix=fix)


def _cast(arr: np.ndarray, target: np.dtype, name: str) -> np.ndarray:
    """Cast ``arr`` to ``target`` if no value changes beyond float rounding, else raise."""
    src = arr.dtype
    if src == target:
        return arr
    if target.kind == "b" and src.kind in "iu":
        # Environments and torch code often hand over done flags as 0/1 integers.
        bad = (arr != 0) & (arr != 1)
        if bad.any():
            pos = np.unravel_index(int(np.argmax(bad)), arr.shape)
            raise InvalidValueError(
                f"DataStorage.add: {name}{list(pos)} = {arr[pos]!r} is not a flag; expected bool "
                "or integer 0/1. Fix: pass terminated | truncated as a bool array."
            )
        return arr.astype(np.bool_)
    if src.kind not in _FIELD_KINDS or not np.can_cast(src, target, casting="same_kind"):
        raise InvalidDTypeError(
            f"DataStorage.add: {name} has dtype {src}, which cannot be cast safely to the stored "
            f"dtype {target}. Fix: convert it yourself (e.g. {name}.astype(np.{target.name})) "
            "or build the StorageSpec with the dtype your data has."
        )
    if target.kind in "iu" and src.kind in "iu" and arr.size and not np.can_cast(src, target, casting="safe"):
        info = np.iinfo(target)
        lo, hi = int(arr.min()), int(arr.max())
        if lo < info.min or hi > info.max:
            raise InvalidValueError(
                f"DataStorage.add: {name} holds values in [{lo}, {hi}], outside the range of the "
                f"stored dtype {target} ([{info.min}, {info.max}]). Fix: use a wider dtype in the StorageSpec."
            )
    with np.errstate(over="ignore"):  # overflow is detected and reported just below
        out = arr.astype(target)
    if target.kind == "f" and src.kind == "f" and target.itemsize < src.itemsize:
        overflow = np.isinf(out) & np.isfinite(arr)
        if overflow.any():
            pos = np.unravel_index(int(np.argmax(overflow)), arr.shape)
            raise InvalidValueError(
                f"DataStorage.add: {name}{list(pos)} = {arr[pos]!r} overflows the stored dtype {target}. "
                "Fix: rescale the value or store a wider dtype."
            )
    return out


class DataStorage:
    """Struct-of-arrays ring buffer of ``(obs, action, reward, next_obs, done, steps)``.

    Layout: one array per transition field, preallocated at construction, ``capacity`` rows each:
    ``obs`` and ``next_obs`` ``(capacity, *obs_shape)`` of ``obs_dtype``,
    ``action`` ``(capacity, *action_shape)`` of ``action_dtype``, ``reward``
    ``(capacity,)`` ``float32``, ``done`` ``(capacity,)`` ``bool`` and ``steps``
    ``(capacity,)`` ``int32``.

    Writes go to consecutive slots starting at :attr:`cursor` and wrap to 0 at
    the end; once full, each write overwrites the oldest rows. Filled slots are
    always ``range(size)``.

    Bad input raises and leaves every array, :attr:`size` and :attr:`cursor`
    unchanged: :meth:`add` validates and casts all fields before writing any.

    The public reads are :meth:`gather` (checked indices) and :meth:`field`.
    What a device-resident storage implements (a backend's ``make_storage``
    returns a subclass; the base class keeps ``size``, ``cursor`` and every check;
    none of these four may change ``size`` or ``cursor``;
    :class:`~pearl_core.testing.StorageConformance` checks it all):

    * :meth:`allocate` ``() -> dict``: the ``capacity`` rows of every field, in
      the stored dtypes, where the rows live; called once by ``__init__`` (set
      what it needs before ``super().__init__``), kept as ``self._arrays``.
    * :meth:`store` ``(slots, rows)``: write ``rows`` (one host array per field,
      already validated and cast to the stored dtype, one row per slot) into
      ``slots`` (distinct ``int64`` in ``[0, capacity)``, ring order: they may
      wrap to 0); :meth:`add` calls it, then moves ``size`` and ``cursor``.
    * :meth:`gather_into` ``(idx, out=None) -> Batch``: the rows at ``idx`` (a replay
      manager's own 1-D ``int64`` filled slots, ``< size``, repeats and any order
      allowed, already valid: check nothing), in that order, as host arrays that
      later writes do not change. With ``out`` (one host array ``(len(idx), *shape)``
      of the stored dtype per field, maybe strided, maybe with other keys such as
      ``"weights"``, left alone) write the rows into those arrays and return
      ``Batch.of(out)``; a backend may accept its own destinations there too.
    * :meth:`field` ``(name)``: a read-only host array of all ``capacity`` rows.

    Args:
        spec: the observation/action layout.
        capacity: number of slots, ``>= 1``.

    Raises:
        SpecError: ``spec`` is not a :class:`StorageSpec`.
        InvalidDTypeError: ``capacity`` is not an integer.
        InvalidValueError: ``capacity < 1``.
    """

    def __init__(self, spec: StorageSpec, capacity: int):
        if not isinstance(spec, StorageSpec):
            raise SpecError(
                f"DataStorage needs a StorageSpec; found {type(spec).__name__}. "
                "Fix: StorageSpec.from_spaces(env.observation_space, env.action_space)."
            )
        try:
            capacity = operator.index(capacity)
        except TypeError as exc:
            raise InvalidDTypeError(
                f"DataStorage capacity must be an integer; found {capacity!r}. Fix: pass an int, e.g. 2**20."
            ) from exc
        if capacity < 1:
            raise InvalidValueError(f"DataStorage capacity must be >= 1; found {capacity}. Fix: pass e.g. 2**20.")
        self._spec = spec
        self._capacity = capacity
        self._layout = spec.fields()
        self._arrays = allocate_fields(self.allocate, self, self._layout, capacity)  # StorageMemoryError
        self._cursor = 0
        self._size = 0

    #: Where the rows live: ``"cpu"`` (host memory) here; a device-resident subclass names its device.
    device: str = "cpu"

    # -- what a device-resident subclass implements (a backend's make_storage) -----------------
    def allocate(self) -> dict[str, Any]:
        """The ``capacity`` rows of every field (host arrays here); called once by ``__init__``."""
        return {name: np.zeros((self._capacity, *shape), dtype=dtype) for name, (shape, dtype) in self._layout.items()}

    def store(self, slots: np.ndarray, rows: Mapping[str, np.ndarray]) -> None:
        """Write validated rows (stored dtypes, one per slot) into ``slots`` (see the class docstring)."""
        for name, values in rows.items():
            self._arrays[name][slots] = values

    @property
    def spec(self) -> StorageSpec:
        """The observation/action layout."""
        return self._spec

    @property
    def capacity(self) -> int:
        """Number of slots."""
        return self._capacity

    @property
    def size(self) -> int:
        """Number of filled slots, ``min(rows ever added, capacity)``."""
        return self._size

    @property
    def cursor(self) -> int:
        """The slot the next added row goes to."""
        return self._cursor

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"DataStorage(spec={self._spec}, capacity={self._capacity}, size={self._size})"

    def field(self, name: str) -> np.ndarray:
        """Return a read-only view of one whole field array (all ``capacity`` rows).

        A device-resident storage returns a host copy instead (it reads the device).

        Args:
            name: one of :data:`TRANSITION_FIELDS`.

        Raises:
            InvalidValueError: an unknown field name.
        """
        if name not in self._arrays:
            raise InvalidValueError(f"DataStorage has no field {name!r}; expected one of {list(TRANSITION_FIELDS)}.")
        view = self._arrays[name].view()
        view.flags.writeable = False
        return view

    def add(self, obs, action, reward, next_obs, done, steps=None) -> np.ndarray:
        """Write a batch of ``n`` transitions into the next ``n`` slots, wrapping around.

        If ``n > capacity`` only the last ``capacity`` rows are kept (as if all
        ``n`` were written in order and the earlier ones overwritten). ``n == 0``
        is allowed and writes nothing.

        Casting: a field is cast to its stored dtype when numpy's ``same_kind``
        rule allows it (``float64 -> float32``, ``int -> float``) and no value
        changes beyond float rounding (integer narrowing is range-checked, float
        narrowing must not overflow). ``done`` also accepts integer 0/1.
        Observations and actions may hold NaN/inf; rewards must be finite.

        Complexity: ``O(min(n, capacity) * row_bytes)`` plus an ``O(n)`` validation pass.

        Args:
            obs: ``(n, *obs_shape)`` array-like.
            action: ``(n, *action_shape)`` array-like.
            reward: ``(n,)`` real array-like, finite.
            next_obs: ``(n, *obs_shape)`` array-like.
            done: ``(n,)`` bool (or integer 0/1) array-like.
            steps: ``(n,)`` integer array-like, each ``>= 1``: the environment steps each
                transition spans (n-step returns); ``None``: one step each.

        Returns:
            The ``int64`` slots written, one per kept row in row order, of length
            ``min(n, capacity)``.

        Raises:
            InvalidValueError: a field's shape is not ``(n, *field_shape)``, the
                fields' batch lengths differ, a reward is NaN/inf, or a value
                does not fit the stored dtype, or a ``steps`` value is below 1.
            InvalidDTypeError: a field's dtype cannot be cast safely.
        """
        if steps is None:
            steps = np.ones(np.shape(reward)[:1], STEPS_DTYPE)
        rows = self._validate(dict(zip(TRANSITION_FIELDS, (obs, action, reward, next_obs, done, steps))))
        n = rows["reward"].shape[0]
        kept = min(n, self._capacity)
        first = n - kept
        slots = (self._cursor + np.arange(first, n, dtype=np.int64)) % self._capacity
        self.store(slots, {name: values[first:] for name, values in rows.items()})
        self._cursor = (self._cursor + n) % self._capacity
        self._size = min(self._size + n, self._capacity)
        return slots

    def gather(self, indices) -> Batch:
        """Copy the rows at ``indices`` into a :class:`Batch`.

        Complexity: ``O(len(indices) * row_bytes)``.

        Args:
            indices: 1-D integer array-like of filled slots (``< size``);
                repeats are allowed.

        Returns:
            A :class:`Batch` of ``len(indices)`` rows, in the order given.

        Raises:
            InvalidValueError: ``indices`` is not 1-D.
            InvalidDTypeError: ``indices`` is not integer.
            InvalidIndexError: an index outside ``[0, size)``.
        """
        return self.gather_into(check_filled_indices(indices, self._size, self._capacity))

    def gather_into(self, idx: np.ndarray, out: Mapping[str, np.ndarray] | None = None) -> Batch:
        """:meth:`gather` without the checks, for a replay manager's own indices (valid by construction);
        into ``out``'s arrays (e.g. a learner's batch slot) when given. See the class docstring."""
        if out is None:
            return Batch(*(self._arrays[name][idx] for name in TRANSITION_FIELDS))
        for name in TRANSITION_FIELDS:
            np.take(self._arrays[name], idx, axis=0, out=out[name], mode="clip")  # clip: no buffered copy
        return Batch.of(out)

    def _validate(self, given: dict) -> dict[str, np.ndarray]:
        arrays = {}
        for name, value in given.items():
            try:
                arrays[name] = np.asarray(value)
            except (ValueError, TypeError) as exc:
                raise InvalidValueError(
                    f"DataStorage.add: {name} could not be turned into an array ({exc}). "
                    "Fix: pass one rectangular numpy array per field."
                ) from exc
        for name, arr in arrays.items():
            shape, _ = self._layout[name]
            if arr.ndim != 1 + len(shape) or arr.shape[1:] != shape:
                expected = "(" + ", ".join(["n", *map(str, shape)]) + ("" if shape else ",") + ")"
                fix = (
                    f"this looks like one transition; add a leading batch axis ({name}[None])"
                    if arr.shape == shape
                    else "stack the transitions along axis 0"
                )
                raise InvalidValueError(
                    f"DataStorage.add: {name} has shape {arr.shape}; expected {expected} with one row "
                    f"per transition. Fix: {fix}."
                )
        lengths = {name: arr.shape[0] for name, arr in arrays.items()}
        if len(set(lengths.values())) > 1:
            raise InvalidValueError(
                f"DataStorage.add: the fields have different batch lengths {lengths}; expected one "
                "length n for all fields. Fix: pass the same transitions in every field."
            )
        rows = {name: _cast(arr, self._layout[name][1], name) for name, arr in arrays.items()}
        bad = ~np.isfinite(rows["reward"])
        if bad.any():
            pos = int(np.argmax(bad))
            raise InvalidValueError(
                f"DataStorage.add: reward[{pos}] = {arrays['reward'][pos]!r} is not finite (as float32); "
                "expected finite rewards. Fix: clip or drop the transition before adding it."
            )
        low = rows["steps"] < 1
        if low.any():
            pos = int(np.argmax(low))
            raise InvalidValueError(
                f"DataStorage.add: steps[{pos}] = {int(rows['steps'][pos])} is below 1; expected the number of "
                "environment steps each transition spans (1 for a one-step transition, up to n for n-step "
                "returns). Fix: pass steps=None for one-step transitions."
            )
        return rows


def load_storage_state(storage: DataStorage, state: Mapping[str, Any]) -> None:
    """Refill an empty ``storage`` from a state dict (:meth:`ReplayManager.state_dict`): the rows into slots
    ``0 .. size - 1`` and the cursor where it was.

    Raises:
        SpecError: the state holds more rows than the capacity, or a cursor outside it.
    """
    n, cursor = int(state["size"]), int(state["cursor"])
    if n > storage.capacity or not (0 <= cursor < max(storage.capacity, 1)):
        raise SpecError(
            f"replay state holds {n} transitions (cursor {cursor}) but the capacity is {storage.capacity}; "
            "expected a state saved with the same replay capacity. Fix: keep replay.capacity unchanged on resume."
        )
    if n == 0:
        return
    # A checkpoint from before n-step returns has no "steps": its rows are one-step transitions.
    rows = [np.asarray(state[name]) if name in state or name != "steps" else np.ones(n, STEPS_DTYPE)
            for name in TRANSITION_FIELDS]
    storage.add(*rows)  # slots 0..n-1; cursor = n % capacity
    if n == storage.capacity and cursor:
        storage.add(*(r[:cursor] for r in rows))  # rewrite the same rows to move the cursor to where it was
