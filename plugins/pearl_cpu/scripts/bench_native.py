"""Micro-benchmark of the native CPU sum tree (pearl_cpu.sumtree.CpuSumTree).

Measures items/s per call *including* the Python call and argument conversion,
with pre-generated numpy arrays (int64 indices, float64 masses/priorities), on
a tree filled with random priorities. Each cell is the median (or, with
--stat best, the best) of --repeats runs of about --seconds each; calls cycle
through 64 pre-generated batches, and the trees being compared (thread counts)
take turns one run at a time. On a shared, busy machine "best" estimates what
the code can do, "median" what you will typically get.

Examples:
    python plugins/pearl_cpu/scripts/bench_native.py                       # default grid
    python plugins/pearl_cpu/scripts/bench_native.py --fanouts 8 16 --threads 2
    python plugins/pearl_cpu/scripts/bench_native.py --thresholds          # find split thresholds
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from pearl_cpu.sumtree import CpuSumTree

OPS = ("sample", "update", "get")


STAT = {"median": statistics.median, "best": max}


def _rate(fn, batches, batch: int, seconds: float) -> float:
    """items/s of one repetition: calls cycling through the batches for ~seconds."""
    nb = len(batches)
    calls = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        for k in range(nb):
            fn(*batches[k])
        calls += nb
        t1 = time.perf_counter()
        if t1 >= deadline:
            return calls * batch / (t1 - t0)


def make_tree(capacity: int, fanout: int, threads: int, seed: int = 0) -> CpuSumTree:
    rng = np.random.default_rng(seed)
    tree = CpuSumTree(capacity, fanout, threads=threads)
    if not tree._impl._set_isa(ISA):
        raise SystemExit(f"sample kernel {ISA!r} is not available here")
    tree.update(np.arange(capacity, dtype=np.int64), rng.random(capacity) + 1e-3)
    return tree


def make_inputs(tree: CpuSumTree, op: str, batch: int, seed: int = 1):
    """(fn, batches): 64 pre-generated argument tuples for one op."""
    rng = np.random.default_rng(seed)
    cap = tree.capacity
    if op == "sample":
        total = tree.total()
        return tree.sample, [(rng.random(batch) * total,) for _ in range(64)]
    if op == "update":
        # new priorities on the old scale, so the total (and valid masses) stay put
        return tree.update, [
            (rng.integers(0, cap, batch, dtype=np.int64), rng.random(batch) + 1e-3) for _ in range(64)
        ]
    return tree.get, [(rng.integers(0, cap, batch, dtype=np.int64),) for _ in range(64)]


def bench_cells(trees, op: str, batch: int, seconds: float, repeats: int, stat: str = "median"):
    """One rate per tree; the trees take turns, one repetition each, so a drift of
    a busy machine hits them alike."""
    prepared = []
    for tree in trees:
        fn, batches = make_inputs(tree, op, batch)
        for k in range(min(len(batches), 16)):  # warm up (also starts the worker threads)
            fn(*batches[k])
        prepared.append((fn, batches))
    rates = [[] for _ in trees]
    for _ in range(repeats):
        for i, (fn, batches) in enumerate(prepared):
            rates[i].append(_rate(fn, batches, batch, seconds))
    return [STAT[stat](r) for r in rates]


def fmt_rate(r: float) -> str:
    return f"{r / 1e6:7.2f}M"


def run_grid(args) -> None:
    print(
        f"# items/s ({args.stat} of {args.repeats} x {args.seconds}s, thread counts interleaved), "
        f"per call incl. Python call; python {sys.version.split()[0]}, numpy {np.__version__}, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    header = f"{'capacity':>9} {'fanout':>6} {'thr':>3} {'op':>6} " + " ".join(f"{b:>9}" for b in args.batches)
    print(header)
    for cap in args.capacities:
        for fanout in args.fanouts:
            trees = [make_tree(cap, fanout, threads) for threads in args.threads]
            for op in args.ops:
                cells = [bench_cells(trees, op, b, args.seconds, args.repeats, args.stat) for b in args.batches]
                for i, threads in enumerate(args.threads):
                    print(
                        f"{cap:>9} {fanout:>6} {threads:>3} {op:>6} "
                        + " ".join(f"{fmt_rate(c[i]):>9}" for c in cells),
                        flush=True,
                    )
            del trees


def run_thresholds(args) -> None:
    """For each op, compare threads=2 forced-parallel vs forced-serial at growing batch sizes."""
    cap = args.capacities[0]
    fanout = args.fanouts[0]
    serial, split = make_tree(cap, fanout, 2), make_tree(cap, fanout, 2)
    big = 1 << 40
    serial._impl._set_parallel_thresholds(big, big, big)
    split._impl._set_parallel_thresholds(0, 0, 0, contention_guard=False)
    print(f"# capacity {cap}, fanout {fanout}: items/s serial vs 2 threads (forced), {args.stat} of {args.repeats}")
    print(f"{'op':>6} {'batch':>7} {'serial':>9} {'2 threads':>9}")
    for op in args.ops:
        for b in (64, 128, 256, 512, 1024, 2048, 4096, 16384, 65536):
            s, p = bench_cells([serial, split], op, b, args.seconds, args.repeats, args.stat)
            print(f"{op:>6} {b:>7} {fmt_rate(s):>9} {fmt_rate(p):>9}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--capacities", type=int, nargs="+", default=[2**20, 10**6])
    ap.add_argument("--fanouts", type=int, nargs="+", default=[2, 4, 8, 16, 32])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--batches", type=int, nargs="+", default=[32, 256, 1024, 4096])
    ap.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    ap.add_argument("--seconds", type=float, default=0.2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--stat", choices=sorted(STAT), default="median", help="aggregate over repeats")
    ap.add_argument("--isa", choices=["auto", "avx2", "baseline"], default="auto", help="sample kernel")
    ap.add_argument("--thresholds", action="store_true", help="measure the serial/parallel crossover")
    args = ap.parse_args(argv)
    global ISA
    ISA = args.isa
    if args.thresholds:
        run_thresholds(args)
    else:
        run_grid(args)


if __name__ == "__main__":
    main()
