"""Measured costs of a present GPU, one primitive at a time (``CudaBackend.measure_primitive``).

The composer chooses what is measured (:mod:`pearl_core.composer.deviceprofile`: the replay, the
learner and the setting-2 worker loop, and how many iterations of each) and asks this backend one
:class:`~pearl_core.sdk.MeasureRequest` at a time; :func:`measure` answers each with a
:class:`~pearl_core.sdk.PrimitiveCost`, measured on synthetic data like the paper's populator:

* ``replay`` — the tree (``capacity``, ``fanout``) filled with ``uniform(0.1, 10)`` priorities;
  ``sample_s`` = one ``sample_device`` of ``BS`` masses, ``update_s`` = one ``update_device`` of ``BS``
  pairs, ``insert_s`` = ``get_device`` + ``update_device`` of ``BS_i`` (device arrays, parallelism =
  batch size as the paper prescribes). Uniform replay: sample = drawing ``BS`` random indices on the
  device, update = insert = 0.
* ``learner`` — the paper's stream search: a :class:`~pearl_cuda.learner.SyntheticLearner` with the
  workload's layers, the batch split over ``S`` CUDA streams for ``S`` in a subset of ``[1, BS]``, plus
  a CUDA graph (:func:`~pearl_cuda.learner.search_streams`); every time and the winner go to
  ``details``. When the workload names its environment and trainer, the runtime's real trainer is also
  timed on this GPU (:func:`pearl_core.sdk.profile_learner` with ``device="cuda:N"``, numpy batch in, TD
  errors out, as the runtime runs it), and **that** is the cost: the runtime's trainers do not split
  batches over streams or replay graphs, so the tuned figure would flatter the plan. The tuned figure
  is the cost only when no real trainer can be built.
* ``worker_loop`` — setting 2 on the GPU: the learner step on its stream while the replay's sample,
  update and insert run on another, each timed by CUDA events on its own stream, so the parts include
  the contention (they overlap: each part is its co-located cell). The learner part is the ``learner``
  cost scaled by the contention the synthetic learner saw.

Each figure is the median over ``request.iterations`` timed repetitions after ``request.warmup``, or fewer:
a request's ``budget_s`` (its share of the composer's profiling budget) ends each timed loop once that long
has passed (at least :data:`MIN_TIMED` repetitions; the replay's three operations share it, as do the
learner's stream counts, graph and real trainer), and the cost's ``samples`` says how many the median is of.
The stream search tries at most three counts (:func:`~pearl_cuda.learner.promising_streams`) and the CUDA
graph is captured once per GPU and workload (the worker loop replays the learner's);
``power_w`` is the board's average power over the primitive's timed loops from NVML's total-energy counter
(:func:`average_board_watts`), else (no counter, or loops shorter than :data:`NVML_MIN_WINDOW_S`) the board
power NVML reports right after them, else the spec's ``active_power_w`` when ``nvidia-ml-py`` is not
importable; the cost's first note says which (``power from ...``). ``actor_step`` and ``message_hop`` are the
host's primitives: answered ``None``. What one GPU and workload's measurements share (the filled tree,
the synthetic learner and its stream search, the learner cost) is kept in a :class:`GpuSession` until a
request for another device or workload comes.
"""

from __future__ import annotations

import importlib
import statistics
import time
from typing import Any, Callable

from pearl_core.errors import InvalidValueError
from pearl_core.sdk import MeasureRequest, PrimitiveCost

__all__ = ["GpuSession", "MIN_TIMED", "NVML_MIN_WINDOW_S", "average_board_watts", "device_ordinal", "measure",
           "median_s", "time_calls", "timed_calls"]

#: Timed repetitions a time-bounded loop makes at least, whatever its budget.
MIN_TIMED = 10

#: Shortest timed loop whose average from NVML's energy counter is used (the counter advances in steps of
#: milliseconds to tens of milliseconds).
NVML_MIN_WINDOW_S = 0.1


def device_ordinal(device: Any) -> int:
    """CUDA ordinal of a spec device: ``index``, else the ``N`` of a ``cuda:N`` name, else 0."""
    idx = getattr(device, "index", None)
    if isinstance(idx, int) and idx >= 0:
        return idx
    name = str(getattr(device, "name", ""))
    if ":" in name and name.rsplit(":", 1)[1].isdigit():
        return int(name.rsplit(":", 1)[1])
    return 0


def median_s(samples: list[float]) -> float:
    if not samples:
        raise InvalidValueError("median_s: no timing samples were given; expected at least one. "
                                "Fix: time at least one iteration.")
    return float(statistics.median(samples))


def time_calls(fn: Callable[[], Any], sync: Callable[[], Any], iterations: int, warmup: int) -> float:
    """Median wall seconds of ``fn(); sync()`` over ``iterations`` calls after ``warmup``."""
    return timed_calls(fn, sync, iterations, warmup)[0]


