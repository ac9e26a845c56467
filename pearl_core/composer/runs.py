"""Runs of the runtime itself, measured: the calibration runs of the host variants and `pearl validate`.

:func:`profile_runtime` and :func:`measure_run` start a real
:class:`~pearl_core.runtime.parallel.ParallelRuntime` with a workload for a short
window and read its seconds per update off ``metrics.csv``
(:func:`measured_iteration_s`); :func:`profile_message_hop` times one message
between two processes over the runtime's queue. They are re-exported by
:mod:`pearl_core.composer.profiling`, their former home.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import tempfile
from pathlib import Path
from typing import Any

from pearl_core.composer.timing import median_time, run_config_for
from pearl_core.composer.workload import Workload

__all__ = ["measure_run", "measured_iteration_s", "metrics_every_for", "profile_message_hop", "profile_runtime"]


def _echo(inbox: Any, outbox: Any) -> None:
    while True:
        item = inbox.get()
        outbox.put(item)
        if item is None:
            return


def profile_message_hop(iterations: int = 300) -> float:
    """Median seconds of one message between two processes over the runtime's :class:`PipeQueue`.

    Measured as half a ping-pong round trip with a forked echo process (no
    interpreter start-up, no torch import), i.e. what one RRQ/LAQ/LDQ message
    costs the runtime besides the work it triggers.
    """
    import multiprocessing as mp

    from pearl_core.runtime.queues import PipeQueue

    ctx = mp.get_context("fork")
    to_child, to_parent = PipeQueue(2, ctx), PipeQueue(2, ctx)
    proc = ctx.Process(target=_echo, args=(to_child, to_parent), daemon=True)
    proc.start()
    try:
        def ping() -> None:
            to_child.put(1)
            to_parent.get()

        rtt = median_time(ping, iterations, warmup=20)
    finally:
        try:
            to_child.put(None, timeout=1.0)
        except Exception:  # noqa: BLE001 - the child is killed below anyway
            pass
        proc.join(timeout=2.0)
        if proc.is_alive():
            proc.kill()
            proc.join()
    return rtt / 2


def measured_iteration_s(metrics_csv: Path) -> tuple[float, int]:
    """``(seconds per update, updates)`` over the steady part of a run's ``metrics.csv``.

    Uses the rows after the first one with updates > 0 (learning has started and
    the first row's partial interval is skipped) up to the last row.
    """
    with open(metrics_csv, newline="", encoding="utf-8") as fh:
        rows = [(float(r["wall_s"]), int(float(r["updates"]))) for r in csv.DictReader(fh)]
    started = [r for r in rows if r[1] > 0]
    if len(started) < 3:
        return math.nan, 0
    (w0, u0), (w1, u1) = started[1], started[-1]
    du = u1 - u0
    return ((w1 - w0) / du if du > 0 else math.nan), du


def metrics_every_for(insert_batch: int) -> int:
    """Env steps between ``metrics.csv`` rows of a measuring run: a row every 20 updates (at ``BS_i`` env steps
    per update), so a slow workload still gives enough rows in a few seconds and a fast one does not spend
    its time writing them."""
    return max(1, 20 * int(insert_batch))


def profile_runtime(wl: Workload, *, setting: int, learner_threads: int = 1, window_s: float = 3.0,
                    learning_starts: int | None = None, seed: int = 0, max_updates: int | None = None) -> float:
    """Seconds per learner update of a short run of the runtime itself, RM and learner on the host CPU.

    The host's cells as the runtime uses them: a real
    :class:`~pearl_core.runtime.parallel.ParallelRuntime` with the workload's
    trainer, replay, ``n_actors`` actors stepping ``envs_per_actor`` environments
    each, protocol ``setting`` and ``learner_threads`` torch threads, at the
    workload's replay ratio (one update per ``BS_i`` env steps), for ``window_s``
    seconds after ``learning_starts`` env steps (default 1000, as `pearl validate`, or a batch if larger). What it
    includes that the isolated cells do not: the messages and wake-ups between
    processes, the host's relaying, the actors' rows and the weight publication,
    and the processes sharing the machine's cores. The time is the steady slope of
    the run's ``metrics.csv`` (:func:`measured_iteration_s`); nothing of the run is
    kept (it writes into a temporary folder that is removed). ``max_updates``: end the run
    sooner, once it has made that many updates (a fast workload's slope is steady
    long before the window ends).

    Returns ``nan`` when the run made too few updates to measure.
    """
    from pearl_core.runtime.config import RuntimePlan

    starts = learning_starts if learning_starts is not None else max(1_000, wl.batch_size)
    rm_threads = learner_threads if setting == 2 else 1
    # RuntimePlan converts an int setting to a Setting (and refuses any other value)
    plan = RuntimePlan(setting=setting,  # type: ignore[arg-type]
                       learner_threads=learner_threads, rm_threads=rm_threads, n_actors=wl.n_actors,
                       envs_per_actor=wl.envs_per_actor)
    return measure_run(wl, plan, window_s=window_s, learning_starts=starts, seed=seed, max_updates=max_updates)[0]


def measure_run(wl: Workload, plan: "Any", *, window_s: float, learning_starts: int, seed: int = 0,
                prefix: str = "pearl-calibrate-", weight_sync_every: int | None = None,
                max_updates: int | None = None) -> tuple[float, int]:
    """``(seconds per update, updates)`` of one run of ``plan`` (a RuntimePlan) with the workload.

    The workload's run config at its replay ratio (one update per ``BS_i`` env steps; ``weight_sync_every``
    if given), for ``window_s`` seconds after ``learning_starts`` env steps, no evaluation, logs in a temporary
    folder that is removed (``max_updates``: or until that many updates); the time is
    :func:`measured_iteration_s` of its ``metrics.csv``. Used by
    :func:`profile_runtime`, ``pearl validate``, ``benchmarks/runtime_knobs.py``; a failing run raises (one
    Ctrl-C / SIGTERM stopped: KeyboardInterrupt, so that no further run starts).
    """
    from pearl_core.runtime.config import StopCriteria
    from pearl_core.runtime.parallel import ParallelRuntime

    bsi = int(wl.insert_batch or wl.n_actors)
    config = dataclasses.replace(run_config_for(wl, seed=seed), replay_ratio=1.0 / bsi,
                                 learning_starts=learning_starts,
                                 stop=StopCriteria(max_wall_time_s=float(window_s), max_updates=max_updates,
                                                   eval_every=10**9))
    config = config if weight_sync_every is None else dataclasses.replace(config, weight_sync_every=weight_sync_every)
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        config = dataclasses.replace(config, log_dir=str(Path(tmp) / "run"))
        result = ParallelRuntime(config, plan, progress=False, tensorboard=False, plot=False,
                                 metrics_every=metrics_every_for(bsi)).run()
        if getattr(result, "stop_reason", None) == "interrupted":
            raise KeyboardInterrupt(result.stop_detail)
        return measured_iteration_s(Path(config.log_dir) / "metrics.csv")
