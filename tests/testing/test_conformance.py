"""The conformance kit must fail on broken trees: each mutant below has one classic bug."""

import numpy as np
import pytest

from pearl_core.sumtree import check_indices
from pearl_core.testing import ReferenceSumTree, SumTreeConformance


class FirstWinsTree(ReferenceSumTree):
    """Bug: a repeated index keeps its first priority instead of its last."""

    def update(self, indices, priorities):
        super().update(np.asarray(indices)[::-1], np.asarray(priorities)[::-1])


class LeftBoundaryTree(ReferenceSumTree):
    """Bug: searches with side='left', so a mass on a boundary can pick a zero leaf."""

    def sample(self, masses):
        out = super().sample(masses)
        cum = self.prefix_sums()
        left = np.searchsorted(cum, np.asarray(masses, dtype=float), side="left")
        return np.minimum(left, self.capacity - 1).astype(np.int64) if len(out) else out


class PartialUpdateTree(ReferenceSumTree):
    """Bug: applies the valid prefix of a batch before rejecting a bad priority."""

    def update(self, indices, priorities):
        idx = check_indices(indices, self.capacity)
        prio = np.asarray(priorities, dtype=float)
        for k, (i, p) in enumerate(zip(idx, prio)):
            if not (np.isfinite(p) and p >= 0):
                super().update(idx[:k], prio[:k])
                break
        super().update(indices, priorities)


class NoDTypeCheckTree(ReferenceSumTree):
    """Bug: silently truncates float indices."""

    def update(self, indices, priorities):
        super().update(np.asarray(indices).astype(np.int64), priorities)


def _suite_for(cls):
    class Suite(SumTreeConformance):
        def make_tree(self, capacity, fanout):
            return cls(capacity, fanout)

    return Suite()


@pytest.mark.parametrize(
    "mutant,check",
    [
        (FirstWinsTree, "test_duplicates_last_wins"),
        (LeftBoundaryTree, "test_zero_priority_never_sampled"),
        (LeftBoundaryTree, "test_matches_reference"),
    ],
)
def test_kit_catches_mutant(mutant, check):
    suite = _suite_for(mutant)
    with pytest.raises(BaseException) as info:
        getattr(suite, check)()
    assert _is_test_failure(info.value), repr(info.value)


@pytest.mark.parametrize(
    "mutant,case",
    [(PartialUpdateTree, "negative-priority"), (NoDTypeCheckTree, "float-indices")],
)
def test_kit_catches_bad_input_mutant(mutant, case):
    from pearl_core.testing.conformance import _bad_calls

    suite = _suite_for(mutant)
    (found,) = [c for c in _bad_calls() if c[0] == case]
    with pytest.raises(BaseException) as info:
        suite.test_bad_input_raises_and_changes_nothing(found)
    # the suite must fail (assertion, or pytest's "DID NOT RAISE"), not pass
    assert _is_test_failure(info.value) or "DID NOT RAISE" in str(info.value)


def _is_test_failure(exc: BaseException) -> bool:
    """An assertion, or Hypothesis' group of several distinct assertion failures."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_test_failure(e) for e in exc.exceptions)
    return isinstance(exc, AssertionError)
