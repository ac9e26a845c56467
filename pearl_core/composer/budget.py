"""The profiling budget shared out among the probes a compose plans (issue 40: compose within 60 s).

A compose with profiling measures every present device primitive by primitive. It spends at most the
seconds of a :class:`~pearl_core.composer.timing.ProfileBudget` (``pearl compose --profile-budget``, or
:func:`~pearl_core.composer.timing.profile_budget` around ``Composer.run()``; default
:data:`~pearl_core.composer.timing.DEFAULT_PROFILE_BUDGET_S`):

* the profiler (:func:`~pearl_core.composer.profiling.profiler_for`) gives each device still to measure (not
  in the cache) a part of what is left, by :data:`DEVICE_WEIGHTS` (the host, with its calibration runs,
  weighs more than an accelerator);
* each device's policy (:mod:`~pearl_core.composer.hostprofile`, :mod:`~pearl_core.composer.deviceprofile`)
  plans its probes with weights (:class:`ProbePlan`); a probe's share is its weight's part of what is left
  of the device's part when it starts (what a quick probe leaves goes to the later ones). The share goes to
  the backend as :attr:`MeasureRequest.budget_s <pearl_core.composer.matrix.MeasureRequest.budget_s>`
  (the backend measures until its iterations or its share, whichever first), and the call runs under a
  deadline of ``share * DEADLINE_FACTOR + DEADLINE_GRACE_S`` (:func:`~pearl_core.plugin_guard.call_deadline`),
  so a backend that ignores the share cannot hold the compose much longer;
* a probe that does not fit (nothing left, or less than :data:`~pearl_core.composer.timing.MIN_TIMED` calls
  of what it is expected to cost) is not run: its cells are the analytic model's, and the row's notes say
  which, because of the budget (:attr:`ProbePlan.modelled`);
* each measured probe records the timed calls its median is of (:attr:`ProbePlan.samples`), in the notes.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from pearl_core.composer.matrix import PrimitiveCost
from pearl_core.composer.timing import MIN_TIMED, ProfileBudget, counting_samples
from pearl_core.errors import PluginTimeoutError
from pearl_core.plugin_guard import call_deadline

__all__ = ["BUDGET_NOTE", "DEADLINE_FACTOR", "DEADLINE_GRACE_S", "DEVICE_WEIGHTS", "MIN_SHARE_S", "OverBudget",
           "ProbePlan", "probe_deadline_s"]

#: A device's weight in the split of the budget among the devices to measure: the host runs more probes and
#: the calibration runs of its variants.
DEVICE_WEIGHTS = {"host": 2.0, "accelerator": 1.0, "other": 1.0}
#: A probe's deadline is its share times this plus :data:`DEADLINE_GRACE_S` (building a filled replay or a
#: trainer, capturing a graph: set-up the share does not time).
DEADLINE_FACTOR = 3.0
DEADLINE_GRACE_S = 20.0
#: The smallest share a probe is run with: below it there is nothing to time.
MIN_SHARE_S = 0.01
#: The words every note of a cell or probe left to the model because of the budget starts with.
BUDGET_NOTE = "modelled because of the profiling budget"


def probe_deadline_s(share_s: float) -> float:
    """Seconds a probe with a share of ``share_s`` may run before the composer gives up on it."""
    return share_s * DEADLINE_FACTOR + DEADLINE_GRACE_S


class OverBudget(Exception):
    """A probe that the device cannot do without did not fit the budget (the device is then modelled)."""


class ProbePlan:
    """The probes of one device, with weights, sharing ``budget``.

    Args:
        budget: the device's part of the profiling budget.
        weights: a weight per planned probe (any name); probes can be added later with :meth:`plan`.
    """

    def __init__(self, budget: ProfileBudget, weights: Mapping[str, float]):
        self.budget = budget
        self.weights = dict(weights)
        self.samples: dict[str, int | None] = {}
        self.modelled: list[str] = []
        budget.start()

    def plan(self, name: str, weight: float) -> None:
        self.weights[name] = weight

    def share(self, name: str, cap: float | None = None) -> float:
        """``name``'s share of what is left (at most ``cap``); ``name`` is then no longer waiting."""
        weight = self.weights.pop(name, 0.0)
        share = self.budget.share(weight, weight + sum(self.weights.values()))
        return share if cap is None else min(share, cap)

    def fits(self, share_s: float, per_call_s: float | None = None) -> bool:
        """Whether a probe of that share can run: :data:`MIN_SHARE_S` at least, and room for :data:`MIN_TIMED` calls of
        ``per_call_s`` when its cost per call is known."""
        return share_s >= MIN_SHARE_S and (per_call_s is None or share_s >= MIN_TIMED * per_call_s)

    def skip(self, name: str, what: str) -> None:
        """``name`` is not run: ``what`` (the cells it would have given) is modelled, as the notes say."""
        self.weights.pop(name, None)
        self.modelled.append(f"{what}: {BUDGET_NOTE} ({self.budget.left():.2f} s of "
                             f"{self.budget.total_s:.2f} s left for this device)")

    def run(self, name: str, share_s: float, call: Callable[[], Any]) -> Any:
        """``call()`` under the share's deadline; records the samples it took (its :class:`PrimitiveCost`'s
        ``samples`` when the backend says, else the fewest timed calls of the core's timing helpers).

        Raises:
            PluginTimeoutError: the call overran its deadline (the caller models what it would have given).
        """
        with counting_samples() as counts, call_deadline(probe_deadline_s(share_s)):
            out = call()
        said = out.samples if isinstance(out, PrimitiveCost) else None
        self.samples[name] = said if said is not None else (min(counts) if counts else None)
        return out

    def timed_out(self, name: str, what: str, exc: PluginTimeoutError) -> None:
        self.modelled.append(f"{what}: {BUDGET_NOTE} (the probe {name!r} overran its deadline: {exc})")

    def notes(self) -> tuple[str, ...]:
        """The samples line (when any probe ran) and one line per modelled cell or probe."""
        took = ", ".join(f"{k} {'reused' if v is None else v}" for k, v in self.samples.items())
        head = (f"profiling budget {self.budget.total_s:.2f} s for this device, {self.budget.spent():.2f} s spent; "
                f"timed samples per probe: {took} ('reused': measured earlier in this compose, or not counted "
                "by the backend)",) if self.samples else ()
        return (*head, *self.modelled)
