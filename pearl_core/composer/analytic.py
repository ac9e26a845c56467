r"""The core's default analytic model: a host CPU described in a spec but not measured.

It fills a :class:`~pearl_core.composer.matrix.DeviceRow` with ``"analytic"``
cells, compute only (Algorithm 1 adds communication). It is deliberately
simple, roofline-style: good enough to rank a described device against
others, not a substitute for profiling a present one. It runs the core's own
host code paths (numpy sum tree, torch on the CPU), so it needs no plugin.
Every other kind is modelled by its backend (the ``AnalyticCostModel``
protocol of :mod:`pearl_core.composer.costs`): the CUDA plugin's ``pearl_cuda.model``
for GPUs, the FPGA plugin's Eq. 2-6 model for FPGAs. The workload figures such
a model needs (:func:`learner_ops`, :func:`learner_bytes`, :func:`layer_passes`,
:data:`GEMM_EFFICIENCY`) are kind-neutral and public in :mod:`pearl_core.sdk`.

Symbols (SI units; the spec field in brackets, with the default used when it is absent)::

    BS, BS_i   batch and insertion batch         L  tree levels below the root (F^L >= capacity)
    F          fanout                            S  bytes of one tree node (the priority size, 8)
    o          launch_latency_s  [5 us per dispatched op / native call]
    lam        mem_latency_s     [90 ns]: one dependent random access
    B          mem_bandwidth_Bps [8 GB/s per core]
    Pk         peak_flops        [32 GFLOP/s per core]
    eta        achieved fraction of peak for the small GEMMs of RL models: 0.5 (GEMM_EFFICIENCY)

**Replay Manager, CPU** (``t`` threads; each query walks the tree alone, so a
thread handles ``ceil(BS/t)`` of them one after another; a core streams at ``B/cores``)::

    sample = o + ceil(BS/t)   * L     * (lam + F*S/(B/cores))     read F siblings per level
    update = o + ceil(BS/t)   * L     * (lam + S/(B/cores))       add the delta on the path to the root
    insert = 2o + ceil(BS_i/t) * (L+1) * (lam + S/(B/cores))      retrieve the old leaf, then update

Uniform replay has no tree: ``sample = o`` (one random-index call), ``update = insert = 0``.

**Learner, CPU** (``FLOPs = BS * sum(2 * MACs * passes)`` over the trainer's layers,
:attr:`Workload.train_flops`: ``BS*(2*fwd MACs + 4*trainable MACs)`` for a DQN, more for an
actor-critic whose critics are evaluated again for the actor's loss,
:meth:`~pearl_core.trainer.Trainer.learner_passes`)::

    ops     = 2*N_layers + 13*N_trainable + 49        dispatched ops per step: forward 2 per
                                                       layer evaluation (N_layers counts each
                                                       layer's forward passes); backward, clipping
                                                       and Adam 13 per trainable layer; batch
                                                       conversion, loss, TD errors 49
    bytes   = 4*params + 4*trainable_params*7 + 3*activations     weights read; grads, Adam m/v,
                                                       weight write-back; activations out, kept, reread
    learner = ops*o + max(FLOPs / (eta*Pk'), bytes / B')

where with ``t`` learner threads ``Pk' = t*Pk/cores`` and ``B' = min(B, t*B/cores)``.
The op count is calibrated, not guessed: the torch profiler counts 83, 100 and
117 top-level ``aten`` ops in one ``update_policy`` of the built-in DQN with 1, 2
and 3 hidden layers (online + target network), which this formula reproduces.

**Threads on a CPU.** ``T = threads - n_actors`` on the host (the actors keep
those busy), all threads elsewhere, at least 1. Alone, the RM gets
``t = clip(T, 1, BS)`` and the learner ``T``. Co-located with ``T >= 2``, every
split ``t_L + t_R = T`` is evaluated and the one minimising
``sample + max(update + insert, learner)`` is kept (``t_R`` clipped to
``[1, BS]``). With ``T = 1`` both share one thread: the RM cells keep ``t = 1``
and the co-located learner cell becomes ``learner + update + insert`` (it is
descheduled while the RM works), so Eq. 7 counts each piece once:
``sample + learner + update + insert``.

**Power of a cell**: ``idle + (active - idle) * threads_used / threads``.
"""

from __future__ import annotations

import math
from typing import Any

from pearl_core.composer.matrix import CostCell, DeviceRow
from pearl_core.composer.spec import DeviceSpec
from pearl_core.composer.workload import Workload

__all__ = ["CPU_DEFAULTS", "GEMM_EFFICIENCY", "cpu_row", "layer_passes", "learner_bytes", "learner_ops"]

#: Defaults per core (flops, bandwidth) or per device, used when the spec leaves a field out.
CPU_DEFAULTS = {"launch_latency_s": 5e-6, "mem_latency_s": 90e-9, "peak_flops_per_core": 32e9,
                "mem_bandwidth_per_core": 8e9}
#: Achieved fraction of peak FLOP/s in the small GEMMs of RL models (a device model may scale it).
GEMM_EFFICIENCY = 0.5


def _param(dev: DeviceSpec, field: str, default: float, notes: list[str], shown: str) -> float:
    value = getattr(dev, field)
    if value is None:
        notes.append(f"assumed {shown}")
        return default
    return float(value)


def layer_passes(wl: Workload) -> int:
    """Layer evaluations of one step: each layer's forward passes (1 for every layer of a DQN;
    an actor-critic's critics are evaluated again for the actor's loss), rounded up."""
    return math.ceil(sum(ly.forwards for ly in wl.layers) - 1e-9)


def learner_ops(wl: Workload) -> int:
    """Dispatched ops of one learner step of the built-in trainers, on any device (see the module docstring)."""
    n_train = sum(1 for ly in wl.layers if ly.trainable)
    return 2 * layer_passes(wl) + 13 * n_train + 49


def learner_bytes(wl: Workload) -> float:
    """Bytes one learner step moves: weights read; grads, Adam m/v, write-back; activations (module docstring)."""
    return wl.param_bytes + 7 * wl.trainable_param_bytes + 3 * wl.activation_bytes


def _learner_time(wl: Workload, o: float, flops_rate: float, bw: float) -> float:
    return learner_ops(wl) * o + max(wl.train_flops / (GEMM_EFFICIENCY * flops_rate), learner_bytes(wl) / bw)


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
