r"""Analytic cost models for CPUs and GPUs that are described in a spec but not measured.

They fill a :class:`~pearl_core.composer.matrix.DeviceRow` with ``"analytic"``
cells, compute only (Algorithm 1 adds communication). They are deliberately
simple, roofline-style models: good enough to rank a described device against
others, not a substitute for profiling a present one. FPGAs are modelled by the
FPGA backend (the ``AnalyticCostModel`` protocol of :mod:`pearl_core.composer.costs`), not here.

Symbols (SI units; the spec field in brackets, with the default used when it is absent)::

    BS, BS_i   batch and insertion batch         L  tree levels below the root (F^L >= capacity)
    F          fanout                            S  bytes of one tree node (the priority size, 8)
    o          launch_latency_s  [CPU 5 us per dispatched op / native call; GPU 5 us: one launch to start]
    lam        mem_latency_s     [CPU 90 ns; GPU 600 ns]: one dependent random access
    B          mem_bandwidth_Bps [CPU 8 GB/s per core; GPU 900 GB/s]
    Pk         peak_flops        [CPU 32 GFLOP/s per core; GPU 20 TFLOP/s]
    eta        achieved fraction of peak for the small GEMMs of RL models: 0.5 (GPU: the
               plateau of eta(BS), see the GPU learner below)

**Replay Manager, CPU** (``t`` threads; each query walks the tree alone, so a
thread handles ``ceil(BS/t)`` of them one after another; a core streams at ``B/cores``)::

    sample = o + ceil(BS/t)   * L     * (lam + F*S/(B/cores))     read F siblings per level
    update = o + ceil(BS/t)   * L     * (lam + S/(B/cores))       add the delta on the path to the root
    insert = 2o + ceil(BS_i/t) * (L+1) * (lam + S/(B/cores))      retrieve the old leaf, then update

**Replay Manager, GPU** (one thread per query, parallelism = BS as the paper
prescribes; levels are dependent loads, the batch is spread over the device)::

    sample = o + L*lam + BS*L*F*S/B                       one kernel
    update = (1+L)*o + L*lam + 2*BS*L*S/B                 dedupe kernel + one scatter-add per level
    insert = o + lam + [(1+L)*o + L*lam + 2*BS_i*L*S/B]   retrieval kernel + update

Uniform replay has no tree: ``sample = o`` (one random-index call), ``update = insert = 0``.

**Learner, CPU** (``FLOPs = BS * sum(2 * MACs * passes)`` over the trainer's layers,
:attr:`Workload.train_flops`: ``BS*(2*fwd MACs + 4*trainable MACs)`` for a DQN, more for an
actor-critic whose critics are evaluated again for the actor's loss,
:meth:`~pearl_core.trainer.Trainer.learner_passes`)::

    ops     = 2*N_layers + 13*N_trainable + 49        dispatched ops per step: forward 2 per
                                                       layer evaluation (N_layers counts each
                                                       layer's forward passes); backward, clipping and Adam 13 per trainable
                                                       layer; batch conversion, loss, TD errors 49
    bytes   = 4*params + 4*trainable_params*7 + 3*activations     weights read; grads, Adam m/v,
                                                       weight write-back; activations out, kept, reread
    learner = ops*o + max(FLOPs / (eta*Pk'), bytes / B')

where with ``t`` learner threads ``Pk' = t*Pk/cores`` and ``B' = min(B, t*B/cores)``.
The op count is calibrated, not guessed: the torch profiler counts 83, 100 and
117 top-level ``aten`` ops in one ``update_policy`` of the built-in DQN with 1, 2
and 3 hidden layers (online + target network), which this formula reproduces.

**Learner, GPU.** Eager PyTorch launches asynchronously: the CPU dispatches
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

**Threads on a CPU.** ``T = threads - n_actors`` on the host (the actors keep
those busy), all threads elsewhere, at least 1. Alone, the RM gets
``t = clip(T, 1, BS)`` and the learner ``T``. Co-located with ``T >= 2``, every
split ``t_L + t_R = T`` is evaluated and the one minimising
``sample + max(update + insert, learner)`` is kept (``t_R`` clipped to
``[1, BS]``). With ``T = 1`` both share one thread: the RM cells keep ``t = 1``
and the co-located learner cell becomes ``learner + update + insert`` (it is
descheduled while the RM works), so Eq. 7 counts each piece once:
``sample + learner + update + insert``.

**GPU co-location**: RM kernels are latency-bound and leave the SMs mostly idle,
so the co-located cells equal the stand-alone ones (separate streams overlap).

**Power of a cell**: CPU ``idle + (active - idle) * threads_used / threads``;
GPU ``active`` (a busy GPU draws near its board power even for small kernels).
"""

