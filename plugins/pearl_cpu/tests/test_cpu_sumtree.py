"""Quick checks of the native CPU sum tree against the reference oracle.

(The shared conformance kit lives in pearl_core.testing; these tests focus on
what is specific to the C++ tree: layouts for any fanout/capacity, the
threaded paths, dtype/stride handling in the bindings, and bad input leaving
the tree untouched.)
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest

from pearl_core.errors import EmptyTreeError, InvalidDTypeError, InvalidIndexError, InvalidValueError
from pearl_core.sumtree import MASS_DRIFT_RTOL, SumTree
from pearl_core.testing.reference import ReferenceSumTree
from pearl_cpu.sumtree import CpuSumTree

NEVER = 1 << 62


def make(capacity, fanout=16, threads=1, parallel=None):
    """A native tree; parallel=True forces the threaded paths even for tiny batches."""
    tree = CpuSumTree(capacity, fanout, threads=threads)
    if parallel is True:
        tree._impl._set_parallel_thresholds(0, 0, 0, contention_guard=False)
    elif parallel is False:
        tree._impl._set_parallel_thresholds(NEVER, NEVER, NEVER)
    return tree


def assert_same(tree, ref, rng, masses=64):
    cap = ref.capacity
    np.testing.assert_array_equal(tree.get(np.arange(cap)), ref.get(np.arange(cap)))
    np.testing.assert_array_equal(tree.priorities, ref.priorities)
    assert tree.total() == pytest.approx(ref.total(), rel=1e-12, abs=0.0)
    assert tree.check_consistency()
    if ref.total() > 0:
        x = rng.random(masses) * ref.total()
        np.testing.assert_array_equal(tree.sample(x), ref.sample(x))


def random_batch(rng, cap, n, zeros=0.3):
    idx = rng.integers(0, cap, n)
    prio = rng.random(n) * (rng.random(n) >= zeros)
    return idx, prio


# ----------------------------------------------------------------- semantics
@pytest.mark.parametrize("fanout", [2, 3, 4, 5, 7, 8, 9, 16, 17, 24, 32, 33, 64, 65, 100])
@pytest.mark.parametrize("capacity", [1, 2, 3, 7, 16, 100, 1000, 4099])
def test_random_ops_match_reference(capacity, fanout):
    rng = np.random.default_rng(capacity * 131 + fanout)
    tree, ref = make(capacity, fanout), ReferenceSumTree(capacity, fanout)
    for _ in range(6):
        idx, prio = random_batch(rng, capacity, int(rng.integers(1, 2 * capacity + 3)))
        tree.update(idx, prio)
        ref.update(idx, prio)
        assert_same(tree, ref, rng)


@pytest.mark.parametrize("fanout", [2, 3, 5, 7, 16])
def test_exact_boundaries_match_reference(fanout):
    # Integer priorities: every prefix sum is exact, so the tree must agree
    # with the oracle exactly at, just below and just above every boundary.
    rng = np.random.default_rng(fanout)
    cap = 300
    tree, ref = make(cap, fanout), ReferenceSumTree(cap, fanout)
    prio = rng.integers(0, 4, cap).astype(np.float64)
    prio[-7:] = 0.0  # trailing zeros: clamping must skip them
    tree.update(np.arange(cap), prio)
    ref.update(np.arange(cap), prio)
    cum = ref.prefix_sums()
    total = ref.total()
    x = np.concatenate([cum, cum - 0.5, np.nextafter(cum, -np.inf), [0.0, total, total * (1 + MASS_DRIFT_RTOL)]])
    x = x[(x >= 0) & (x <= total * (1 + MASS_DRIFT_RTOL))]
    got = tree.sample(x)
    np.testing.assert_array_equal(got, ref.sample(x))
    assert (prio[got] > 0).all()
    last_nonzero = int(np.flatnonzero(prio)[-1])
    assert tree.sample([total])[0] == last_nonzero
    assert tree.sample([total * (1 + MASS_DRIFT_RTOL)])[0] == last_nonzero
    assert tree.sample([0.0])[0] == int(np.flatnonzero(prio)[0])


def test_duplicates_last_wins():
    for threads, parallel in [(1, False), (2, True)]:
        tree = make(1000, 8, threads=threads, parallel=parallel)
        idx = np.array([5, 9, 5, 700, 5, 9, 999, 700])
        prio = np.array([1.0, 2.0, 3.0, 4.0, 7.0, 0.0, 6.0, 0.5])
        tree.update(idx, prio)
        np.testing.assert_array_equal(tree.get([5, 9, 700, 999]), [7.0, 0.0, 0.5, 6.0])
        assert tree.total() == 7.0 + 0.5 + 6.0
        assert tree.check_consistency()


@pytest.mark.parametrize("fanout", [2, 8, 16, 32])
def test_sparse_batches_with_duplicates_in_one_leaf_group_match_reference(fanout):
    # Batches much smaller than the leaf level take the path that writes each leaf and recomputes
    # its group at once (power-of-two fanouts): repeated indices and different leaves of one group,
    # interleaved in the batch, must leave the same tree as the reference, serially and threaded.
    cap = 70_000
    rng = np.random.default_rng(fanout)
    ref = ReferenceSumTree(cap, fanout)
    trees = [make(cap, fanout, threads=1), make(cap, fanout, threads=2, parallel=True)]
    for n in (3, 64, 256, 1500):
        base = rng.integers(0, cap // fanout, 24) * fanout
        idx = np.concatenate([base + rng.integers(0, fanout, 24), rng.integers(0, cap, n)])
        idx = rng.permutation(np.concatenate([idx, idx[: n // 3 + 1]]))[:n]
        prio = rng.random(n) * (rng.random(n) > 0.2)
        ref.update(idx, prio)
        for tree in trees:
            tree.update(idx, prio)
            assert_same(tree, ref, rng)
    assert trees[1]._impl._parallel_stats()["parallel_calls"] > 0


def test_capacity_one_and_zero_leaves_never_sampled():
    tree = make(1, 16)
    with pytest.raises(EmptyTreeError):
        tree.sample([0.0])
    tree.update([0], [2.5])
    np.testing.assert_array_equal(tree.sample([0.0, 1.0, 2.5]), [0, 0, 0])
    tree = make(50, 4)
    tree.update([0, 17, 49], [0.0, 1.0, 0.0])
    rng = np.random.default_rng(0)
    assert (tree.sample(rng.random(500) * tree.total()) == 17).all()
    assert tree.sample([1.0])[0] == 17  # at the total: the last non-zero leaf


def test_drift_clamp_limit():
    tree = make(10, 3)
    tree.update(np.arange(10), np.arange(10.0) + 1)
    total = tree.total()
    assert tree.sample([total * (1 + MASS_DRIFT_RTOL)])[0] == 9
    with pytest.raises(InvalidValueError, match=r"masses\[1\]"):
        tree.sample([0.0, total * (1 + 2 * MASS_DRIFT_RTOL)])


@pytest.mark.parametrize("fanout", [2, 3, 4, 5, 7, 8, 16, 32, 64])
def test_threads_equal_serial_bit_for_bit(fanout):
    rng = np.random.default_rng(fanout)
    cap = 20_011
    serial = make(cap, fanout, threads=1)
    threaded = make(cap, fanout, threads=2, parallel=True)
    other = make(cap, fanout, threads=3, parallel=True)
    for n in (1, 5, 100, 3000, 50_000):
        idx, prio = random_batch(rng, cap, n)
        for t in (serial, threaded, other):
            t.update(idx, prio)
        assert serial.total() == threaded.total() == other.total()
        np.testing.assert_array_equal(serial.priorities, threaded.priorities)
        assert threaded.check_consistency() and other.check_consistency()
        if serial.total() == 0:
            continue
        x = rng.random(5000) * serial.total()
        expect = serial.sample(x)
        np.testing.assert_array_equal(threaded.sample(x), expect)
        np.testing.assert_array_equal(other.sample(x), expect)
        np.testing.assert_array_equal(threaded.get(idx), serial.get(idx))
    for t in (threaded, other):  # the threaded paths really ran
        assert t._impl._parallel_stats()["parallel_calls"] > 0
    assert serial._impl._parallel_stats()["parallel_calls"] == 0


@pytest.mark.parametrize("fanout", [2, 3, 4, 5, 8, 16, 24, 32, 64, 65])
def test_sample_kernels_agree_across_instruction_sets(fanout):
    tree = make(3001, fanout)
    rng = np.random.default_rng(fanout)
    tree.update(*random_batch(rng, 3001, 5000))
    total = tree.total()
    x = np.concatenate([rng.random(4000) * total, [0.0, total, total * (1 + MASS_DRIFT_RTOL)]])
    assert tree._impl._set_isa("baseline") and tree._impl.isa == "baseline"
    expect = tree.sample(x)
    if not tree._impl._set_isa("avx2"):
        pytest.skip("CPU or build without AVX2")
    assert tree._impl.isa == "avx2"
    np.testing.assert_array_equal(tree.sample(x), expect)
    assert not tree._impl._set_isa("nonsense")


def test_update_order_independent_state():
    # Node values are a pure function of the leaves: the same leaves reached
    # through different histories give bit-identical totals.
    rng = np.random.default_rng(3)
    cap = 5000
    a, b = make(cap, 16), make(cap, 16)
    final = rng.random(cap)
    a.update(np.arange(cap), final)
    for _ in range(5):
        idx, prio = random_batch(rng, cap, 3000)
        b.update(idx, prio)
    b.update(rng.permutation(cap), np.zeros(cap))
    b.update(np.arange(cap)[::-1], final[::-1])
    assert a.total() == b.total()
    x = rng.random(1000) * a.total()
    np.testing.assert_array_equal(a.sample(x), b.sample(x))


# ---------------------------------------------------------- dtypes and shapes
INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
REAL_DTYPES = [np.float16, np.float32, np.float64, np.longdouble, np.int8, np.int64, np.uint16, np.uint64]


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_index_dtypes(dtype):
    tree, ref = make(100, 4), ReferenceSumTree(100, 4)
    idx = np.array([1, 50, 99, 50], dtype=dtype)
    tree.update(idx, [1.0, 2.0, 3.0, 4.0])
    ref.update(idx, [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(tree.get(idx), ref.get(idx))
    assert tree.get(idx).dtype == np.float64


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_real_priority_and_mass_dtypes(dtype):
    tree, ref = make(100, 4), ReferenceSumTree(100, 4)
    prio = np.array([1, 2, 3, 100], dtype=dtype)
    tree.update([3, 4, 5, 6], prio)
    ref.update([3, 4, 5, 6], prio)
    np.testing.assert_array_equal(tree.priorities, ref.priorities)
    x = np.array([0, 1, 2, 5, 50], dtype=dtype)
    np.testing.assert_array_equal(tree.sample(x), ref.sample(x))
    assert tree.sample(x).dtype == np.int64


def test_lists_strided_and_byteswapped_inputs():
    tree, ref = make(64, 8), ReferenceSumTree(64, 8)
    base_idx = (np.arange(128) // 2)[::2]  # non-contiguous view
    prio = np.linspace(0, 5, 128)[::2]
    tree.update(base_idx, prio)
    ref.update(base_idx, prio)
    np.testing.assert_array_equal(tree.priorities, ref.priorities)
    tree.update([1, 2, 3], [9, 8.5, 7])  # python lists (int and mixed)
    ref.update([1, 2, 3], [9, 8.5, 7])
    big_idx = np.array([10, 20], dtype=">i4")
    big_prio = np.array([1.5, 2.5], dtype=">f8")
    tree.update(big_idx, big_prio)
    ref.update(big_idx, big_prio)
    np.testing.assert_array_equal(tree.priorities, ref.priorities)
    x = (np.linspace(0, ref.total(), 40)[::-1])[::3]
    np.testing.assert_array_equal(tree.sample(x), ref.sample(x))
    np.testing.assert_array_equal(tree.get(np.array([[1, 2], [3, 4]])[:, 0]), ref.get([1, 3]))


def test_empty_batches():
    tree = make(10, 4)
    tree.update([], [])
    tree.update(np.empty(0, np.int64), np.empty(0))
    assert tree.total() == 0.0
    out = tree.get([])
    assert out.dtype == np.float64 and out.shape == (0,)
    with pytest.raises(EmptyTreeError):
        tree.sample([])  # as the contract: an empty tree cannot sample, even nothing
    tree.update([1], [1.0])
    out = tree.sample(np.empty(0))
    assert out.dtype == np.int64 and out.shape == (0,)


def test_sumtree_api_and_attributes():
    tree = CpuSumTree(1000, 8, threads=2)
    assert isinstance(tree, SumTree)
    assert (tree.capacity, tree.fanout, tree.threads) == (1000, 8, 2)
    tree.threads = 1
    assert tree.threads == 1
    tree.set_threads(None)
    assert tree.threads == (os.cpu_count() or 1)
    assert CpuSumTree(10).fanout == 16
    assert "CpuSumTree(capacity=1000, fanout=8" in repr(tree)
    assert isinstance(tree.total(), float)
    # the class-level methods (used when called unbound) agree with the fast path
    tree.update([1, 2], [3.0, 4.0])
    assert CpuSumTree.total(tree) == 7.0
    np.testing.assert_array_equal(CpuSumTree.get(tree, [2]), [4.0])
    np.testing.assert_array_equal(CpuSumTree.sample(tree, [3.5]), [2])
    CpuSumTree.update(tree, [1], [0.0])
    assert tree.total() == 4.0


def test_subclass_overrides_are_not_shadowed():
    calls = []

    class Logged(CpuSumTree):
        def update(self, indices, priorities):
            calls.append(len(indices))
            super().update(indices, priorities)

    tree = Logged(10, 4, threads=1)
    tree.update([1, 2], [1.0, 2.0])
    assert calls == [2] and tree.total() == 3.0


# ------------------------------------------------------------------ bad input
def filled(threads=1):
    tree = make(50, 3, threads=threads, parallel=True if threads > 1 else None)
    tree.update(np.arange(50), np.arange(50) % 7 + 0.25)
    return tree


def snapshot(tree):
    return tree.priorities.copy(), tree.total()


BAD_UPDATES = [
    (np.zeros((2, 2), np.int64), np.ones(4), InvalidValueError, "1-D"),
    (np.int64(3), 1.0, InvalidValueError, "1-D"),
    (np.array([1.0, 2.0]), [1.0, 1.0], InvalidDTypeError, "integer"),
    (np.array([True, False]), [1.0, 1.0], InvalidDTypeError, "integer"),
    (np.array([1, None], dtype=object), [1.0, 1.0], InvalidDTypeError, "integer"),
    (np.array([], dtype=object), [], InvalidDTypeError, "integers"),
    ([0, 1, -1, 2], [1.0] * 4, InvalidIndexError, r"indices\[2\] = -1"),
    ([0, 50], [1.0, 1.0], InvalidIndexError, r"indices\[1\] = 50"),
    (np.array([3, 2**63 + 5], dtype=np.uint64), [1.0, 1.0], InvalidIndexError, r"indices\[1\]"),
    ([0, 1], [1.0], InvalidValueError, "differ in length"),
    ([0, 1], np.ones((2, 1)), InvalidValueError, "1-D"),
    ([0, 1, 2], [1.0, np.nan, 1.0], InvalidValueError, r"priorities\[1\] = nan"),
    ([0, 1, 2], [1.0, 1.0, -0.5], InvalidValueError, r"priorities\[2\] = -0.5"),
    ([0, 1, 2], [np.inf, 1.0, 1.0], InvalidValueError, r"priorities\[0\] = inf"),
    ([0, 1], np.array([1 + 0j, 2 + 0j]), InvalidDTypeError, "real"),
    ([0, 1], np.array([True, True]), InvalidDTypeError, "real"),
    ([0, 1], np.array(["a", "b"]), InvalidDTypeError, "real"),
    ([0, 1], np.array([-1, 2], dtype=np.int8), InvalidValueError, r"priorities\[0\]"),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("indices,priorities,error,match", BAD_UPDATES)
def test_bad_update_raises_and_changes_nothing(threads, indices, priorities, error, match):
    tree = filled(threads)
    before = snapshot(tree)
    with pytest.raises(error, match=match):
        tree.update(indices, priorities)
    after = snapshot(tree)
    np.testing.assert_array_equal(after[0], before[0])
    assert after[1] == before[1]
    assert tree.check_consistency()


def test_bad_update_big_batch_changes_nothing():
    # the error sits at the very end of a batch big enough for the threaded path
    tree = filled(2)
    before = snapshot(tree)
    idx = np.arange(100_000) % 50
    prio = np.ones(100_000)
    prio[-1] = np.nan
    with pytest.raises(InvalidValueError, match=r"priorities\[99999\]"):
        tree.update(idx, prio)
    idx[-1] = 50
    with pytest.raises(InvalidIndexError, match=r"indices\[99999\]"):
        tree.update(idx, np.ones(100_000))
    np.testing.assert_array_equal(snapshot(tree)[0], before[0])


@pytest.mark.parametrize(
    "indices,error",
    [
        (np.zeros((1, 1), np.int64), InvalidValueError),
        ([0.5], InvalidDTypeError),
        ([True], InvalidDTypeError),
        ([50], InvalidIndexError),
        ([-1], InvalidIndexError),
    ],
)
def test_bad_get(indices, error):
    tree = filled()
    with pytest.raises(error):
        tree.get(indices)


@pytest.mark.parametrize(
    "masses,error,match",
    [
        (np.zeros((2, 2)), InvalidValueError, "1-D"),
        ([1.0, -1e-9], InvalidValueError, r"masses\[1\]"),
        ([np.nan], InvalidValueError, r"masses\[0\] = nan"),
        ([1.0, 2.0, 1e9], InvalidValueError, r"masses\[2\]"),
        ([np.inf], InvalidValueError, r"masses\[0\]"),
        (np.array([1 + 1j]), InvalidDTypeError, "real"),
        (np.array([True]), InvalidDTypeError, "real"),
    ],
)
def test_bad_sample(masses, error, match):
    tree = filled()
    before = snapshot(tree)
    with pytest.raises(error, match=match):
        tree.sample(masses)
    np.testing.assert_array_equal(snapshot(tree)[0], before[0])


def test_sample_on_empty_tree():
    tree = make(20, 4)
    with pytest.raises(EmptyTreeError):
        tree.sample([0.0])
    tree.update([3], [1.0])
    tree.update([3], [0.0])
    with pytest.raises(EmptyTreeError):
        tree.sample([0.0])


@pytest.mark.parametrize(
    "args,error",
    [
        ((0, 4), InvalidValueError),
        ((10, 1), InvalidValueError),
        ((-5, 4), InvalidValueError),
        ((10.0, 4), InvalidDTypeError),
        ((10, "4"), InvalidDTypeError),
    ],
)
def test_bad_constructor(args, error):
    with pytest.raises(error):
        CpuSumTree(*args)


@pytest.mark.parametrize("threads,error", [(0, InvalidValueError), (-1, InvalidValueError), (1.5, InvalidDTypeError)])
def test_bad_threads(threads, error):
    with pytest.raises(error):
        CpuSumTree(10, threads=threads)
    tree = CpuSumTree(10, threads=1)
    with pytest.raises(error):
        tree.set_threads(threads)
    assert tree.threads == 1


def test_huge_fanout_is_one_group():
    tree, ref = make(37, 10**12), ReferenceSumTree(37, 10**12)
    assert tree.fanout == 10**12 and tree.depth == 1
    rng = np.random.default_rng(1)
    idx, prio = random_batch(rng, 37, 100)
    tree.update(idx, prio)
    ref.update(idx, prio)
    assert_same(tree, ref, rng)


# ------------------------------------------------------- serial vs threaded
def drive_race(race, serial_ns, parallel_ns, calls, cold=lambda i: False):
    """Feed a PathRace the given costs; return how many calls it ran threaded."""
    threaded = 0
    for i in range(calls):
        par = race.pick_parallel()
        threaded += par
        race.record(par, par and cold(i), parallel_ns if par else serial_ns)
    return threaded


def test_path_race_settles_on_the_faster_path_and_rarely_probes():
    from pearl_cpu._sumtree import _PathRace

    fast_threads = _PathRace()
    assert drive_race(fast_threads, serial_ns=20.0, parallel_ns=11.0, calls=5000) > 4900
    busy_cores = _PathRace()
    assert drive_race(busy_cores, serial_ns=20.0, parallel_ns=30.0, calls=5000) < 60
    close = _PathRace()  # 10% apart: inside the hysteresis band, no flapping either way
    assert not 100 < drive_race(close, serial_ns=20.0, parallel_ns=18.0, calls=5000) < 4900


def test_path_race_follows_a_change_of_machine_load():
    from pearl_cpu._sumtree import _PathRace

    race = _PathRace()
    drive_race(race, serial_ns=20.0, parallel_ns=30.0, calls=3000)  # busy: serial
    # the other core frees up: the first probe that disagrees shortens the
    # probe interval again, and the race switches within a few hundred calls
    assert drive_race(race, serial_ns=20.0, parallel_ns=10.0, calls=3000) > 2000
    assert race.parallel_ns < 0.85 * race.serial_ns


def test_path_race_ignores_a_lone_cold_threaded_run():
    from pearl_cpu._sumtree import _PathRace

    race = _PathRace()
    race.record(False, False, 20.0)
    race.record(True, True, 500.0)  # woke the workers: not the steady state
    assert race.parallel_ns == 0.0
    race.record(True, False, 10.0)
    assert race.parallel_ns == 10.0
    race.record(True, True, 40.0)  # cold after warm: skipped
    race.record(True, True, 40.0)  # cold after cold: calls are far apart, it counts
    assert race.parallel_ns == pytest.approx(10.0 * 0.875 + 40.0 * 0.125)


# --------------------------------------------------------------- concurrency
def test_concurrent_python_threads_are_serialised():
    cap = 50_000
    tree = make(cap, 16, threads=2)
    tree.update(np.arange(cap), np.ones(cap))
    errors = []

    def writer(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(30):
                tree.update(rng.integers(0, cap, 20_000), rng.random(20_000) + 0.5)
        except Exception as exc:  # pragma: no cover # noqa: BLE001 - any failure of a thread is reported below
            errors.append(exc)

    def reader(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(30):
                # writers keep every priority >= 0.5, so the total stays >= cap / 2
                out = tree.sample(rng.random(20_000) * (cap * 0.5))
                assert ((out >= 0) & (out < cap)).all()
        except Exception as exc:  # pragma: no cover # noqa: BLE001 - any failure of a thread is reported below
            errors.append(exc)

    workers = [threading.Thread(target=f, args=(s,)) for s, f in enumerate([writer, reader, writer, reader])]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    assert tree.check_consistency()


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
def test_threaded_tree_usable_after_fork():
    import multiprocessing as mp

    tree = make(10_000, 16, threads=2, parallel=True)
    tree.update(np.arange(10_000), np.ones(10_000))  # starts the worker threads
    ctx = mp.get_context("fork")
    q = ctx.Queue()

    def child():
        tree.update(np.arange(5000), np.full(5000, 2.0))
        q.put((tree.total(), tree.check_consistency()))

    p = ctx.Process(target=child)
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert q.get(timeout=5) == (15_000.0, True)
    assert tree.total() == 10_000.0
