"""The conformance suite for a backend's Data Storage (:meth:`pearl_core.backend.Backend.make_storage`).

Usage, in a plugin's test module::

    from pearl_core.testing import StorageConformance

    class TestMyStorage(StorageConformance):
        device = "mydev:0"  # the .device the storage must report (optional)

        def make_storage(self, spec, capacity):
            return MyBackend().make_storage(spec, capacity, "mydev:0")

Every call is made on the storage under test and on the core's host
:class:`~pearl_core.replay.storage.DataStorage` (the reference), with the same
arguments, over the specs in :data:`SPECS` (``float32`` vector and ``uint8``
image observations; scalar ``int64`` and ``float32`` vector actions):

* Hypothesis programs of ``add`` (batches of 0, 1, fewer than, exactly and more
  than ``capacity`` rows, wrapping around; inputs that need casting, NaN/inf
  observations) and ``gather`` / ``gather_into`` / ``gather_into(idx, out)``
  (repeats, any order, sometimes an unfilled slot); after every call ``size``, ``cursor``,
  ``len``, the returned slots, the gathered batches (values, bit patterns,
  dtypes, shapes: host arrays that later adds do not change) and ``field(name)``
  of every field (a read-only host array of all ``capacity`` rows) must equal
  the reference's. Only filled slots are compared: an unfilled slot's contents
  are unspecified;
* bad input (every rule of :meth:`DataStorage.add`, ``gather`` and ``field``,
  and of the constructor) raises the error class the host storage raises and
  leaves ``size``, ``cursor`` and every field unchanged;
* the public storage contract (:class:`~pearl_core.replay.storage.DataStorage`'s
  docstring): ``allocate`` / ``store`` / ``gather_into`` / ``field`` are what the
  storage implements (a class still defining the old private hooks ``_allocate`` /
  ``_store`` / ``_take``, which nothing calls any more, fails); ``store(slots, rows)``
  of validated rows writes those slots, as the host's does, and leaves ``size`` and
  ``cursor`` alone; ``gather_into(idx, out)`` fills the caller's host arrays
  (contiguous or strided; an extra ``"weights"`` entry is left alone) and returns them;
* :attr:`StorageConformance.device` equals ``.device``;
* :class:`~pearl_core.replay.UniformReplay` and
  :class:`~pearl_core.replay.PrioritizedReplay` (over a
  :class:`~pearl_core.testing.ReferenceSumTree`) built over the storage sample the
  same indices, weights and batches as over a host storage with the same seed.

The number of Hypothesis examples per spec is a third of
``PEARL_CONFORMANCE_EXAMPLES`` (default 150, so 50).
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pearl_core.replay.base import UniformReplay
from pearl_core.replay.prioritized import PrioritizedReplay
from pearl_core.replay.storage import TRANSITION_FIELDS, DataStorage, StorageSpec
from pearl_core.testing.reference import ReferenceSumTree
from pearl_core.testing.storage_checks import (
    assert_same_batch,
    assert_same_state,
    check_field,
    out_arrays,
    run_both,
    same_rows,
    short,
)

__all__ = ["SPECS", "StorageConformance", "storage_programs", "transitions"]

EXAMPLES = int(os.environ.get("PEARL_CONFORMANCE_EXAMPLES", "150"))

_SETTINGS = settings(
    max_examples=max(10, EXAMPLES // 3),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.differing_executors],
    # A backend's author reads one failure with its message, not an ExceptionGroup of every distinct one.
    report_multiple_bugs=False,
)

#: The layouts every test runs on.
SPECS: dict[str, StorageSpec] = {
    "vector-f32-discrete": StorageSpec((4,), np.float32, (), np.int64),
    "image-u8-discrete": StorageSpec((3, 4, 4), np.uint8, (), np.int64),
    "vector-f32-box": StorageSpec((5,), np.float32, (2,), np.float32),
    "image-u8-box": StorageSpec((3, 4, 4), np.uint8, (3,), np.float32),
}

_FLOAT_SPECIALS = (np.nan, np.inf, -np.inf, -0.0, 1e-40, 3.0e38)  # 1e-40: a float32 subnormal


def _values(rng: np.random.Generator, shape: tuple, dtype: np.dtype, n: int, specials: bool) -> np.ndarray:
    """``n`` rows of one field, sometimes in a wider dtype that ``add`` must cast (no value changes)."""
    dtype, full = np.dtype(dtype), (n, *shape)
    if dtype.kind == "b":
        return rng.random(full) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        arr = rng.integers(max(int(info.min), -1000), min(int(info.max), 1000), size=full, endpoint=True)
        flat = arr.reshape(-1)
        if flat.size:  # the extremes of the stored dtype, where a narrowing cast would go wrong
            flat[rng.integers(0, flat.size, 2)] = (max(int(info.min), -2**62), min(int(info.max), 2**62))
        wide = dtype.itemsize < 8 and rng.random() < 0.5  # int64 / uint64 input: a range-checked narrowing
        return arr.astype((np.int64 if dtype.kind == "i" else np.uint64) if wide else dtype)
    arr = (rng.standard_normal(full) * 100).astype(dtype)
    flat = arr.reshape(-1)
    if specials and flat.size:
        flat[rng.integers(0, flat.size, 3)] = rng.choice(_FLOAT_SPECIALS, 3)
    return arr.astype(np.float64) if dtype.itemsize < 8 and rng.random() < 0.5 else arr


def transitions(rng: np.random.Generator, spec: StorageSpec, n: int) -> tuple[np.ndarray, ...]:
    """``n`` valid transitions for ``spec`` in :meth:`DataStorage.add` order.

    Inputs vary the way callers' data does: ``float64`` where ``float32`` is stored,
    ``int64`` for narrower integers, ``done`` as bools or 0/1 integers, NaN/inf and
    ``-0.0`` in float observations (rewards stay finite), ``steps`` (n-step returns) in
    ``1..5`` as ``int32`` or ``int64``.
    """
    obs = _values(rng, spec.obs_shape, spec.obs_dtype, n, specials=True)
    nxt = _values(rng, spec.obs_shape, spec.obs_dtype, n, specials=True)
    act = _values(rng, spec.action_shape, spec.action_dtype, n, specials=False)
    reward = rng.standard_normal(n) * 10
    reward[rng.random(n) < 0.1] = -0.0
    reward = reward.astype(np.float32 if rng.random() < 0.5 else np.float64)
    done = rng.random(n) < 0.3
    if rng.random() < 0.5:
        done = done.astype(np.int64 if rng.random() < 0.5 else np.uint8)
    steps = rng.integers(1, 6, n).astype(np.int32 if rng.random() < 0.5 else np.int64)
    return obs, act, reward, nxt, done, steps


def _add_sizes(capacity: int) -> st.SearchStrategy[int]:
    """Batch sizes 0, 1, fewer than, exactly and more than ``capacity``."""
    sizes = [st.just(0), st.just(1), st.just(capacity), st.integers(capacity + 1, 3 * capacity + 1)]
    if capacity > 2:
        sizes.append(st.integers(2, capacity - 1))
    return st.one_of(*sizes)


@st.composite
def storage_programs(draw, max_capacity: int = 12, max_ops: int = 10):
    """``(capacity, seed, ops)``: ops are ``("add", n)``, ``("gather", indices)``, ``("take", indices)`` and
    ``("take_out", indices)``. ``gather`` indices come as an ``int64``/``int32`` array or a list, with
    repeats, and now and then include an unfilled slot or a negative index (the call must then raise);
    ``take`` indices are always filled slots (``gather_into`` does no checks)."""
    capacity = draw(st.integers(1, max_capacity))
    seed = draw(st.integers(0, 2**32 - 1))
    ops, size = [], 0
    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(("add", "add", "gather", "take", "take_out")))
        if kind == "add":
            n = draw(_add_sizes(capacity))
            ops.append(("add", n))
            size = min(size + n, capacity)
            continue
        idx = draw(st.lists(st.integers(0, size - 1), max_size=12)) if size else []
        if idx and draw(st.booleans()):
            idx = idx + draw(st.lists(st.sampled_from(idx), min_size=1, max_size=6))  # repeats
        if kind == "gather":
            if draw(st.integers(0, 7)) == 0:
                idx = idx + [draw(st.sampled_from((size, -1, capacity + 3)))]
            form = draw(st.sampled_from(("int64", "int32", "list")))
            idx = idx if form == "list" else np.asarray(idx, dtype=form)
        ops.append((kind, idx))
    return capacity, seed, ops


# ------------------------------------------------------------------------------ bad input
def _bad_obs_range(spec: StorageSpec, obs: np.ndarray) -> np.ndarray:
    """``obs`` with one value that the stored dtype cannot hold (a dtype error where no value can be)."""
    dtype = spec.obs_dtype
    if dtype.kind == "b":
        bad, value = obs.astype(np.int64), 3  # a bool field takes 0/1 integers only
    elif dtype.kind in "iu" and dtype.itemsize < 8:
        bad, value = obs.astype(np.int64), int(np.iinfo(dtype).max) + 1
    elif dtype.kind == "i":
        bad, value = obs.astype(np.uint64), 2**63
    elif dtype.kind == "u":
        bad, value = obs.astype(np.int64), -1
    elif dtype.itemsize < 8:
        bad, value = obs.astype(np.float64), 1e300  # overflows float32 / float16
    else:
        return obs.astype(np.complex128)
    bad.reshape(-1)[-1] = value
    return bad


def _bad_action(spec: StorageSpec, act: np.ndarray) -> np.ndarray:
    if spec.action_dtype.kind in "iu":
        return act.astype(np.float64) + 0.5  # float -> integer is not a safe cast
    return act.astype(np.complex128)  # complex -> real neither


def _wider(arr: np.ndarray) -> np.ndarray:
    """The same rows with one more element along axis 1 (a scalar field gets an axis)."""
    return arr[:, None] if arr.ndim == 1 else np.concatenate([arr, arr[:, :1]], axis=1)


def _with(rows: tuple, **changes) -> tuple:
    """``rows`` (add order) with some fields replaced by ``change(value)``."""
    named = dict(zip(TRANSITION_FIELDS, rows))
    named.update({name: change(named[name]) for name, change in changes.items()})
    return tuple(named[name] for name in TRANSITION_FIELDS)


def _set(i: int, value: Any) -> Callable[[np.ndarray], np.ndarray]:
    def change(arr):
        arr = np.array(arr, dtype=np.float64)
        arr[i] = value
        return arr
    return change


#: ``(id, make(spec, rows, storage) -> call)``: one bad call each; ``rows`` are 4 valid transitions,
#: ``storage`` the filled storage under test (for its size and capacity).
BAD_CALLS: tuple[tuple[str, Callable], ...] = (
    ("nan-reward", lambda sp, r, s: lambda t: t.add(*_with(r, reward=_set(1, np.nan)))),
    ("inf-reward", lambda sp, r, s: lambda t: t.add(*_with(r, reward=_set(3, -np.inf)))),
    ("reward-overflows-float32", lambda sp, r, s: lambda t: t.add(*_with(r, reward=_set(0, 1e300)))),
    ("complex-reward", lambda sp, r, s: lambda t: t.add(*_with(r, reward=lambda a: a + 1j))),
    ("obs-wrong-shape", lambda sp, r, s: lambda t: t.add(*_with(r, obs=_wider))),
    ("next-obs-wrong-shape", lambda sp, r, s: lambda t: t.add(*_with(r, next_obs=_wider))),
    ("one-transition-without-batch-axis", lambda sp, r, s: lambda t: t.add(*(a[0] for a in r))),
    ("lengths-differ", lambda sp, r, s: lambda t: t.add(*_with(r, action=lambda a: a[:-1]))),
    ("done-not-a-flag", lambda sp, r, s: lambda t: t.add(*_with(r, done=lambda d: np.array([0, 2, 1, 0])))),
    ("steps-below-one", lambda sp, r, s: lambda t: t.add(*_with(r, steps=lambda k: np.array([1, 0, 2, 1])))),
    ("float-steps", lambda sp, r, s: lambda t: t.add(*_with(r, steps=lambda k: np.ones(4, np.float32)))),
    ("string-obs", lambda sp, r, s: lambda t: t.add(*_with(r, obs=lambda o: np.full(o.shape, "a")))),
    ("ragged-obs", lambda sp, r, s: lambda t: t.add(*_with(r, obs=lambda o: [o[0], o[1, ..., :-1], o[2], o[3]]))),
    ("action-unsafe-cast", lambda sp, r, s: lambda t: t.add(*_with(r, action=lambda a: _bad_action(sp, a)))),
    ("obs-out-of-range", lambda sp, r, s: lambda t: t.add(*_with(r, obs=lambda o: _bad_obs_range(sp, o)))),
    ("nan-reward-in-a-wrapping-batch", lambda sp, r, s: lambda t: t.add(*_wrapping_nan(sp, s.capacity))),
    ("gather-index-at-size", lambda sp, r, s: lambda t: t.gather([0, s.size])),
    ("gather-negative-index", lambda sp, r, s: lambda t: t.gather([1, -1])),
    ("gather-2d-indices", lambda sp, r, s: lambda t: t.gather(np.zeros((2, 2), np.int64))),
    ("gather-float-indices", lambda sp, r, s: lambda t: t.gather(np.array([0.0, 1.0]))),
    ("gather-bool-indices", lambda sp, r, s: lambda t: t.gather(np.array([True, False]))),
    ("unknown-field", lambda sp, r, s: lambda t: t.field("priority")),
)


def _wrapping_nan(spec: StorageSpec, capacity: int) -> tuple:
    """``capacity + 2`` valid rows (they would wrap) but the last reward is NaN."""
    rows = transitions(np.random.default_rng(capacity), spec, capacity + 2)
    return _with(rows, reward=_set(capacity + 1, np.nan))


#: The private hooks the public storage contract replaced, and their public names.
_OLD_HOOKS = {"_allocate": "allocate", "_store": "store", "_take": "gather_into"}

#: ``(id, capacity, batch sizes added)``: the states the bad calls are made in.
_STATES = (("partly-filled", 11, (5, 4)), ("wrapped", 7, (5, 4)))


class StorageConformance:
    """Subclass and implement :meth:`make_storage` to run the whole suite on a Data Storage.

    Attributes:
        device: the ``.device`` the storage must report, e.g. ``"cuda:0"``; ``None``: any non-empty string.
        seed: seeds the transitions of the fixed-sequence tests.
    """

    device: str | None = None
    seed: int = 0

    def make_storage(self, spec: StorageSpec, capacity: int) -> DataStorage:
        """A new, empty storage of the implementation under test."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement make_storage(self, spec, capacity). Fix: return your "
            "storage, e.g. MyBackend().make_storage(spec, capacity, 'mydev:0').")

    # -- helpers ------------------------------------------------------------------
    def _pair(self, spec: StorageSpec, capacity: int) -> tuple[DataStorage, DataStorage]:
        """``(storage under test, host reference)``, both new."""
        storage = self.make_storage(spec, capacity)
        assert isinstance(storage, DataStorage), (
            f"{type(self).__name__}.make_storage returned {type(storage).__name__}; expected a subclass of "
            "pearl_core.replay.storage.DataStorage (replay managers accept nothing else)")
        assert (storage.spec, storage.capacity) == (spec, capacity), (
            f"make_storage({spec}, {capacity}) returned a storage of spec {storage.spec} and capacity "
            f"{storage.capacity}")
        return storage, DataStorage(spec, capacity)

    def _add(self, storage, ref, rows, what: str) -> None:
        got, want, exc = run_both(storage, ref, what, lambda s: s.add(*rows))
        assert exc is None, f"suite error: the host storage refused the suite's valid rows ({what}): {exc}"
        if want is not None:
            assert isinstance(got, np.ndarray) and got.dtype == np.int64, (
                f"{what}: returned {short(got)}; expected the int64 slots written")
            np.testing.assert_array_equal(got, want, err_msg=f"{what}: returned other slots than the host storage")
        assert_same_state(storage, ref, what)

    def _run(self, spec: StorageSpec, capacity: int, seed: int, ops) -> None:
        storage, ref = self._pair(spec, capacity)
        rng = np.random.default_rng(seed)
        kept = []  # (batch returned earlier, a copy of what it held): later adds must not change it
        for step, (kind, arg) in enumerate(ops):
            call = {"add": "add of {} rows", "gather": "gather({})", "take": "gather_into({})",
                    "take_out": "gather_into({}, out)"}[kind].format(short(arg))
            what = f"step {step}: {call} at size {ref.size}, cursor {ref.cursor} (capacity {capacity})"
            if kind == "add":
                self._add(storage, ref, transitions(rng, spec, arg), what)
                continue
            if kind == "gather":
                got, want, _ = run_both(storage, ref, what, lambda s: s.gather(arg))
            elif kind == "take":
                idx = np.asarray(arg, dtype=np.int64)
                got, want, _ = run_both(storage, ref, what, lambda s: s.gather_into(idx))
            else:
                got, want = self._gather_out(storage, ref, spec, np.asarray(arg, dtype=np.int64), what)
            if want is not None:
                assert_same_batch(got, want, what)
                kept.append((what, got, {name: getattr(want, name).copy() for name in TRANSITION_FIELDS}))
            assert_same_state(storage, ref, what)
        for what, got, copy in kept:
            for name in TRANSITION_FIELDS:
                assert same_rows(getattr(got, name), copy[name]).all(), (
                    f"the batch of {what} changed later: batch.{name} must be a copy, not a view of the storage")

    def _gather_out(self, storage, ref, spec, idx, what, strided=False):
        """``gather_into(idx, out)`` on both, each into its own host arrays; checks that they were filled in place."""
        outs = {"got": out_arrays(spec, len(idx), strided), "want": out_arrays(spec, len(idx), strided)}
        got, want, _ = run_both(storage, ref, what,
                                lambda s: s.gather_into(idx, outs["got" if s is storage else "want"]))
        if want is None:
            return None, None
        for name in TRANSITION_FIELDS:
            assert getattr(got, name) is outs["got"][name], (
                f"{what}: gather_into(idx, out) returned a new array for {name}; expected the caller's out[{name!r}] "
                "(rows written into it, and the returned batch holding it)")
            np.testing.assert_array_equal(outs["got"][name], outs["want"][name],
                                          err_msg=f"{what}: the rows written into out[{name!r}] differ")
        np.testing.assert_array_equal(outs["got"]["weights"], np.full(len(idx), 7.0, np.float32),
                                      err_msg=f"{what}: gather_into(idx, out) wrote into out['weights']")
        return got, want

    def _filled(self, spec: StorageSpec, capacity: int, sizes) -> tuple[DataStorage, DataStorage]:
        storage, ref = self._pair(spec, capacity)
        rng = np.random.default_rng(self.seed)
        for n in sizes:
            self._add(storage, ref, transitions(rng, spec, n), f"adding {n} rows (capacity {capacity})")
        return storage, ref

    # -- the contract -----------------------------------------------------------------
    @pytest.mark.parametrize("spec_name", sorted(SPECS))
    @pytest.mark.parametrize("capacity", [1, 5])
    def test_new_storage_is_empty(self, spec_name, capacity):
        spec = SPECS[spec_name]
        storage, ref = self._pair(spec, capacity)
        assert (storage.size, storage.cursor, len(storage)) == (0, 0, 0), (
            f"a new storage has (size, cursor, len) = {(storage.size, storage.cursor, len(storage))}; "
            "expected (0, 0, 0)")
        for name in TRANSITION_FIELDS:
            check_field(storage, name, "a new storage")
        empty = np.empty(0, np.int64)
        for what, call in (("gather([])", lambda s: s.gather(empty)),
                           ("gather_into([])", lambda s: s.gather_into(empty))):
            got, want, _ = run_both(storage, ref, f"{what} on a new storage", call)
            assert_same_batch(got, want, f"{what} on a new storage")
        _, _, exc = run_both(storage, ref, "gather([0]) on a new storage", lambda s: s.gather([0]))
        assert exc is not None, "the host storage accepted gather([0]) on an empty storage"
        self._add(storage, ref, transitions(np.random.default_rng(0), spec, 0), "add of 0 rows to a new storage")

    @pytest.mark.parametrize("spec_name", sorted(SPECS))
    def test_fixed_sequence_wraps_around(self, spec_name):
        """Every batch-size class in turn, with the cursor at 0, mid-ring and at the end."""
        capacity, ops, size = 7, [], 0
        for n in (0, 1, 3, 7, 5, 16, 1, 6, 0, 20, 2):
            ops.append(("add", n))
            size = min(capacity, size + n)
            everything = list(range(size))[::-1] + list(range(size))[::2]  # every slot, reversed, repeats
            ops += [("gather", np.asarray(everything, np.int64)), ("take_out", everything)]
        self._run(SPECS[spec_name], capacity, self.seed, ops)

    @pytest.mark.parametrize("spec_name", sorted(SPECS))
    def test_random_programs_match_the_host_storage(self, spec_name):
        @_SETTINGS
        @given(storage_programs())
        def run(program):
            self._run(SPECS[spec_name], *program)

        run()

    @pytest.mark.parametrize("spec_name", sorted(SPECS))
    def test_large_batches_match_the_host_storage(self, spec_name):
        """Batches big enough to take a device storage's chunked copies; one larger than the ring."""
        spec, capacity = SPECS[spec_name], 3001
        storage, ref = self._filled(spec, capacity, (1000, 2500, 4001, 1))
        idx = np.random.default_rng(self.seed).integers(0, capacity, 5000)
        got, want, _ = run_both(storage, ref, "gather of 5000 rows", lambda s: s.gather(idx))
        assert_same_batch(got, want, "gather of 5000 rows")
        got, want = self._gather_out(storage, ref, spec, idx, "gather_into of 5000 rows into out arrays")
        assert_same_batch(got, want, "gather_into of 5000 rows into out arrays")

    @pytest.mark.parametrize("spec_name", sorted(SPECS))
    @pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
    def test_gather_into_fills_the_callers_out_arrays(self, spec_name, strided):
        spec = SPECS[spec_name]
        storage, ref = self._filled(spec, 9, (6, 7))  # wrapped: size 9, cursor 4
        for idx in ([8, 0, 3, 3, 8, 1], [4], []):
            idx = np.asarray(idx, np.int64)
            what = f"gather_into({idx.tolist()}, out) into {'strided' if strided else 'contiguous'} out arrays"
            got, want = self._gather_out(storage, ref, spec, idx, what, strided)
            assert_same_batch(got, want, what)
        assert_same_state(storage, ref, "after gather_into into out arrays")

    def test_implements_the_public_contract(self):
        """``allocate`` / ``store`` / ``gather_into`` / ``field`` are the hooks a storage implements; nothing
        calls the private names they replaced, so a class that still defines one runs the host code instead."""
        storage, _ = self._pair(SPECS["vector-f32-discrete"], 4)
        cls = type(storage)
        stale = sorted(f"{k.__name__}.{old}" for k in cls.__mro__ for old in _OLD_HOOKS if callable(vars(k).get(old)))
        assert not stale, (
            f"{cls.__name__} defines {stale}, the private storage hooks that the public contract replaced; "
            "nothing calls them. Fix: rename them " + ", ".join(f"{o} -> {n}" for o, n in _OLD_HOOKS.items())
            + " (see DataStorage's docstring, 'What a device-resident storage implements')")

    @pytest.mark.parametrize("spec_name", sorted(SPECS))
    def test_store_writes_the_given_slots_and_leaves_size_and_cursor(self, spec_name):
        """``store(slots, rows)`` called as ``add`` calls it (validated rows in the stored dtypes, ring-ordered
        slots, a run that wraps past the end, one row, none): the rows land where the host's do, and ``size``
        and ``cursor`` stay where they were (``add`` moves them, not ``store``)."""
        spec, capacity = SPECS[spec_name], 9
        storage, ref = self._filled(spec, capacity, (6, 7))  # full: size 9, cursor 4
        layout, rng = spec.fields(), np.random.default_rng(self.seed + 2)
        for start, n in ((7, 4), (2, 1), (5, 0)):
            slots = (start + np.arange(n, dtype=np.int64)) % capacity
            rows = {name: np.asarray(v).astype(layout[name][1]) for name, v in zip(TRANSITION_FIELDS,
                                                                                    transitions(rng, spec, n))}
            what = f"store({slots.tolist()}, rows) at size {ref.size}, cursor {ref.cursor} (capacity {capacity})"
            _, _, exc = run_both(storage, ref, what, lambda s: s.store(slots, {k: v.copy() for k, v in rows.items()}))
            assert exc is None, f"suite error: the host storage refused {what}: {exc}"
            assert_same_state(storage, ref, what)

    @pytest.mark.parametrize("spec_name", sorted(SPECS))
    def test_field_is_a_read_only_host_array(self, spec_name):
        storage, ref = self._filled(SPECS[spec_name], 6, (4,))
        for name in TRANSITION_FIELDS:
            f = check_field(storage, name, "after adding 4 rows")
            with pytest.raises(ValueError):
                f[0] = f[1]  # read-only: numpy refuses the write
        assert_same_state(storage, ref, "after trying to write into field() arrays")

    @pytest.mark.parametrize("spec_name", sorted(SPECS))
    @pytest.mark.parametrize("case", BAD_CALLS, ids=lambda c: c[0])
    def test_bad_input_raises_like_the_host_and_changes_nothing(self, spec_name, case):
        name, make = case
        spec = SPECS[spec_name]
        for state, capacity, sizes in _STATES:
            storage, ref = self._filled(spec, capacity, sizes)
            rows = transitions(np.random.default_rng(self.seed + 1), spec, 4)
            what = f"{name} on a {state} storage (capacity {capacity}, size {ref.size}, cursor {ref.cursor})"
            _, _, exc = run_both(storage, ref, what, make(spec, rows, storage))
            assert exc is not None, f"suite error: the host storage accepted {what} for spec {spec}"
            assert_same_state(storage, ref, f"after {what}")

    @pytest.mark.parametrize("spec,capacity", [(SPECS["vector-f32-discrete"], 0), (SPECS["vector-f32-discrete"], -3),
                                               (SPECS["vector-f32-discrete"], 2.5), ("not a spec", 4)],
                             ids=["capacity-0", "capacity-negative", "capacity-float", "spec-not-a-StorageSpec"])
    def test_bad_construction_raises_like_the_host(self, spec, capacity):
        with pytest.raises(Exception) as host:
            DataStorage(spec, capacity)
        try:
            storage = self.make_storage(spec, capacity)
        except Exception as exc:  # noqa: BLE001 - compared with the host's error just below
            assert isinstance(exc, host.type), (
                f"make_storage({spec!r}, {capacity!r}) raised {type(exc).__name__}: {exc}; expected "
                f"{host.type.__name__}, which DataStorage raises ({host.value})")
        else:
            pytest.fail(f"make_storage({spec!r}, {capacity!r}) returned {short(storage)}; expected "
                        f"{host.type.__name__}, which DataStorage raises ({host.value})")

    def test_reports_its_device(self):
        storage, _ = self._pair(SPECS["vector-f32-discrete"], 4)
        if self.device is None:
            assert isinstance(storage.device, str) and storage.device, (
                f".device is {storage.device!r}; expected a non-empty device string (set "
                f"{type(self).__name__}.device to the one expected)")
        else:
            assert storage.device == self.device, (
                f".device is {storage.device!r}; expected {self.device!r} ({type(self).__name__}.device)")

    @pytest.mark.parametrize("spec_name", sorted(SPECS))
    def test_device_face_gathers_like_the_host(self, spec_name):
        """A storage that offers the device face (:class:`~pearl_core.replay.device.DeviceStorage`):
        ``gather_device`` returns the host gather's rows as tensors on its device, in the stored dtypes,
        and fills the caller's ``out`` tensors. Skipped for a host-only storage."""
        from pearl_core.testing.device import check_storage_device_face

        spec = SPECS[spec_name]
        storage, host = self._pair(spec, 13)
        check_storage_device_face(storage, host, lambda rows, what: self._add(storage, host, rows, what),
                                  lambda rng, n: transitions(rng, spec, n), assert_same_batch, self.seed)

    @pytest.mark.parametrize("spec_name", sorted(SPECS))
    @pytest.mark.parametrize("manager", ["uniform", "prioritized"])
    def test_replay_samples_like_over_the_host_storage(self, spec_name, manager):
        spec, capacity = SPECS[spec_name], 13
        storage, host = self._pair(spec, capacity)

        def replay(s):
            if manager == "uniform":
                return UniformReplay(s, rng=self.seed + 5)
            return PrioritizedReplay(s, ReferenceSumTree(capacity, 4), beta_steps=10, rng=self.seed + 5)

        got_replay, want_replay = replay(storage), replay(host)
        rng = np.random.default_rng(self.seed)
        for step, n in enumerate((5, 13, 1, 20, 0, 7, 3)):
            rows = transitions(rng, spec, n)
            slots = got_replay.add(*rows)
            np.testing.assert_array_equal(slots, want_replay.add(*rows), err_msg=f"round {step}: add's slots")
            for out in (None, "out"):
                what = f"{manager} replay, round {step}, sample(16{', out' if out else ''})"
                outs = [out_arrays(spec, 16), out_arrays(spec, 16)] if out else [None, None]
                got, want = got_replay.sample(16, outs[0]), want_replay.sample(16, outs[1])
                np.testing.assert_array_equal(got.indices, want.indices,
                                              err_msg=f"{what}: sampled other slots than over a host storage")
                np.testing.assert_array_equal(got.weights, want.weights, err_msg=f"{what}: other weights")
                assert_same_batch(got.batch, want.batch, what)
                td = rng.standard_normal(16)
                got_replay.update_priorities(got.indices, td)
                want_replay.update_priorities(want.indices, td)
            assert_same_state(storage, host, f"{manager} replay, round {step}")
