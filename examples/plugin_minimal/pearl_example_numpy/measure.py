"""The example's measurements: what ``measure_primitive`` answers when the composer asks.

The composer owns the policy: for a present device that is not the host it asks for the ``replay``,
the ``learner`` and the setting-2 ``worker_loop``, each a ``MeasureRequest`` (primitive, threads,
iterations, warmup, budget_s), and builds the device's row from the answers. A backend measures what
it is asked and decides nothing; it answers a ``PrimitiveCost`` record (median seconds, the parts by
name, optionally the watts it read, what it tuned in ``details``, ``notes``), or ``None`` for what it
cannot measure here: the composer then takes those cells from ``analytic_cells`` and says so.

This example measures its replay manager: the two-level tree of ``sumtree.py``, filled with
``uniform(0.1, 10)`` priorities, timed as the runtime calls it (sample ``BS`` masses, update ``BS``
priorities, insert = read then write ``BS_i`` leaves). Its learner and the co-located cells come
from its model (``costs.py``).
"""

import statistics
import time

import numpy as np

from pearl_core.sdk import PrimitiveCost

from pearl_example_numpy.sumtree import TwoLevelSumTree


def measure(workload, request):
    """The ``PrimitiveCost`` of ``request`` on the example's device, or ``None`` when it does not measure it."""
    if request.primitive != "replay" or workload.replay != "prioritized":
        return None
    rng = np.random.default_rng(0)
    tree = TwoLevelSumTree(workload.capacity, workload.fanout)
    tree.update(np.arange(workload.capacity), rng.uniform(0.1, 10.0, workload.capacity))
    bs, bsi = workload.batch_size, workload.insert_batch

    def sample():
        tree.sample(rng.random(bs) * tree.total())

    def update():
        tree.update(rng.integers(0, workload.capacity, bs), rng.uniform(0.1, 10.0, bs))

    def insert():
        idx = rng.integers(0, workload.capacity, bsi)
        tree.get(idx)
        tree.update(idx, rng.uniform(0.1, 10.0, bsi))

    s, u, n = (_median_s(fn, request) for fn in (sample, update, insert))
    return PrimitiveCost("replay", request.threads, s + u + n, sample_s=s, update_s=u, insert_s=n,
                         details={"rm_threads": 1}, notes=("replay measured on the two-level numpy tree",))


def _median_s(fn, request):
    """Median seconds of ``fn()`` over ``request.iterations`` calls after ``request.warmup``, stopping early
    (after at least one) once ``request.budget_s`` is spent."""
    for _ in range(request.warmup):
        fn()
    samples, start = [], time.perf_counter()
    for _ in range(request.iterations):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
        if request.budget_s is not None and time.perf_counter() - start > request.budget_s:
            break
    return statistics.median(samples)