from __future__ import annotations

import math
from typing import Any

from pearl_core.composer.matrix import CostCell, DeviceRow
from pearl_core.composer.spec import DeviceSpec
from pearl_core.composer.workload import Workload
from pearl_core.errors import SpecError

__all__ = ["CPU_DEFAULTS", "GPU_DEFAULTS", "GEMM_EFFICIENCY", "cpu_row", "gemm_efficiency", "gpu_kernels", "gpu_learner",
           "gpu_row", "learner_ops"]

#: Defaults per core (flops, bandwidth) or per device, used when the spec leaves a field out.
CPU_DEFAULTS = {"launch_latency_s": 5e-6, "mem_latency_s": 90e-9, "peak_flops_per_core": 32e9,
                "mem_bandwidth_per_core": 8e9}
GPU_DEFAULTS = {"launch_latency_s": 5e-6, "mem_latency_s": 600e-9, "peak_flops": 20e12, "mem_bandwidth_Bps": 900e9,
                # [device.options] of a GPU (see the module docstring for the sources):
                "dispatch_us": 5.0, "kernel_gap_us": 0.6, "graph_launch_us": 15.0, "gemm_half_batch": 256.0,
                "cuda_graphs": False}
GEMM_EFFICIENCY = 0.5


def _param(dev: DeviceSpec, field: str, default: float, notes: list[str], shown: str) -> float:
    value = getattr(dev, field)
    if value is None:
        notes.append(f"assumed {shown}")
        return default
    return float(value)


def _layer_passes(wl: Workload) -> int:
    """Layer evaluations of one step: each layer's forward passes (1 for every layer of a DQN;
    an actor-critic's critics are evaluated again for the actor's loss), rounded up."""
    return math.ceil(sum(ly.forwards for ly in wl.layers) - 1e-9)


def learner_ops(wl: Workload) -> int:
    """Dispatched ops (CPU) or kernels (GPU) of one learner step (see the module docstring)."""
    n_train = sum(1 for ly in wl.layers if ly.trainable)
    return 2 * _layer_passes(wl) + 13 * n_train + 49


def _learner_bytes(wl: Workload) -> float:
    return wl.param_bytes + 7 * wl.trainable_param_bytes + 3 * wl.activation_bytes


def _learner_time(wl: Workload, o: float, flops_rate: float, bw: float) -> float:
    return learner_ops(wl) * o + max(wl.train_flops / (GEMM_EFFICIENCY * flops_rate), _learner_bytes(wl) / bw)


