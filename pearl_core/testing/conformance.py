"""The sum-tree conformance suite a backend runs by subclassing one class.

Usage, in a plugin's test module::

    from pearl_core.testing import SumTreeConformance

    class TestMyTree(SumTreeConformance):
        backend_name = "my-backend"  # trees from get_backend("my-backend"); fanouts <= its max_fanout

or, for a tree that is not behind a registered backend::

    class TestMyTree(SumTreeConformance):
        max_fanout = 32              # or None: any fanout >= 2

        def make_tree(self, capacity, fanout):
            return MyTree(capacity, fanout)

Every operation is compared with :class:`~pearl_core.testing.ReferenceSumTree`:
randomised programs (Hypothesis), a stateful machine with the reference as its
invariant, every bad-input rule of :mod:`pearl_core.sumtree` (error class *and*
unchanged state), and a seeded check that sample frequencies follow ``p / sum(p)``.

The number of Hypothesis examples per test is ``PEARL_CONFORMANCE_EXAMPLES``
(default 150). The float contract, written once: leaf priorities are stored
exactly; totals agree within ``TOTAL_RTOL`` relative; sampled indices agree
exactly when priorities are small integers (every partial sum is exact) and
otherwise only for masses farther than ``BOUNDARY_RTOL * total`` from a
prefix-sum boundary.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from pearl_core.errors import EmptyTreeError, InvalidDTypeError, InvalidIndexError, InvalidValueError
from pearl_core.sumtree import MASS_DRIFT_RTOL, SumTree
import pearl_core.testing.strategies as pst
from pearl_core.testing.reference import ReferenceSumTree

if TYPE_CHECKING:
    from pearl_core.backend import Backend

EXAMPLES = int(os.environ.get("PEARL_CONFORMANCE_EXAMPLES", "150"))
TOTAL_RTOL = 1e-9
BOUNDARY_RTOL = 1e-9

_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.differing_executors],
    # A backend's author reads one failure with its message, not an ExceptionGroup of every distinct one.
    report_multiple_bugs=False,
)


def assert_same_state(tree: SumTree, ref: ReferenceSumTree) -> None:
    """Leaves equal exactly; totals within ``TOTAL_RTOL``."""
    got = tree.get(np.arange(tree.capacity, dtype=np.int64))
    assert got.dtype == np.float64, f"get() must return float64, got {got.dtype}"
    np.testing.assert_array_equal(got, ref.priorities)
    want = ref.total()
    assert abs(tree.total() - want) <= TOTAL_RTOL * want, f"total {tree.total()!r} != reference {want!r}"


def assert_same_samples(tree: SumTree, ref: ReferenceSumTree, masses: np.ndarray, exact: bool) -> None:
    """Compare ``sample`` with the reference (everywhere if ``exact``, else away from boundaries)."""
    got = tree.sample(masses)
    assert got.dtype == np.int64, f"sample() must return int64, got {got.dtype}"
    assert got.shape == masses.shape
    want = ref.sample(masses)
    p = ref.priorities
    assert (p[got] > 0).all(), f"sampled zero-priority leaves {got[p[got] <= 0]} for masses {masses[p[got] <= 0]}"
    if exact:
        np.testing.assert_array_equal(got, want, err_msg=f"masses={masses!r}")
        return
    cum = ref.prefix_sums()
    total = ref.total()
    pos = np.clip(np.searchsorted(cum, masses), 0, len(cum) - 1)
    dist = np.minimum(np.abs(cum[pos] - masses), np.abs(cum[np.maximum(pos - 1, 0)] - masses))
    far = (dist > BOUNDARY_RTOL * total) & (masses < total * (1 - BOUNDARY_RTOL))
    np.testing.assert_array_equal(got[far], want[far], err_msg=f"masses={masses[far]!r}")


def _snapshot(tree: SumTree):
    return tree.get(np.arange(tree.capacity, dtype=np.int64)).copy(), tree.total()


_UNSET = object()


def _check_fanout_bound(what: str, value: object, fix: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 2):
        raise InvalidValueError(f"{what} = {value!r} is invalid; expected an int >= 2 or None. Fix: {fix}.")


def _bad_calls():
    """(id, callable(tree), expected error, text the message must contain)."""
    i = np.array([0, 1, 2, 3], dtype=np.int64)
    return [
        ("negative-priority", lambda t: t.update(i, [1.0, 2.0, -1.0, 1.0]), InvalidValueError, "[2]"),
        ("nan-priority", lambda t: t.update(i, [1.0, np.nan, 1.0, 1.0]), InvalidValueError, "[1]"),
        ("inf-priority", lambda t: t.update(i, [1.0, 1.0, 1.0, np.inf]), InvalidValueError, "[3]"),
        ("neg-inf-priority", lambda t: t.update(i, [-np.inf, 1.0, 1.0, 1.0]), InvalidValueError, "[0]"),
        ("index-negative", lambda t: t.update([0, -1], [1.0, 1.0]), InvalidIndexError, "[1]"),
        ("index-past-end", lambda t: t.update([t.capacity], [1.0]), InvalidIndexError, "[0]"),
        ("get-index-past-end", lambda t: t.get([0, t.capacity + 5]), InvalidIndexError, "[1]"),
        ("length-mismatch", lambda t: t.update(i, [1.0, 2.0]), InvalidValueError, ""),
        ("float-indices", lambda t: t.update(np.array([0.0, 1.0]), [1.0, 1.0]), InvalidDTypeError, ""),
        ("bool-indices", lambda t: t.update(np.array([True, False]), [1.0, 1.0]), InvalidDTypeError, ""),
        ("complex-priorities", lambda t: t.update([0, 1], np.array([1 + 1j, 1.0])), InvalidDTypeError, ""),
        ("string-priorities", lambda t: t.update([0, 1], np.array(["a", "b"])), InvalidDTypeError, ""),
        ("2d-indices", lambda t: t.update(np.zeros((2, 2), np.int64), np.ones(4)), InvalidValueError, ""),
        ("2d-masses", lambda t: t.sample(np.zeros((2, 2))), InvalidValueError, ""),
        ("negative-mass", lambda t: t.sample([0.0, -0.5]), InvalidValueError, "[1]"),
        ("nan-mass", lambda t: t.sample([np.nan]), InvalidValueError, "[0]"),
        ("mass-past-total", lambda t: t.sample([0.0, 0.0, t.total() * 1.001]), InvalidValueError, "[2]"),
        ("string-masses", lambda t: t.sample(np.array(["x"])), InvalidDTypeError, ""),
    ]


class SumTreeConformance:
    """Subclass and name the backend (or implement :meth:`make_tree`) to run the whole suite on it.

    Which fanouts are tested: never more than the backend declares. The kit
    reads the backend's :attr:`~pearl_core.backend.Backend.max_fanout` from
    :meth:`backend_under_test` (by default the registered backend called
    :attr:`backend_name`), and :attr:`max_fanout` on the suite may lower that
    bound further (never raise it). With neither, fanouts ``2..33`` are drawn.
    :meth:`fanout_limit` is the bound in force.

    Attributes:
        backend_name: name of the registered backend under test
            (``pearl_core.get_backend(name)``); ``None`` when the suite tests a
            tree that no registered backend makes. When set, :meth:`make_tree`
            defaults to that backend's ``make_sum_tree``.
        max_fanout: largest fanout to test (``None``: the backend's declared
            ``max_fanout``, or any ``>= 2`` without one). An int ``>= 2``, at
            most the backend's own ``max_fanout``.
        max_capacity: largest capacity the randomised tests create.
    """

    backend_name: str | None = None
    max_fanout: int | None = None
    max_capacity: int = 5000

    def backend_under_test(self) -> "Backend | None":
        """The backend whose trees are tested: ``get_backend(backend_name)``, or ``None`` without a name.

        Override it to hand the suite a backend object directly (e.g. one that
        is not installed through an entry point).
        """
        if self.backend_name is None:
            return None
        from pearl_core.plugins import get_backend

        return get_backend(self.backend_name)

    def make_tree(self, capacity: int, fanout: int) -> SumTree:
        """A new, all-zero tree of the backend under test (default: the backend's ``make_sum_tree``)."""
        backend = self.backend_under_test()
        if backend is None:
            raise NotImplementedError(
                f"{type(self).__name__} names no backend and does not implement make_tree. Fix: set "
                "backend_name = '<registered backend>' or define make_tree(self, capacity, fanout).")
        return backend.make_sum_tree(capacity, fanout)

    def fanout_limit(self) -> int | None:
        """The largest fanout the suite draws: the smaller of :attr:`max_fanout` and the backend's.

        Raises:
            InvalidValueError: either bound is not an int ``>= 2``, or the suite's
                :attr:`max_fanout` exceeds the backend's declared one.
        """
        cached = self.__dict__.get("_fanout_limit", _UNSET)
        if cached is not _UNSET:
            return cached
        backend = self.backend_under_test()
        declared = None if backend is None else getattr(backend, "max_fanout", None)
        who = f"backend {getattr(backend, 'name', type(backend).__name__)!r}"
        _check_fanout_bound(f"{who}: max_fanout", declared, "declare an int >= 2 on the backend class, or None")
        suite = self.max_fanout
        _check_fanout_bound(f"{type(self).__name__}.max_fanout", suite, "use an int >= 2, or None")
        if declared is not None and suite is not None and suite > declared:
            raise InvalidValueError(
                f"{type(self).__name__}.max_fanout = {suite} exceeds the max_fanout = {declared} that {who} "
                f"declares; expected <= {declared}. Fix: remove max_fanout from the suite (the backend's is "
                f"used) or set it <= {declared}.")
        limit = declared if suite is None else suite  # suite <= declared when both are set (checked above)
        self.__dict__["_fanout_limit"] = limit
        return limit

    # -- helpers ------------------------------------------------------------------
    def _fanout(self, wanted: int) -> int:
        limit = self.fanout_limit()
        return wanted if limit is None else max(2, min(wanted, limit))

    def _pair(self, capacity: int, fanout: int):
        tree = self.make_tree(capacity, fanout)
        assert isinstance(tree, SumTree), f"make_tree must return a SumTree, got {type(tree).__name__}"
        return tree, ReferenceSumTree(capacity, fanout)

    # -- basic contract -------------------------------------------------------------
    @pytest.mark.parametrize("capacity", [1, 2, 7, 64, 1000])
    def test_new_tree_is_empty(self, capacity):
        tree, ref = self._pair(capacity, self._fanout(4))
        assert (tree.capacity, tree.fanout) == (capacity, self._fanout(4))
        assert tree.total() == 0.0
        assert_same_state(tree, ref)
        with pytest.raises(EmptyTreeError):
            tree.sample([0.0])

    @pytest.mark.parametrize("capacity,fanout", [(0, 2), (-3, 4), (8, 1), (8, 0)])
    def test_rejects_bad_shape(self, capacity, fanout):
        with pytest.raises(InvalidValueError):
            self.make_tree(capacity, fanout)

    def test_single_leaf(self):
        tree, ref = self._pair(1, self._fanout(2))
        tree.update([0], [3.5])
        ref.update([0], [3.5])
        assert_same_state(tree, ref)
        np.testing.assert_array_equal(tree.sample([0.0, 1.0, 3.4999, 3.5]), [0, 0, 0, 0])

    @_SETTINGS
    @given(st.data())
    def test_matches_reference(self, data):
        prog = data.draw(pst.tree_programs(self.fanout_limit(), self.max_capacity))
        tree, ref = self._pair(prog.capacity, prog.fanout)
        for idx, prio in prog.batches:
            tree.update(idx, prio)
            ref.update(idx, prio)
            assert_same_state(tree, ref)
            if ref.total() > 0:
                masses = data.draw(pst.boundary_masses(ref.priorities))
                assert_same_samples(tree, ref, masses, prog.exact)
            if len(idx):
                np.testing.assert_array_equal(tree.get(idx), ref.get(idx))

    @_SETTINGS
    @given(st.integers(1, 300), st.data())
    def test_duplicates_last_wins(self, capacity, data):
        fanout = self._fanout(data.draw(pst.fanouts(self.fanout_limit())))
        tree, ref = self._pair(capacity, fanout)
        i = data.draw(st.integers(0, capacity - 1))
        values = data.draw(st.lists(pst.priority_values(), min_size=2, max_size=10))
        tree.update(np.full(len(values), i, dtype=np.int64), values)
        ref.update(np.full(len(values), i, dtype=np.int64), values)
        assert tree.get([i])[0] == values[-1]
        assert_same_state(tree, ref)

    def test_zero_priority_never_sampled(self):
        capacity = 1000
        tree, ref = self._pair(capacity, self._fanout(4))
        prio = np.where(np.arange(capacity) % 3 == 0, 0.0, (np.arange(capacity) % 7) + 1.0)
        tree.update(np.arange(capacity), prio)
        ref.update(np.arange(capacity), prio)
        cum = ref.prefix_sums()
        masses = np.concatenate([cum[:-1], np.nextafter(cum[:-1], 0),
                                 np.linspace(0, ref.total(), 5000, endpoint=False)])
        masses = masses[(masses >= 0) & (masses < ref.total())]
        assert_same_samples(tree, ref, masses, exact=True)

    @pytest.mark.parametrize("fanout", [2, 3, 16])
    def test_drift_clamps_to_last_nonzero_leaf(self, fanout):
        tree, _ = self._pair(50, self._fanout(fanout))
        tree.update([3, 20, 41], [1.0, 2.0, 0.5])
        total = tree.total()
        got = tree.sample([total, total * (1 + MASS_DRIFT_RTOL / 2)])
        np.testing.assert_array_equal(got, [41, 41])

    def test_accepts_safely_convertible_dtypes(self):
        tree, ref = self._pair(100, self._fanout(4))
        tree.update(np.array([1, 5, 9], dtype=np.int32), np.array([1, 2, 3], dtype=np.float32))
        tree.update([10, 11], [4, 5])  # python lists of ints
        tree.update(np.array([12], dtype=np.uint16), np.array([6], dtype=np.int64))
        ref.update([1, 5, 9, 10, 11, 12], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        assert_same_state(tree, ref)
        np.testing.assert_array_equal(tree.sample(np.array([0, 1, 3], dtype=np.int32)), [1, 5, 9])
        np.testing.assert_array_equal(tree.sample(np.array([0.5], dtype=np.float32)), [1])
        assert tree.get(np.array([], dtype=np.int64)).shape == (0,)
        assert tree.sample(np.array([], dtype=np.float64)).shape == (0,)
        tree.update(np.array([], dtype=np.int64), np.array([], dtype=np.float64))
        assert_same_state(tree, ref)

    @pytest.mark.parametrize("case", _bad_calls(), ids=lambda c: c[0])
    def test_bad_input_raises_and_changes_nothing(self, case):
        _, call, error, text = case
        tree, _ = self._pair(37, self._fanout(4))
        tree.update(np.arange(37), np.arange(37) % 5 + 0.5)
        before = _snapshot(tree)
        with pytest.raises(error) as info:
            call(tree)
        assert text in str(info.value), f"message should name the position {text}: {info.value}"
        after = _snapshot(tree)
        np.testing.assert_array_equal(after[0], before[0])
        assert after[1] == before[1]

    @pytest.mark.parametrize("capacity", [37, 5000])
    def test_update_that_overflows_the_total_changes_nothing(self, capacity):
        """Priorities that are each finite but whose sum (with the tree's) overflows float64 raise
        InvalidValueError and change no leaf and not the total; a batch whose repeated index ends on a
        small value (last wins) stays within the limit and is applied."""
        tree, ref = self._pair(capacity, self._fanout(16))
        idx = np.arange(capacity, dtype=np.int64)
        tree.update(idx, idx % 5 + 0.5)
        ref.update(idx, idx % 5 + 0.5)
        big = np.finfo(np.float64).max * 0.6
        tree.update([3], [big])  # alone it fits: the total is finite
        ref.update([3], [big])
        assert_same_state(tree, ref)
        for call in (lambda t: t.update([0, 1], [big, big]),  # the batch alone overflows
                     lambda t: t.update([7], [big]),  # the batch plus the tree's total overflows
                     lambda t: t.update(idx, np.full(capacity, big / capacity * 8))):  # many, all large
            before = _snapshot(tree)
            with pytest.raises(InvalidValueError, match="overflow") as info:
                call(tree)
            after = _snapshot(tree)
            np.testing.assert_array_equal(after[0], before[0],
                                          err_msg=f"leaves changed by a refused update: {info.value}")
            assert after[1] == before[1] and np.isfinite(after[1]), f"total changed: {before[1]!r} -> {after[1]!r}"
        tree.update([5, 5], [big, 1.0])  # the repeated index keeps its last, small, priority
        ref.update([5, 5], [big, 1.0])
        assert_same_state(tree, ref)

    def test_sampling_all_zero_tree_raises_empty(self):
        tree, _ = self._pair(10, self._fanout(2))
        tree.update([1, 2], [1.0, 1.0])
        tree.update([1, 2], [0.0, 0.0])
        with pytest.raises(EmptyTreeError):
            tree.sample([0.0])

    @pytest.mark.parametrize("capacity,fanout", [(65_539, 16), (50_000, 2), (30_001, 7), (4096, 64)])
    def test_large_batches_match_reference(self, capacity, fanout):
        """Batches big enough to take a backend's multi-threaded paths."""
        fanout = self._fanout(fanout)
        tree, ref = self._pair(capacity, fanout)
        rng = np.random.default_rng(capacity + fanout)
        for _ in range(3):
            idx = rng.integers(0, capacity, size=20_000)
            prio = rng.integers(0, 50, size=20_000).astype(np.float64)
            tree.update(idx, prio)
            ref.update(idx, prio)
        assert_same_state(tree, ref)
        masses = rng.uniform(0, ref.total(), size=20_000)
        masses[:2000] = ref.prefix_sums()[rng.integers(0, capacity - 1, size=2000)]
        masses = masses[masses < ref.total()]
        assert_same_samples(tree, ref, masses, exact=True)

    def test_sample_distribution_follows_priorities(self):
        """Seeded: frequencies of uniformly drawn masses match p / sum(p) (chi-square)."""
        capacity = 97
        tree, _ = self._pair(capacity, self._fanout(4))
        rng = np.random.default_rng(12345)
        prio = rng.uniform(0.0, 5.0, size=capacity)
        prio[rng.choice(capacity, 10, replace=False)] = 0.0
        tree.update(np.arange(capacity), prio)
        n = 200_000
        counts = np.bincount(tree.sample(rng.uniform(0, tree.total(), size=n)), minlength=capacity)
        assert counts[prio == 0].sum() == 0, "a zero-priority leaf was sampled"
        live = prio > 0
        expected = n * prio[live] / prio.sum()
        chi2 = float((((counts[live] - expected) ** 2) / expected).sum())
        df = int(live.sum()) - 1
        assert chi2 < df + 8 * np.sqrt(2 * df), f"chi2={chi2:.1f} for df={df}: frequencies do not follow p/sum(p)"

    def test_device_face_matches_the_reference(self):
        """A tree that offers the device face (:class:`~pearl_core.replay.device.DeviceSumTree`): updates
        with repeats (last wins), priorities, samples and the total through it agree with the reference
        exactly on small-integer priorities (every partial sum exact). Skipped for a host-only tree."""
        from pearl_core.testing.device import check_tree_device_face

        check_tree_device_face(*self._pair(1000, self._fanout(8)), assert_same_state)

    def test_stateful_against_reference(self):
        run_state_machine_as_test(
            _machine_for(self),
            settings=settings(
                max_examples=max(10, EXAMPLES // 3),
                stateful_step_count=25,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                report_multiple_bugs=False,
            ),
        )


def _machine_for(suite: SumTreeConformance) -> type[RuleBasedStateMachine]:
    """A state machine that drives the backend tree and the reference side by side."""

    class SumTreeMachine(RuleBasedStateMachine):
        @initialize(fanout=pst.fanouts(suite.fanout_limit()), data=st.data())
        def create(self, fanout, data):
            capacity = data.draw(pst.capacities(fanout, min(suite.max_capacity, 3000)))
            self.exact = data.draw(st.booleans())
            self.tree, self.ref = suite._pair(capacity, fanout)

        @rule(data=st.data())
        def update(self, data):
            idx, prio = data.draw(pst.update_batches(self.ref.capacity, self.exact))
            self.tree.update(idx, prio)
            self.ref.update(idx, prio)

        @rule(data=st.data())
        def sample(self, data):
            if self.ref.total() == 0:
                with pytest.raises(EmptyTreeError):
                    self.tree.sample([0.0])
                return
            assert_same_samples(self.tree, self.ref, data.draw(pst.boundary_masses(self.ref.priorities)), self.exact)

        @rule(data=st.data())
        def get(self, data):
            idx = data.draw(pst.index_batches(self.ref.capacity))
            np.testing.assert_array_equal(self.tree.get(idx), self.ref.get(idx))

        @rule(i=st.integers(0, 10**9))
        def bad_update_changes_nothing(self, i):
            i = i % self.ref.capacity
            with pytest.raises(InvalidValueError):
                self.tree.update([i, i], [1.0, -1.0])

        @invariant()
        def same_state(self):
            if hasattr(self, "tree"):
                assert_same_state(self.tree, self.ref)

    return SumTreeMachine
