"""Hand-computed checks of the reference tree (the oracle must be right by inspection)."""

import numpy as np
import pytest

from pearl_core.errors import EmptyTreeError, InvalidIndexError, InvalidValueError
from pearl_core.testing import ReferenceSumTree


def test_hand_example():
    t = ReferenceSumTree(6, fanout=3)
    t.update([0, 1, 2, 3, 4, 5], [1.0, 0.0, 2.0, 0.0, 0.0, 3.0])
    # prefix sums: 1, 1, 3, 3, 3, 6
    assert t.total() == 6.0
    np.testing.assert_array_equal(t.sample([0.0, 0.999, 1.0, 2.5, 3.0, 5.99]), [0, 0, 2, 2, 5, 5])
    np.testing.assert_array_equal(t.get([5, 1]), [3.0, 0.0])


def test_duplicates_last_wins_and_drift_clamp():
    t = ReferenceSumTree(4)
    t.update([2, 2, 2], [5.0, 7.0, 1.0])
    assert t.get([2])[0] == 1.0
    t.update([0], [1.0])
    # a mass equal to the total clamps to the last non-zero leaf (2), never to leaf 3
    np.testing.assert_array_equal(t.sample([t.total()]), [2])


def test_errors():
    t = ReferenceSumTree(4)
    with pytest.raises(EmptyTreeError):
        t.sample([0.0])
    with pytest.raises(InvalidIndexError, match=r"indices\[1\] = 4"):
        t.update([0, 4], [1.0, 1.0])
    with pytest.raises(InvalidValueError, match=r"priorities\[0\]"):
        t.update([0], [-1.0])
    assert t.total() == 0.0


@pytest.mark.parametrize("indices,pos,shown", [
    (np.array([0, 3, -1, 2], np.int64), 2, "-1"),
    (np.array([0, 9, 4], np.int64), 1, "9"),
    (np.array([1, 2, 8], np.int32), 2, "8"),
    (np.array([1, 2**63 + 5], np.uint64), 1, str(2**63 + 5)),  # wraps to a negative int64 when cast
    (np.array([2**62], np.int64), 0, str(2**62)),
])
def test_check_indices_names_the_first_bad_index(indices, pos, shown):
    from pearl_core.sumtree import check_indices

    with pytest.raises(InvalidIndexError,
                       match=rf"indices\[{pos}\] = {shown} is out of range; expected 0 <= index < capacity = 8"):
        check_indices(indices, 8)
    ok = check_indices(np.array([0, 7, 3], np.uint8), 8)
    assert ok.dtype == np.int64 and ok.tolist() == [0, 7, 3]