def cpu_row(dev: DeviceSpec, wl: Workload, *, is_host: bool) -> DeviceRow:
    """Analytic row for a CPU (see the module docstring for every formula)."""
    notes: list[str] = []
    cores = dev.cores or 1
    threads = dev.threads or cores
    o = _param(dev, "launch_latency_s", CPU_DEFAULTS["launch_latency_s"], notes, "launch latency 5 us")
    lam = _param(dev, "mem_latency_s", CPU_DEFAULTS["mem_latency_s"], notes, "memory latency 90 ns")
    peak = _param(dev, "peak_flops", CPU_DEFAULTS["peak_flops_per_core"] * cores, notes, "32 GFLOP/s per core")
    bw = _param(dev, "mem_bandwidth_Bps", CPU_DEFAULTS["mem_bandwidth_per_core"] * cores, notes, "8 GB/s per core")
    avail = max(1, threads - (wl.n_actors if is_host else 0))
    if is_host and threads - wl.n_actors < 1:
        notes.append(f"{wl.n_actors} actor(s) oversubscribe {threads} thread(s); RM/learner get 1")
    per_core_bw = bw / cores
    L, F, S = wl.tree_levels, wl.fanout, wl.priority_bytes
    bs, bsi = wl.batch_size, int(wl.insert_batch or wl.n_actors)

    def rm(t: int) -> tuple[float, float, float]:
        if wl.replay == "uniform":
            return o, 0.0, 0.0
        step = lam + S / per_core_bw
        return (o + math.ceil(bs / t) * L * (lam + F * S / per_core_bw),
                o + math.ceil(bs / t) * L * step,
                2 * o + math.ceil(bsi / t) * (L + 1) * step)

    def learn(t: int) -> float:
        return _learner_time(wl, o, peak * t / cores, min(bw, per_core_bw * t))

    def power(t: int) -> float:
        return dev.idle_power_w + (dev.active_power_w - dev.idle_power_w) * min(1.0, t / threads)

    def cells(times: tuple[float, ...], t_rm: int) -> list[CostCell]:
        return [CostCell(x, power(t_rm), "analytic") for x in times]

    t_rm = min(avail, bs)
    s, u, n = rm(t_rm)
    lt = learn(avail)
    config: dict[str, Any] = {"rm_threads": t_rm, "learner_threads": avail}
    if avail >= 2:
        _, co_l_threads, co_r_threads, co_rm, co_l = _best_split(avail, bs, rm, learn)
        co_cells = cells(co_rm, co_r_threads) + [CostCell(co_l, power(co_l_threads), "analytic")]
        config.update(co_rm_threads=co_r_threads, co_learner_threads=co_l_threads, co_time_sliced=False)
    else:
        # One thread for both: the learner is descheduled while the RM updates and inserts.
        co_cells = cells((s, u, n), 1) + [CostCell(lt + u + n, power(1), "analytic")]
        config.update(co_rm_threads=1, co_learner_threads=1, co_time_sliced=True)
    return DeviceRow(dev.name, dev.kind, *cells((s, u, n), t_rm), CostCell(lt, power(avail), "analytic"),
                     *co_cells, config=config, notes=tuple(notes))


def _best_split(avail: int, bs: int, rm, learn) -> tuple:
    """The split ``t_L + t_R = avail`` minimising ``sample + max(update + insert, learner)``; the first on ties.

    The same answer as trying every ``t_L`` in ``1 .. avail - 1`` in order, in
    ``O(bs + log avail)`` evaluations instead of ``O(avail)``: while ``t_R`` is
    clipped to ``bs`` (``t_L <= avail - bs``) the RM terms are constant and the
    learner's time does not grow with its threads, so the total is monotone
    there (rounded floating-point operations keep that) and a binary search
    finds the first ``t_L`` at its minimum; the at most ``bs - 1`` splits past
    it are tried one by one.
    """

    def candidate(t_l: int) -> tuple:
        t_r = max(1, min(avail - t_l, bs))
        cs, cu, cn = rm(t_r)
        cl = learn(t_l)
        return cs + max(cu + cn, cl), t_l, t_r, (cs, cu, cn), cl

    best = None
    last_clipped = avail - bs  # the largest t_l whose t_r is clipped to bs
    if last_clipped >= 1:
        floor = candidate(last_clipped)[0]
        lo, hi = 1, last_clipped  # the first t_l in [lo, hi] with total == floor (non-increasing totals)
        while lo < hi:
            mid = (lo + hi) // 2
            if candidate(mid)[0] <= floor:
                hi = mid
            else:
                lo = mid + 1
        best = candidate(lo)
    for t_l in range(max(1, last_clipped + 1), avail):
        cand = candidate(t_l)
        if best is None or cand[0] < best[0]:
            best = cand
    return best


def gpu_kernels(wl: Workload) -> int:
    """CUDA kernels of one learner step of the built-in DQN on a GPU (see the module docstring)."""
    n_train = sum(1 for ly in wl.layers if ly.trainable)
    return 2 * _layer_passes(wl) + 4 * n_train + 30


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
    work = max(wl.train_flops / (eta * peak), _learner_bytes(wl) / bw)
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