def timed_calls(fn: Callable[[], Any], sync: Callable[[], Any], iterations: int, warmup: int,
                budget_s: float | None = None, clock: Callable[[], float] | None = None) -> tuple[float, int]:
    """``(median wall seconds of fn(); sync(), calls timed)`` over at most ``iterations`` calls after ``warmup``;
    with ``budget_s`` the loop ends once that long has passed and :data:`MIN_TIMED` calls were timed (the
    warm-up ends at a fifth of it). ``clock``: default ``time.perf_counter``."""
    clock = clock or time.perf_counter
    start = clock() if budget_s is not None else 0.0
    for _ in range(warmup):
        if budget_s is not None and clock() - start > budget_s / 5:
            break
        fn()
    sync()
    samples: list[float] = []
    for _ in range(iterations):
        if budget_s is not None and len(samples) >= MIN_TIMED and clock() - start > budget_s:
            break
        t = clock()
        fn()
        sync()
        samples.append(clock() - t)
    return median_s(samples), len(samples)


def average_board_watts(ordinal: int, fn: Callable[[], Any], fallback: Callable[[], float], fallback_from: str, *,
                        nvml: Any = None, clock: Callable[[], float] = time.perf_counter) -> tuple[Any, float, str]:
    """``fn()``, the GPU's average watts over it and where they came from.

    The average is NVML's total-energy counter's difference over ``fn()`` divided by its wall time
    (:class:`pearl_core.sdk.NvmlCounters`; ``nvml``: the ``pynvml`` module, imported when not
    given). Without a readable counter, a window shorter than :data:`NVML_MIN_WINDOW_S` or no energy counted,
    the watts are ``fallback()`` read right after ``fn()``, from ``fallback_from``.
    """
    from pearl_core.sdk import NvmlCounters

    counters = None
    try:
        counters = NvmlCounters(nvml if nvml is not None else importlib.import_module("pynvml"), [ordinal])
    except Exception:  # noqa: BLE001 - no NVML (module, driver, GPU): the fallback's watts
        counters = None
    try:
        t = clock()
        out = fn()
        took = clock() - t
        got = counters.joules().get(f"gpu:{ordinal}") if counters is not None else None
    finally:
        if counters is not None:
            counters.close()
    if isinstance(got, float) and got > 0 and took >= NVML_MIN_WINDOW_S:
        return out, got / took, "the NVML energy counter over the timed loops"
    return out, fallback(), fallback_from


def _rm_ops(tree: Any, wl: Any, cp: Any) -> dict[str, Callable[[], Any]]:
    """The three RM operations on device arrays, with fresh-looking inputs cycled from pools."""
    import numpy as np

    bs, bsi = wl.batch_size, wl.insert_batch
    rng = np.random.default_rng(0)  # drawn on the host once, uploaded once: nothing of it is timed
    pools = 8
    total = float(tree.total())

    def dev(a: Any) -> Any:
        return cp.asarray(a)

    masses = [dev(rng.random(bs) * total) for _ in range(pools)]
    upd = [(dev(rng.integers(0, wl.capacity, bs, dtype=np.int64)), dev(rng.random(bs) * 9.9 + 0.1))
           for _ in range(pools)]
    ins = [(dev(rng.integers(0, wl.capacity, bsi, dtype=np.int64)), dev(rng.random(bsi) * 9.9 + 0.1))
           for _ in range(pools)]
    state = {"i": 0}

    def nxt() -> int:
        state["i"] = (state["i"] + 1) % pools
        return state["i"]

    def insert() -> None:
        i = nxt()
        tree.get_device(ins[i][0])  # retrieval, then update (the paper's insertion)
        tree.update_device(*ins[i])

    return {"rm_sample": lambda: tree.sample_device(masses[nxt()]),
            "rm_update": lambda: tree.update_device(*upd[nxt()]),
            "rm_insert": insert}


