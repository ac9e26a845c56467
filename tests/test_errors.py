"""The errors of :mod:`pearl_core.errors`: every fault-handling error is a :class:`PearlError`.
"""

from __future__ import annotations

import faulty_envs
import pytest

from pearl_core.errors import (
    DataError,
    EvaluationError,
    HostError,
    PearlError,
    StallError,
)

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_every_new_error_is_a_pearl_error():
    for cls in (DataError, HostError, EvaluationError, StallError):
        assert issubclass(cls, PearlError)
    assert issubclass(DataError, ValueError)
    assert faulty_envs.NAMESPACE == "PearlFaulty"
