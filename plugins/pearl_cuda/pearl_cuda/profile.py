"""Profiled cost cells for a present GPU (``CudaBackend.profile_cells``).

For one GPU and one :class:`~pearl_core.composer.workload.Workload` it measures,
on synthetic data like the paper's populator:

* **RM alone** — the tree (``capacity``, ``fanout``) filled with
  ``uniform(0.1, 10)`` priorities; ``rm_sample`` = one ``sample_device`` of
  ``BS`` masses, ``rm_update`` = one ``update_device`` of ``BS`` pairs,
  ``rm_insert`` = ``get_device`` + ``update_device`` of ``BS_i`` (device arrays,
  parallelism = batch size as the paper prescribes). Uniform replay: sample =
  drawing ``BS`` random indices on the device, update = insert = 0.
* **Learner alone** — the paper's stream search: a
  :class:`~pearl_cuda.learner.SyntheticLearner` with the workload's layers,
  the batch split over ``S`` CUDA streams for ``S`` in a subset of ``[1, BS]``,
  plus a CUDA graph (:func:`~pearl_cuda.learner.search_streams`); every time
  and the winner go to ``config``. When the workload names its environment and
  trainer, the runtime's real trainer is also timed on this GPU
  (:func:`pearl_core.composer.profiling.profile_learner` with
  ``device="cuda:N"``, numpy batch in, TD errors out, as the runtime runs it),
  and **that** is the cell: the runtime's trainers do not split batches over
  streams or replay graphs, so the tuned figure would flatter the plan. The
  tuned figure is the cell only when no real trainer can be built.
* **Co-located** (setting 2) — the learner step on its stream while the RM's
  sample, update and insert run on another, each timed by CUDA events on its
  own stream, so the cells include the contention. The co-located learner cell
  is the alone cell scaled by the contention the synthetic learner saw.

Every cell is the median over ``iterations`` timed repetitions after ``warmup``;
power is the board power from NVML read right after each cell's loop, or the
spec's ``active_power_w`` when ``nvidia-ml-py`` is not importable.
:func:`row_from_measurements` (host arithmetic, tested without a GPU) turns
the numbers into a :class:`~pearl_core.composer.matrix.DeviceRow`.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Mapping

from pearl_core.errors import InvalidValueError
from pearl_core.sdk import CELL_NAMES, CostCell, DeviceRow

__all__ = ["device_ordinal", "median_s", "profile_device", "row_from_measurements", "time_calls"]


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


def row_from_measurements(name: str, seconds: Mapping[str, float | None], watts: Mapping[str, float],
                          config: Mapping[str, Any], notes: tuple[str, ...] = ()) -> DeviceRow:
    """A ``"profiled"`` :class:`DeviceRow`: one cell per measured name (``None`` leaves it empty)."""
    unknown = sorted(set(seconds) - set(CELL_NAMES))
    if unknown:
        raise InvalidValueError(f"row_from_measurements({name!r}): unknown cell names {unknown}; "
                                f"expected names from {list(CELL_NAMES)}.")
    cells = {c: CostCell(max(0.0, float(s)), max(0.0, float(watts.get(c, 0.0))), "profiled")
             for c, s in seconds.items() if s is not None}
    return DeviceRow(name, "cuda", **cells, config=dict(config), notes=notes)


def time_calls(fn: Callable[[], Any], sync: Callable[[], Any], iterations: int, warmup: int) -> float:
    """Median wall seconds of ``fn(); sync()`` over ``iterations`` calls after ``warmup``."""
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(iterations):
        t = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t)
    return median_s(samples)


def _rm_ops(tree: Any, wl: Any, cp: Any) -> dict[str, Callable[[], Any]]:
    """The three RM operations on device arrays, with fresh-looking inputs cycled from pools."""
    bs, bsi = wl.batch_size, wl.insert_batch
    rng = cp.random.default_rng(0)
    pools = 8
    total = float(tree.total())
    masses = [rng.random(bs, dtype=cp.float64) * total for _ in range(pools)]
    upd = [(rng.integers(0, wl.capacity, bs, dtype=cp.int64), rng.random(bs, dtype=cp.float64) * 9.9 + 0.1)
           for _ in range(pools)]
    ins = [(rng.integers(0, wl.capacity, bsi, dtype=cp.int64), rng.random(bsi, dtype=cp.float64) * 9.9 + 0.1)
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


def profile_device(device: Any, wl: Any, *, iterations: int = 1000, warmup: int = 50) -> DeviceRow:
    """Measure every cell of ``device``'s row (see the module docstring). Needs cupy, torch and a GPU."""
    import cupy as cp
    import numpy as np
    import torch

    from pearl_cuda.detect import PowerMeter
    from pearl_cuda.learner import SyntheticLearner, mlp_dims, search_streams
    from pearl_cuda.sumtree import CudaSumTree

    ordinal = device_ordinal(device)
    meter = PowerMeter(ordinal, getattr(device, "active_power_w", 0.0))
    notes = [f"power from {meter.source}"]
    seconds: dict[str, float | None] = {}
    watts: dict[str, float] = {}
    config: dict[str, Any] = {"ordinal": ordinal, "iterations": iterations}
    learner_iters = max(10, min(iterations, 200))
    with cp.cuda.Device(ordinal):
        sync = cp.cuda.get_current_stream().synchronize
        # ---- RM alone
        tree = None
        if wl.replay == "prioritized":
            tree = CudaSumTree(wl.capacity, wl.fanout, device=ordinal)
            tree.load(np.random.default_rng(0).uniform(0.1, 10.0, wl.capacity))
            for cell, fn in _rm_ops(tree, wl, cp).items():
                seconds[cell] = time_calls(fn, sync, iterations, warmup)
                watts[cell] = meter.watts()
        else:
            rng = cp.random.default_rng(0)
            seconds["rm_sample"] = time_calls(lambda: rng.integers(0, wl.capacity, wl.batch_size), sync,
                                              iterations, warmup)
            watts["rm_sample"] = meter.watts()
            seconds["rm_update"] = seconds["rm_insert"] = 0.0
            notes.append("uniform replay: no tree, update and insert cost nothing")
        # ---- learner alone: stream search (+ CUDA graph)
        dims, target_dims = mlp_dims(wl.layers)
        learner = SyntheticLearner(dims, target_dims, wl.batch_size, device=f"cuda:{ordinal}")
        timing = search_streams(learner, iterations=learner_iters, warmup=min(warmup, 20))
        trainer_s = _real_trainer_s(wl, ordinal, learner_iters, min(warmup, 20), notes)
        seconds["learner"] = trainer_s if trainer_s is not None else timing.best_s
        watts["learner"] = meter.watts()
        config["learner_cell_from"] = "trainer" if trainer_s is not None else "stream_search"
        if trainer_s is not None:
            config["trainer_step_s"] = trainer_s
        config.update({"learner_streams": timing.best_streams, "learner_cuda_graph": timing.use_graph,
                       "learner_dims": ",".join(map(str, dims))})
        config.update({f"learner_s_streams_{s}": v for s, v in timing.per_streams.items()})
        if timing.graph_s is not None:
            config["learner_s_graph"] = timing.graph_s
        notes.extend(timing.notes)
        # ---- co-located: learner on one stream, RM ops on another, timed by events per stream
        co = _colocated(tree, wl, learner, timing, cp, torch, learner_iters, min(warmup, 20))
        if "co_learner" in co and timing.best_s > 0:  # contention ratio of the synthetic learner
            config["co_learner_contention"] = co["co_learner"] / timing.best_s
            co["co_learner"] = seconds["learner"] * max(1.0, config["co_learner_contention"])
        if tree is None:  # uniform replay: the index draw does not contend measurably; reuse the alone cells
            co.update({"co_rm_sample": seconds["rm_sample"], "co_rm_update": 0.0, "co_rm_insert": 0.0})
        for cell, s in co.items():
            seconds[cell] = s
            watts[cell] = meter.watts()
    return row_from_measurements(getattr(device, "name", f"cuda:{ordinal}"), seconds, watts, config, tuple(notes))


