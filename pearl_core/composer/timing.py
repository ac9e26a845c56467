"""Timing helpers shared by the profiled cells (:mod:`pearl_core.composer.profiling`) and the runtime's
measured runs (:mod:`pearl_core.composer.runs`): a median of timed calls, bounded by count and by time, and
the run config a workload is measured with. Both modules re-export what they use from here.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any, Callable

from pearl_core.composer.workload import Workload
from pearl_core.errors import SpecError

if TYPE_CHECKING:
    from pearl_core.runtime.config import RunConfig

__all__ = ["MIN_TIMED", "median_time", "run_config_for"]


#: Timed calls a time-bounded measurement makes at least, whatever its budget (a median of fewer says little).
MIN_TIMED = 10


def median_time(fn: Callable[[], Any], iterations: int, warmup: int = 10, *,
                setup: Callable[[], Any] | None = None, budget_s: float | None = None) -> float:
    """Median wall seconds of ``fn()`` over ``iterations`` calls after ``warmup`` untimed ones.

    ``setup()`` (untimed) runs before each call when given. ``budget_s``: stop
    early once the warm-up and timed calls have taken that long and at least
    :data:`MIN_TIMED` calls were timed (a slow cell, e.g. an Atari learner step,
    then costs about ``budget_s``, not ``iterations`` steps; its median is still of
    real calls). The warm-up stops at a fifth of the budget.
    """
    clock = time.perf_counter
    start = clock()
    for _ in range(warmup):
        if budget_s is not None and clock() - start > budget_s / 5:
            break
        if setup is not None:
            setup()
        fn()
    times: list[float] = []
    for _ in range(iterations):
        if budget_s is not None and len(times) >= MIN_TIMED and clock() - start > budget_s:
            break
        if setup is not None:
            setup()
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times)


def run_config_for(wl: Workload, *, seed: int = 0) -> "RunConfig":
    """The runtime's :class:`RunConfig` for a workload (what profiling builds trainers and replays from)."""
    from pearl_core.runtime.config import ReplayConfig, RunConfig

    if not wl.env_id or not wl.trainer:
        raise SpecError("profiling needs the workload's env_id and trainer (import path); this workload has "
                        f"env_id={wl.env_id!r}, trainer={wl.trainer!r}. Fix: build it with workload_for_env().")
    return RunConfig(env_id=wl.env_id, trainer=wl.trainer, trainer_kwargs=dict(wl.trainer_kwargs),
                     env_kwargs=dict(wl.env_kwargs), env_wrappers=wl.env_wrappers,
                     replay=ReplayConfig(wl.replay, capacity=wl.capacity, fanout=wl.fanout),
                     batch_size=wl.batch_size, seed=seed)
