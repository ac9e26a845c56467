"""The comparisons of the Data Storage conformance suite (:mod:`pearl_core.testing.storage`): a call made
on the storage under test and on the host reference, and the checks of what each returned or changed."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from pearl_core.replay.storage import TRANSITION_FIELDS, Batch, DataStorage, StorageSpec

__all__ = ["assert_same_batch", "assert_same_state", "check_field", "out_arrays", "run_both", "same_rows", "short"]


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 120 else text[:117] + "..."


def assert_same_batch(got: Any, want: Batch, what: str) -> None:
    """Every field: a host ``ndarray`` of the reference's dtype and shape, equal values and bit patterns."""
    assert isinstance(got, Batch), f"{what}: returned {type(got).__name__}; expected a pearl_core Batch"
    for name in TRANSITION_FIELDS:
        x, y = getattr(got, name), getattr(want, name)
        assert isinstance(x, np.ndarray), (
            f"{what}: batch.{name} is a {type(x).__name__}; expected a host numpy array")
        assert (x.dtype, x.shape) == (y.dtype, y.shape), (
            f"{what}: batch.{name} has dtype {x.dtype} and shape {x.shape}; the host storage's has "
            f"dtype {y.dtype} and shape {y.shape}")
        np.testing.assert_array_equal(x, y, err_msg=f"{what}: batch.{name} differs from the host storage's")
        same_bits = np.array_equal(np.ascontiguousarray(x).view(np.uint8), np.ascontiguousarray(y).view(np.uint8))
        assert same_bits, f"{what}: batch.{name} has other bit patterns than the host storage's (-0.0? a NaN payload?)"


def check_field(storage: DataStorage, name: str, what: str) -> np.ndarray:
    """``storage.field(name)``: a read-only host array of all ``capacity`` rows in the stored dtype."""
    shape, dtype = storage.spec.fields()[name]
    f = storage.field(name)
    assert isinstance(f, np.ndarray), f"{what}: field({name!r}) is a {type(f).__name__}; expected a host numpy array"
    assert (f.shape, f.dtype) == ((storage.capacity, *shape), dtype), (
        f"{what}: field({name!r}) has shape {f.shape} and dtype {f.dtype}; expected "
        f"{(storage.capacity, *shape)} and {dtype} (all capacity rows, the stored dtype)")
    assert not f.flags.writeable, f"{what}: field({name!r}) is writeable; expected a read-only array"
    return f


def assert_same_state(storage: DataStorage, ref: DataStorage, what: str) -> None:
    """``size``, ``cursor``, ``len`` and the filled rows of every field equal the reference's."""
    got = (storage.size, storage.cursor, len(storage))
    want = (ref.size, ref.cursor, len(ref))
    assert got == want, f"{what}: (size, cursor, len) = {got}; the host storage has {want}"
    for name in TRANSITION_FIELDS:
        f = check_field(storage, name, what)
        np.testing.assert_array_equal(f[:ref.size], ref.field(name)[:ref.size],
                                      err_msg=f"{what}: the filled rows of field({name!r}) differ from the host's")


def _snapshot(storage: DataStorage) -> tuple:
    return storage.size, storage.cursor, {name: np.array(storage.field(name)) for name in TRANSITION_FIELDS}


def _assert_unchanged(storage: DataStorage, before: tuple, what: str) -> None:
    size, cursor, fields = before
    assert (storage.size, storage.cursor) == (size, cursor), (
        f"{what}: the call raised but changed (size, cursor) from {(size, cursor)} to "
        f"{(storage.size, storage.cursor)}; bad input must change nothing")
    for name in TRANSITION_FIELDS:
        after = np.asarray(storage.field(name))
        changed = np.flatnonzero(~same_rows(after, fields[name]))
        assert changed.size == 0, (
            f"{what}: the call raised but changed field({name!r}) at slots {changed.tolist()}; "
            "bad input must change nothing (validate every field before writing any)")


def same_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row: bit-identical (NaN-safe)."""
    n = a.shape[0]
    if n == 0:
        return np.ones(0, bool)
    a, b = (np.ascontiguousarray(x).reshape(n, -1).view(np.uint8) for x in (a, b))
    return (a == b).all(axis=1)


def run_both(storage: DataStorage, ref: DataStorage, what: str, call: Callable[[DataStorage], Any]):
    """``call`` on the reference, then on ``storage``: ``(got, want, host exception or None)``.

    Where the reference raises, ``storage`` must raise the same class and change nothing;
    where it returns, ``storage`` must return too.
    """
    try:
        want = call(ref)
    except Exception as exc:  # noqa: BLE001 - the reference's error is the one expected
        before = _snapshot(storage)
        try:
            got = call(storage)
        except Exception as got_exc:
            if not isinstance(got_exc, type(exc)):
                raise AssertionError(
                    f"{what}: raised {type(got_exc).__name__}: {got_exc}; expected {type(exc).__name__}, "
                    f"which the host storage raises ({exc})") from got_exc
            _assert_unchanged(storage, before, what)
            return None, None, exc
        raise AssertionError(f"{what}: returned {short(got)}; expected {type(exc).__name__}, which the host "
                             f"storage raises ({exc})") from None
    try:
        got = call(storage)
    except Exception as exc:
        raise AssertionError(f"{what}: raised {type(exc).__name__}: {exc}; the host storage accepts "
                             "the call") from exc
    return got, want, None


def out_arrays(spec: StorageSpec, n: int, strided: bool = False) -> dict[str, np.ndarray]:
    """A learner's batch slot: one host array per field (stored dtypes) and ``"weights"``."""
    step = 2 if strided else 1
    out = {name: np.zeros((n * step, *shape), dtype)[::step] for name, (shape, dtype) in spec.fields().items()}
    out["weights"] = np.full(n, 7.0, np.float32)
    return out