class GpuSession:
    """What the measurements of one GPU and one workload share, built on first use.

    Args:
        ordinal: the CUDA device.
        workload: the :class:`~pearl_core.sdk.Workload` measured.
        fallback_w: watts to report without NVML (the spec's ``active_power_w``).
    """

    def __init__(self, ordinal: int, workload: Any, fallback_w: float):
        from pearl_cuda.detect import PowerMeter

        self.ordinal, self.wl = ordinal, workload
        self.meter = PowerMeter(ordinal, fallback_w)
        self.notes: list[str] = []
        self._tree: Any = None
        self._learner: Any = None
        self.timing: Any = None
        self.replay_cost: PrimitiveCost | None = None
        self.learner_cost: PrimitiveCost | None = None

    def metered(self, fn: Callable[[], Any]) -> tuple[Any, float, str]:
        """``fn()``, the board's average watts over it (:func:`average_board_watts`) and a note saying where the
        watts came from."""
        out, watts, how = average_board_watts(self.ordinal, fn, self.meter.watts, self.meter.source)
        return out, watts, f"power from {how}"

    def tree(self) -> Any:
        """The filled :class:`~pearl_cuda.sumtree.CudaSumTree` (prioritized replay), else ``None``."""
        if self._tree is None and self.wl.replay == "prioritized":
            import numpy as np

            from pearl_cuda.sumtree import CudaSumTree

            self._tree = CudaSumTree(self.wl.capacity, self.wl.fanout, device=self.ordinal)
            self._tree.load(np.random.default_rng(0).uniform(0.1, 10.0, self.wl.capacity))
        return self._tree

    def replay(self, request: MeasureRequest) -> PrimitiveCost:
        import cupy as cp

        notes = list(self.notes)
        with cp.cuda.Device(self.ordinal):
            sync = cp.cuda.get_current_stream().synchronize
            tree = self.tree()
            if tree is not None:
                ops = _rm_ops(tree, self.wl, cp)
                third = None if request.budget_s is None else request.budget_s / 3
                parts, watts, note = self.metered(lambda: {
                    cell: timed_calls(fn, sync, request.iterations, request.warmup, third)
                    for cell, fn in ops.items()})
                (s, _), (u, _), (n, _) = parts["rm_sample"], parts["rm_update"], parts["rm_insert"]
                samples = min(k for _, k in parts.values())
            else:
                rng = cp.random.default_rng(0)

                def draw() -> Any:  # the runtime's uniform sample: BS random indices drawn on the device
                    return rng.integers(0, self.wl.capacity, self.wl.batch_size)

                (s, samples), watts, note = self.metered(
                    lambda: timed_calls(draw, sync, request.iterations, request.warmup, request.budget_s))
                u = n = 0.0
                notes.append("uniform replay: no tree, update and insert cost nothing")
        self.replay_cost = PrimitiveCost("replay", request.threads, s + u + n, sample_s=s, update_s=u, insert_s=n,
                                         power_w=watts, details={"ordinal": self.ordinal,
                                                                 "rm_parallelism": self.wl.batch_size},
                                         notes=(note, *notes), samples=samples)
        return self.replay_cost

    def learner(self, request: MeasureRequest) -> PrimitiveCost:
        from pearl_cuda.learner import SyntheticLearner, mlp_dims, promising_streams, search_streams

        notes = list(self.notes)
        dims, target_dims = mlp_dims(self.wl.layers)
        if self._learner is None:  # one synthetic learner (and graph) per GPU and workload
            self._learner = SyntheticLearner(dims, target_dims, self.wl.batch_size, device=f"cuda:{self.ordinal}")
        learner = self._learner  # its stream search's loops are the learner's metered window
        tried = promising_streams(self.wl.batch_size)
        # the stream counts, the graph and the real trainer share the request's budget equally
        each = None if request.budget_s is None else request.budget_s / (len(tried) + 2)
        search = None if each is None else each * (len(tried) + 1)
        timing, watts, note = self.metered(lambda: search_streams(
            learner, iterations=request.iterations, warmup=request.warmup, budget_s=search, candidates=tried))
        self.timing = timing
        trainer_s = _real_trainer_s(self.wl, self.ordinal, request.iterations, request.warmup, notes, each)
        details: dict[str, Any] = {"learner_cell_from": "trainer" if trainer_s is not None else "stream_search",
                                   "learner_streams": timing.best_streams, "learner_cuda_graph": timing.use_graph,
                                   "learner_dims": ",".join(map(str, dims))}
        if trainer_s is not None:
            details["trainer_step_s"] = trainer_s
        details.update({f"learner_s_streams_{s}": v for s, v in timing.per_streams.items()})
        if timing.graph_s is not None:
            details["learner_s_graph"] = timing.graph_s
        seconds = trainer_s if trainer_s is not None else timing.best_s
        self.learner_cost = PrimitiveCost("learner", request.threads, seconds, power_w=watts, details=details,
                                          notes=(note, *notes, *timing.notes),
                                          samples=None if trainer_s is not None else timing.samples)
        return self.learner_cost

    def worker_loop(self, request: MeasureRequest) -> PrimitiveCost:
        import cupy as cp
        import torch

        if self.learner_cost is None or self._learner is None:
            self.learner(request)
        with cp.cuda.Device(self.ordinal):
            tree = self.tree()
            (co, samples), watts, note = self.metered(lambda: _colocated(
                tree, self.wl, self._learner, self.timing, cp, torch, request.iterations, request.warmup,
                request.budget_s))
        details: dict[str, Any] = {}
        learner_s = self.learner_cost.seconds  # type: ignore[union-attr]
        if "co_learner" in co and self.timing.best_s > 0:  # contention ratio of the synthetic learner
            details["co_learner_contention"] = co["co_learner"] / self.timing.best_s
            co["co_learner"] = learner_s * max(1.0, details["co_learner_contention"])
        if tree is None:  # uniform replay: the index draw does not contend measurably; reuse the alone cells
            alone = self.replay_cost or self.replay(MeasureRequest("replay", 1, request.iterations, request.warmup))
            co.update({"co_rm_sample": alone.sample_s, "co_rm_update": 0.0, "co_rm_insert": 0.0})
        s, u, n, ln = co["co_rm_sample"], co["co_rm_update"], co["co_rm_insert"], co.get("co_learner", learner_s)
        return PrimitiveCost("worker_loop", request.threads, s + max(u + n, ln), sample_s=s, update_s=u, insert_s=n,
                             learner_s=ln, power_w=watts, details=details, notes=(note, *self.notes),
                             samples=samples)


