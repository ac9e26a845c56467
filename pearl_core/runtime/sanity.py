"""Data sanity of a run: finite weights and trainer state, and the record of dropped transitions.

* :func:`nonfinite_in` — where a (nested) trainer state or weight dict holds a NaN/inf, if anywhere.
* :func:`check_weights` / :func:`check_state` — reject what an update made non-finite,
  before it is published to actors or written to a checkpoint (:class:`DataError`
  naming the update).
* :class:`DropLog` — counts the transitions dropped for non-finite values
  (``RunConfig.on_nonfinite = "drop"``) and logs them without flooding the log:
  the first drop in full, then at most one line every ``every_s`` seconds, and a
  summary when the run ends.

The environment side (observations, rewards, actions) is checked where the
transitions are made, in :class:`~pearl_core.runtime.acting.Collector`.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping

import numpy as np

from pearl_core.errors import DataError

__all__ = ["DROP_LOGGER", "DropLog", "check_state", "check_weights", "nonfinite_in"]

#: The logger of dropped transitions (both runtimes).
DROP_LOGGER = "pearl_core.runtime.data"

_FIX = ("Fix: lower the learning rate, clip gradients, rewards or TD errors, or look for a division by zero "
        "in the loss; resume from the checkpoint, which holds the last good weights.")


def _bad_element(arr) -> str | None:
    """``"[i, j] = nan"`` for the first non-finite element of a float array or tensor, else ``None``."""
    if type(arr).__module__.startswith("torch"):
        if not arr.is_floating_point() or bool(arr.isfinite().all()):
            return None
        arr = arr.detach().cpu().numpy()
    a = np.asarray(arr)
    if a.dtype.kind not in "fc" or np.isfinite(a).all():
        return None
    flat = int(np.argmax(~np.isfinite(a).reshape(-1)))
    pos = np.unravel_index(flat, a.shape) if a.ndim else ()
    return f"[{', '.join(map(str, pos))}] = {a.reshape(-1)[flat].item()!r}" if a.ndim else f" = {a.item()!r}"


def nonfinite_in(obj: Any, path: str = "") -> str | None:
    """The path of the first NaN/inf in ``obj`` (nested mappings, lists, tuples, arrays, tensors), else ``None``."""
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            found = nonfinite_in(v, f"{path}[{k!r}]")
            if found is not None:
                return found
        return None
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            found = nonfinite_in(v, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(obj, float):
        return None if np.isfinite(obj) else f"{path} = {obj!r}"
    if isinstance(obj, np.ndarray) or type(obj).__module__.startswith("torch") and hasattr(obj, "is_floating_point"):
        bad = _bad_element(obj)
        return None if bad is None else path + bad
    return None


def check_weights(weights: Mapping[str, Any], *, update: int, owner: str = "learner") -> Mapping[str, Any]:
    """Return ``weights`` (``trainer.get_weights()``) if every value is finite.

    Raises:
        DataError: a NaN/inf (names the weight, the element and the update).
    """
    bad = nonfinite_in(weights)
    if bad is not None:
        raise DataError(
            f"{owner}: after update {update}, trainer.get_weights(){bad} is not finite; expected finite weights. "
            f"The update diverged: these weights were not published to the actors nor checkpointed. {_FIX}",
            component=owner, update=update)
    return weights


def check_state(state: Mapping[str, Any], *, update: int, owner: str = "learner") -> Mapping[str, Any]:
    """Return ``state`` (``trainer.state_dict()``) if every value is finite.

    Raises:
        DataError: a NaN/inf (names where in the state and the update).
    """
    bad = nonfinite_in(state)
    if bad is not None:
        raise DataError(
            f"{owner}: after update {update}, trainer.state_dict(){bad} is not finite; expected a finite trainer "
            f"state. It was not checkpointed. {_FIX}", component=owner, update=update)
    return state


class DropLog:
    """Counts transitions dropped for non-finite values and logs them (first in full, then rate-limited).

    Args:
        base: drops counted by earlier segments of the run (a resumed run's checkpoint).
        every_s: seconds between log lines after the first.
    """

    def __init__(self, base: int = 0, every_s: float = 10.0):
        self.base = int(base)
        self.every_s = every_s
        self.log = logging.getLogger(DROP_LOGGER)
        self._counts: dict[str, int] = {}
        self._logged = 0
        self._next = 0.0
        self._summarised = False

    @property
    def total(self) -> int:
        """Transitions dropped over the whole run (earlier segments included)."""
        return self.base + sum(self._counts.values())

    def update(self, source: str, count: int, detail: str) -> None:
        """``source`` (``"actor 0"``, ``"the serial runtime"``) has dropped ``count`` transitions so far;
        ``detail`` describes the latest."""
        if count <= self._counts.get(source, 0):
            return
        self._counts[source] = count
        now = time.monotonic()
        if self._logged == 0 or now >= self._next:
            new = self.total - self.base - self._logged
            self.log.warning("dropped %d transition(s) with non-finite values (%d in this run so far, "
                             "on_nonfinite='drop'); latest: %s", new, self.total, detail)
            self._logged += new
            self._next = now + self.every_s

    def summary(self, total: int | None = None) -> None:
        """Log the run's total once at the end of a segment that dropped anything.

        ``total``: the exact run total when the caller knows it better (the parallel
        runtime's shared counters run ahead of the notes).
        """
        total = self.total if total is None else int(total)
        if total > self.base and not self._summarised:
            self.log.warning("dropped %d transition(s) with non-finite values in all (on_nonfinite='drop')", total)
            self._summarised = True
