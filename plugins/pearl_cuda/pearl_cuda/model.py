r"""The analytic cost model of a GPU described in a spec but not measured (``CudaBackend.analytic_cells``).

It fills a :class:`~pearl_core.sdk.DeviceRow` with ``"analytic"`` cells, compute
only (Algorithm 1 adds communication): a roofline-style model, good enough to
rank a described GPU against other devices, not a substitute for profiling a
present one. The core has no GPU model of its own (its default model is the host
CPU's); the composer reaches this one through the backend, even where no GPU or
cupy is present (nothing here touches a device or imports cupy or torch). The
workload figures it shares with the core's CPU model (:func:`~pearl_core.sdk.learner_ops`,
:func:`~pearl_core.sdk.learner_bytes`, :func:`~pearl_core.sdk.layer_passes`,
:data:`~pearl_core.sdk.GEMM_EFFICIENCY`) come from the SDK.

Symbols (SI units; the spec field in brackets, with the default used when it is absent)::

    BS, BS_i   batch and insertion batch         L  tree levels below the root (F^L >= capacity)
    F          fanout                            S  bytes of one tree node (the priority size, 8)
    o          launch_latency_s  [5 us]: one launch to start
    lam        mem_latency_s     [600 ns]: one dependent random access
    B          mem_bandwidth_Bps [900 GB/s]
    Pk         peak_flops        [20 TFLOP/s]
    eta        plateau of the achieved fraction of peak in the small GEMMs: 0.5 (GEMM_EFFICIENCY)

**Replay Manager** (one thread per query, parallelism = BS as the paper
prescribes; levels are dependent loads, the batch is spread over the device)::

    sample = o + L*lam + BS*L*F*S/B                       one kernel
    update = (1+L)*o + L*lam + 2*BS*L*S/B                 dedupe kernel + one scatter-add per level
    insert = o + lam + [(1+L)*o + L*lam + 2*BS_i*L*S/B]   retrieval kernel + update

Uniform replay has no tree: ``sample = o`` (one random-index call), ``update = insert = 0``.

**Learner.** Eager PyTorch launches asynchronously: the CPU dispatches
every op (Python, dispatcher, ``cudaLaunchKernel``) while the GPU runs the
kernels queued before it, so a step costs the *larger* of the two sides, not
their sum. Inputs from ``[device.options]`` (defaults in :data:`GPU_DEFAULTS`;
the sources are cited in ``examples/hardware/cpu-gpu-fpga.toml``)::

    d        dispatch_us      [5 us]   CPU-side cost of one dispatched torch op (eager)
    gap      kernel_gap_us    [0.6 us] GPU-side fixed cost of one kernel (launch gap, ramp, drain)
    g        graph_launch_us  [15 us]  one CUDA graph replay, fixed part
    BS_half  gemm_half_batch  [256]    batch at which the small GEMMs reach half their plateau
    graphs   cuda_graphs      [false]  the step is captured once and replayed as one graph

    K        = 2*N_layers + 4*N_trainable + 30     CUDA kernels per step of the built-in DQN: forward
                                                    addmm + activation per layer; backward dW, db, dX,
                                                    activation per trainable layer; 6 batch copies,
                                                    target, loss, gather, clipping (foreach, 7), fused
                                                    Adam (2), TD errors and loss read-back (30 in all)
    eta(BS)  = eta * BS / (BS + BS_half)            achieved fraction of peak of the step's GEMMs:
                                                    small GEMMs leave most SMs idle (few output tiles)
    W        = max(FLOPs / (eta(BS)*Pk), bytes / B)
    T_gpu    = K * (gap + lam) + W                  each kernel pays its fixed gap and at least one
                                                    dependent global-memory round trip, then its work
    eager:   learner = o + max(ops * d, T_gpu)      o: the first kernel's launch latency (pipeline fill);
                                                    ops as for the CPU (the same aten ops are dispatched)
    graphs:  learner = g + T_gpu                    one replay replaces the per-op dispatch

With ``cuda_graphs`` off (the default: the CUDA plugin's runtime runs the learner
eager; only its profiler measures a captured step) a small RL model is
dispatch-bound at ``ops * d`` (~0.5 ms for 100 ops) at every batch. With it on,
the step is bound by the GPU side: ``K`` kernels of ~1.2 us each plus the GEMM
work, which grows with the batch and the model.

**Co-location**: RM kernels are latency-bound and leave the SMs mostly idle,
so the co-located cells equal the stand-alone ones (separate streams overlap).

**Power of a cell**: ``active_power_w`` (a busy GPU draws near its board power even for small kernels).
"""

from __future__ import annotations

import math
from typing import Any

from pearl_core.errors import SpecError
from pearl_core.sdk import (
    GEMM_EFFICIENCY,
    CostCell,
    DeviceRow,
    DeviceSpec,
    Workload,
    layer_passes,
    learner_bytes,
    learner_ops,
)

__all__ = ["GPU_DEFAULTS", "gemm_efficiency", "gpu_kernels", "gpu_learner", "gpu_row"]

#: Defaults used when the spec leaves a field (or a ``[device.options]`` entry) out.
GPU_DEFAULTS = {"launch_latency_s": 5e-6, "mem_latency_s": 600e-9, "peak_flops": 20e12, "mem_bandwidth_Bps": 900e9,
                # [device.options] of a GPU (see the module docstring for the sources):
                "dispatch_us": 5.0, "kernel_gap_us": 0.6, "graph_launch_us": 15.0, "gemm_half_batch": 256.0,
                "cuda_graphs": False}