def _real_trainer_s(wl: Any, ordinal: int, iterations: int, warmup: int, notes: list[str]) -> float | None:
    """Median seconds of the workload's real trainer step on this GPU, or ``None`` (reason in ``notes``)."""
    if not getattr(wl, "env_id", "") or not getattr(wl, "trainer", None):
        notes.append("the workload names no env/trainer: the learner cell is the stream-search figure")
        return None
    try:
        from pearl_core.sdk import profile_learner

        return profile_learner(wl, iterations=iterations, warmup=warmup,
                               trainer_kwargs={"device": f"cuda:{ordinal}"})
    except Exception as exc:  # noqa: BLE001 - fall back to the synthetic learner, say why
        notes.append(f"the real trainer could not be timed on cuda:{ordinal} ({type(exc).__name__}: {exc}); "
                     "the learner cell is the stream-search figure")
        return None


def _colocated(tree, wl, learner, timing, cp, torch, iterations: int, warmup: int) -> dict[str, float]:
    rm_stream = cp.cuda.Stream(non_blocking=True)
    ln_stream = torch.cuda.Stream()
    replay = learner.capture_graph() if timing.use_graph else (lambda: learner.step(timing.best_streams))
    ops = _rm_ops(tree, wl, cp) if tree is not None else {}
    samples: dict[str, list[float]] = {c: [] for c in ("co_rm_sample", "co_rm_update", "co_rm_insert", "co_learner")}
    for it in range(warmup + iterations):
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
    return {c: median_s(s) for c, s in samples.items() if s}