def measure(holder: Any, device: Any, wl: Any, request: MeasureRequest) -> PrimitiveCost | None:
    """``request`` measured on ``device`` (see the module docstring); ``None`` for the host's primitives.

    ``holder`` (the backend) keeps the :class:`GpuSession` of the last device and workload in
    ``_gpu_session``, so the learner's stream search is not run again for the worker loop.
    """
    if request.primitive not in ("replay", "learner", "worker_loop"):
        return None
    ordinal = device_ordinal(device)
    session = getattr(holder, "_gpu_session", None)
    if session is None or session.ordinal != ordinal or session.wl != wl:
        session = GpuSession(ordinal, wl, getattr(device, "active_power_w", 0.0))
        holder._gpu_session = session
    return getattr(session, request.primitive)(request)


def _real_trainer_s(wl: Any, ordinal: int, iterations: int, warmup: int, notes: list[str],
                    budget_s: float | None = None) -> float | None:
    """Median seconds of the workload's real trainer step on this GPU (for at most ``budget_s`` past its first
    steps), or ``None`` (reason in ``notes``)."""
    if not getattr(wl, "env_id", "") or not getattr(wl, "trainer", None):
        notes.append("the workload names no env/trainer: the learner cell is the stream-search figure")
        return None
    try:
        from pearl_core.sdk import profile_learner

        return profile_learner(wl, iterations=iterations, warmup=warmup,
                               trainer_kwargs={"device": f"cuda:{ordinal}"}, budget_s=budget_s)
    except Exception as exc:  # noqa: BLE001 - fall back to the synthetic learner, say why
        notes.append(f"the real trainer could not be timed on cuda:{ordinal} ({type(exc).__name__}: {exc}); "
                     "the learner cell is the stream-search figure")
        return None


def _colocated(tree, wl, learner, timing, cp, torch, iterations: int, warmup: int, budget_s: float | None = None,
               clock: Callable[[], float] | None = None) -> tuple[dict[str, float], int]:
    """Each part's median seconds with the learner and the replay on two streams, and the iterations timed
    (at most ``iterations``; with ``budget_s``, until that long has passed and :data:`MIN_TIMED` were timed)."""
    rm_stream = cp.cuda.Stream(non_blocking=True)
    ln_stream = torch.cuda.Stream()
    replay = learner.capture_graph() if timing.use_graph else (lambda: learner.step(timing.best_streams))
    ops = _rm_ops(tree, wl, cp) if tree is not None else {}
    samples: dict[str, list[float]] = {c: [] for c in ("co_rm_sample", "co_rm_update", "co_rm_insert", "co_learner")}
    clock = clock or time.perf_counter
    start = clock()
    for it in range(warmup + iterations):
        timed = len(samples["co_learner"])
        if budget_s is not None and (timed >= MIN_TIMED and clock() - start > budget_s
                                     or it < warmup and clock() - start > budget_s / 5):
            if it >= warmup:
                break
            continue  # the warm-up's part of the budget is spent: on to the timed iterations
        ev = {}
        with torch.cuda.stream(ln_stream):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            replay()
            e1.record()
        with rm_stream:
            for name, fn in ops.items():
                a, b = cp.cuda.Event(), cp.cuda.Event()
                a.record(rm_stream)
                fn()
                b.record(rm_stream)
                ev[name] = (a, b)
        rm_stream.synchronize()
        e1.synchronize()
        if it < warmup:
            continue
        samples["co_learner"].append(e0.elapsed_time(e1) / 1e3)
        for name, (a, b) in ev.items():
            samples["co_" + name].append(cp.cuda.get_elapsed_time(a, b) / 1e3)
    return {c: median_s(s) for c, s in samples.items() if s}, len(samples["co_learner"])