def _param(dev: DeviceSpec, field: str, default: float, notes: list[str], shown: str) -> float:
    value = getattr(dev, field)
    if value is None:
        notes.append(f"assumed {shown}")
        return default
    return float(value)


def gpu_kernels(wl: Workload) -> int:
    """CUDA kernels of one learner step of the built-in DQN on a GPU (see the module docstring)."""
    n_train = sum(1 for ly in wl.layers if ly.trainable)
    return 2 * layer_passes(wl) + 4 * n_train + 30


def gemm_efficiency(batch: int, half_batch: float) -> float:
    """Achieved fraction of peak for the step's small GEMMs: ``eta * BS / (BS + BS_half)``."""
    return GEMM_EFFICIENCY * batch / (batch + half_batch)


def _option(dev: DeviceSpec, name: str, default: float, notes: list[str], shown: str) -> float:
    value = dev.options.get(name)
    if value is None:
        notes.append(f"assumed {shown}")
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise SpecError(f"device {dev.name!r}: options.{name} = {value!r} is invalid; expected a number >= 0.")
    return float(value)


def _flag(dev: DeviceSpec, name: str, default: bool) -> bool:
    value = dev.options.get(name, default)
    if not isinstance(value, bool):
        raise SpecError(f"device {dev.name!r}: options.{name} = {value!r} is invalid; expected true or false.")
    return value


def gpu_learner(dev: DeviceSpec, wl: Workload, notes: list[str] | None = None) -> tuple[float, dict[str, Any]]:
    """One learner step on a GPU, in seconds, and the terms behind it (see the module docstring)."""
    notes = [] if notes is None else notes
    o = _param(dev, "launch_latency_s", GPU_DEFAULTS["launch_latency_s"], notes, "launch latency 5 us")
    lam = _param(dev, "mem_latency_s", GPU_DEFAULTS["mem_latency_s"], notes, "memory latency 600 ns")
    peak = _param(dev, "peak_flops", GPU_DEFAULTS["peak_flops"], notes, "20 TFLOP/s")
    bw = _param(dev, "mem_bandwidth_Bps", GPU_DEFAULTS["mem_bandwidth_Bps"], notes, "900 GB/s")
    graphs = _flag(dev, "cuda_graphs", GPU_DEFAULTS["cuda_graphs"])
    gap = _option(dev, "kernel_gap_us", GPU_DEFAULTS["kernel_gap_us"], notes, "kernel gap 0.6 us") * 1e-6
    half = _option(dev, "gemm_half_batch", GPU_DEFAULTS["gemm_half_batch"], notes, "GEMM half-efficiency batch 256")
    kernels = gpu_kernels(wl)
    eta = gemm_efficiency(wl.batch_size, half)
    work = max(wl.train_flops / (eta * peak), learner_bytes(wl) / bw)
    gpu_side = kernels * (gap + lam) + work
    terms: dict[str, Any] = {"learner_kernels": kernels, "learner_gemm_efficiency": round(eta, 6),
                             "learner_cuda_graphs": graphs}
    if graphs:
        g = _option(dev, "graph_launch_us", GPU_DEFAULTS["graph_launch_us"], notes, "graph launch 15 us") * 1e-6
        host_side = g
        total = g + gpu_side
    else:
        d = _option(dev, "dispatch_us", GPU_DEFAULTS["dispatch_us"], notes, "eager dispatch 5 us per op") * 1e-6
        host_side = learner_ops(wl) * d
        total = o + max(host_side, gpu_side)
    terms.update(learner_host_s=host_side, learner_gpu_s=gpu_side)
    return total, terms


def gpu_row(dev: DeviceSpec, wl: Workload) -> DeviceRow:
    """Analytic row for a GPU (see the module docstring for every formula)."""
    notes: list[str] = []
    o = _param(dev, "launch_latency_s", GPU_DEFAULTS["launch_latency_s"], notes, "launch latency 5 us")
    lam = _param(dev, "mem_latency_s", GPU_DEFAULTS["mem_latency_s"], notes, "memory latency 600 ns")
    bw = _param(dev, "mem_bandwidth_Bps", GPU_DEFAULTS["mem_bandwidth_Bps"], notes, "900 GB/s")
    L, F, S = wl.tree_levels, wl.fanout, wl.priority_bytes
    bs, bsi = wl.batch_size, int(wl.insert_batch or wl.n_actors)
    if wl.replay == "uniform":
        s, u, n = o, 0.0, 0.0
    else:
        s = o + L * lam + bs * L * F * S / bw

        def upd(k: int) -> float:
            return (1 + L) * o + L * lam + 2 * k * L * S / bw

        u = upd(bs)
        n = o + lam + upd(bsi)
    lt, terms = gpu_learner(dev, wl, notes)
    p = dev.active_power_w
    rm_cells = [CostCell(x, p, "analytic") for x in (s, u, n)]
    learner = CostCell(lt, p, "analytic")
    notes = list(dict.fromkeys(notes))
    notes.append("co-located cells = stand-alone cells (RM kernels overlap the learner on separate streams)")
    if not terms["learner_cuda_graphs"]:
        notes.append("learner modelled eager (cuda_graphs = false): the CUDA plugin's runtime does not capture graphs")
    config = {"rm_parallelism": bs, "streams": 2, **terms}
    return DeviceRow(dev.name, dev.kind, *rm_cells, learner, *rm_cells, learner,
                     config=config, notes=tuple(notes))
