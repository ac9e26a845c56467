"""The RRQ: how the host reaches the replay manager, a transport chosen by the plan.

The host asks three things of the replay manager: insert an actor's rows,
sample a batch into the learner's slot, and apply a batch's TD errors as
priorities. Where the replay manager lives in the host process (setting 1 with
the RM in host memory) the RRQ is :class:`InProcessRRQ`: direct calls on the
replay side of the one :class:`~pearl_core.runtime.step.LearnerStep`, no
messages and no copies between. A replay manager in another process or on a
device would offer the same three calls over a real queue; :func:`make_rrq` is
where the plan picks the transport.
"""

from __future__ import annotations

from typing import Mapping, Protocol

import numpy as np

from pearl_core.replay.storage import transition_rows
from pearl_core.runtime.config import RuntimePlan
from pearl_core.runtime.step import LearnerStep

__all__ = ["InProcessRRQ", "ReplayQueue", "make_rrq"]


class ReplayQueue(Protocol):
    """The host's view of the replay manager (the paper's RRQ, both directions)."""

    @property
    def size(self) -> int:
        """Stored transitions."""

    @property
    def updates(self) -> int:
        """Priority updates applied (completed learner updates)."""

    def insert(self, rows: Mapping[str, np.ndarray], n: int) -> None:
        """Store the first ``n`` rows of the transition fields in ``rows``."""

    def sample_into(self, out: Mapping[str, np.ndarray]) -> np.ndarray:
        """Sample a batch into ``out`` (the transition fields and ``"weights"``); returns its indices."""

    def update(self, indices: np.ndarray, td: np.ndarray) -> None:
        """Apply a trained batch's validated TD errors as priorities."""


class InProcessRRQ:
    """The RRQ of a replay manager in the host process: each request is a direct call."""

    def __init__(self, step: LearnerStep):
        self.step = step

    @property
    def size(self) -> int:
        return self.step.replay.size

    @property
    def updates(self) -> int:
        return self.step.updates

    def insert(self, rows: Mapping[str, np.ndarray], n: int) -> None:
        self.step.replay.add(*transition_rows(rows, n))

    def sample_into(self, out: Mapping[str, np.ndarray]) -> np.ndarray:
        return self.step.sample(out).indices

    def update(self, indices: np.ndarray, td: np.ndarray) -> None:
        self.step.apply(indices, td)


def make_rrq(plan: RuntimePlan, step: LearnerStep) -> ReplayQueue:
    """The RRQ transport for ``plan``'s replay manager; today every runnable plan keeps it in the host."""
    return InProcessRRQ(step)
