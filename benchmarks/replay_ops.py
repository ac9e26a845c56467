#!/usr/bin/env python
"""Replay-ops benchmark: PEARL sum-tree backends against peer libraries, in one run.

Ops (items/s = batch * calls / elapsed):

* ``sample``: one call finds the leaves for a batch of masses;
* ``update``: one call sets a batch of (index, priority) pairs;
* ``insert``: one call reads the priorities at a batch of indices (``get``) and
  then sets new priorities at the same indices (``update``); counted as
  ``batch`` items inserted.

Every contestant gets identical inputs: the trees are filled with the same
``uniform(0.1, 10)`` priorities, and each (capacity, op, batch) cell draws one
pool of masses in ``[0, total)``, indices and priorities that is generated
before timing and cycled through. Each cell is timed ``--reps`` times (the
contestants take turns, one repetition each, so slow drifts of a noisy machine
hit everyone alike) over enough calls to last ``--min-time`` seconds; the median
is reported.

Run ``python benchmarks/replay_ops.py --help``; see ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import faulthandler
import gc
import importlib.metadata
import itertools
import math
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers as _peers  # (benchmarks/peers.py, beside this file)

OPS = ("sample", "update", "insert")
FULL_CAPACITIES = (2**20, 10**6)
FULL_FANOUTS = (2, 4, 8, 16, 32)
FULL_BATCHES = (32, 256, 1024, 4096)
QUICK_PEERS = ("numpy", "cpprb")  # the others import torch / compile with numba (~10 s)
SPEEDUP_GOAL = 3.0


# --------------------------------------------------------------------------- contestants


class PearlContestant:
    """One (backend, fanout, threads) configuration of a PEARL sum tree."""

    group = "pearl"

    def __init__(self, backend_name, factory, fanout, threads):
        self.backend_name = backend_name
        self.factory = factory  # factory(capacity, fanout, threads) -> SumTree
        self.fanout = fanout
        self.threads = threads  # None: the backend takes no threads option
        t = "-" if threads is None else str(threads)
        self.label = f"pearl {backend_name} f={fanout} t={t}"

    def build(self, capacity, priorities):
        self.tree = self.factory(capacity, self.fanout, self.threads)
        self.tree.update(np.arange(capacity, dtype=np.int64), priorities)

    def prepare(self, op, pool):
        t = self.tree
        if op == "sample":
            return t.sample, list(pool["masses"])
        pairs = list(zip(list(pool["indices"]), list(pool["priorities"])))
        if op == "update":
            update = t.update
            return (lambda a: update(a[0], a[1])), pairs
        get, update = t.get, t.update

        def insert(a):
            get(a[0])
            update(a[0], a[1])

        return insert, pairs

    def sample_check(self, masses):
        return np.asarray(self.tree.sample(masses))

    def close(self):
        self.tree = None


class PeerContestant:
    group = "peer"

    def __init__(self, adapter):
        self.adapter = adapter
        self.label = f"peer {adapter.label}"

    def build(self, capacity, priorities):
        self.adapter.build(capacity, priorities)

    def prepare(self, op, pool):
        return self.adapter.prepare(op, pool)

    def sample_check(self, masses):
        return self.adapter.sample_check(masses)

    def close(self):
        self.adapter.close()


def _reference_factory():
    from pearl_core.testing.reference import ReferenceSumTree

    return lambda capacity, fanout, threads: ReferenceSumTree(capacity, fanout)


def pearl_contestants(wanted, fanouts, threads_list, skipped):
    """Contestants for the PEARL backends named in ``wanted`` (``None``: every available one)."""
    out = []
    try:
        import pearl_core

        records = list(pearl_core.list_backends())
    except Exception as exc:  # noqa: BLE001 - the registry may not exist yet / be broken: reported as skipped
        records = None
        registry_error = f"{type(exc).__name__}: {exc}"
    names = []
    if records is None:
        for name in wanted or ["(all)"]:
            if name != "reference":
                skipped.append((f"pearl {name}", f"pearl_core.list_backends() failed: {registry_error}"))
        if wanted and "reference" in wanted:
            names.append(("reference", None))
    else:
        by_name = {r.name: r for r in records}
        for r in records:
            if wanted is not None and r.name not in wanted:
                continue
            if not r.available:
                skipped.append((f"pearl {r.name}", f"backend unavailable: {r.reason}"))
                continue
            names.append((r.name, r))
        for name in wanted or []:
            if name not in by_name:
                if name == "reference":
                    names.append(("reference", None))
                else:
                    skipped.append((f"pearl {name}", f"no such backend; registered: {sorted(by_name)}"))

    for name, _record in names:
        if name == "reference" and _record is None:
            # the oracle (O(capacity) per sample), only when asked for by name
            factory = _reference_factory()
            out += [PearlContestant("reference", factory, f, None) for f in fanouts]
            continue
        try:
            backend = pearl_core.get_backend(name)
        except Exception as exc:  # noqa: BLE001 - a benchmark row records any backend's failure
            skipped.append((f"pearl {name}", f"get_backend failed: {type(exc).__name__}: {exc}"))
            continue
        emulated = [d.name for d in backend.devices() if (d.details or {}).get("emulated")]
        if emulated and not (wanted and name in wanted):
            # A functional emulator's timings are CPU timings, not the device's: never in the table
            # unless asked for by name (and then labelled).
            skipped.append((f"pearl {name}", f"device(s) {emulated} are functional emulators; their timings "
                            "are not the hardware's (pass --backends " + name + " to time the emulator anyway)"))
            continue
        if emulated:
            name_label = f"{name} (emulator)"
        else:
            name_label = name
        takes_threads = True
        try:
            backend.make_sum_tree(8, 2, threads=1)
        except TypeError:
            takes_threads = False
        except Exception as exc:  # noqa: BLE001 - a benchmark row records any backend's failure
            skipped.append((f"pearl {name}", f"make_sum_tree(8, 2, threads=1) failed: {type(exc).__name__}: {exc}"))
            continue
        if takes_threads:

            def factory(capacity, fanout, threads, _b=backend):
                return _b.make_sum_tree(capacity, fanout, threads=threads)

            configs = [(f, t) for f in fanouts for t in threads_list]
        else:

            def factory(capacity, fanout, threads, _b=backend):
                return _b.make_sum_tree(capacity, fanout)

            configs = [(f, None) for f in fanouts]
        out += [PearlContestant(name_label, factory, f, t) for f, t in configs]
    return out


def peer_contestants(wanted, skipped):
    out = []
    for name in wanted:
        try:
            out.append(PeerContestant(_peers.load_peer(name)))
        except _peers.PeerUnavailable as exc:
            skipped.append((f"peer {name}", str(exc)))
    return out


# --------------------------------------------------------------------------- timing


def _timed(call, args, n):
    it = itertools.islice(itertools.cycle(args), n)
    t0 = time.perf_counter()
    for a in it:
        call(a)
    return time.perf_counter() - t0


def calibrate(call, args, min_time):
    """Calls per repetition so that one repetition lasts about ``min_time`` seconds."""
    call(args[0])  # warm-up (first-touch, lazy compilation, caches)
    n = 1
    while True:
        dt = _timed(call, args, n)
        if dt >= 0.05 * min_time or n >= 1 << 30:
            break
        grow = 2 if dt <= 0 else max(2, min(64, int(0.1 * min_time / dt)))
        n *= grow
    return max(1, math.ceil(n * min_time / max(dt, 1e-9)))


def make_pool(capacity, batch, total, op_code, seed):
    rows = max(4, min(2048, 2**16 // batch))
    rng = np.random.default_rng([seed, capacity, batch, op_code])
    return {
        # strictly below the total (with margin for the trees' own rounding)
        "masses": rng.random((rows, batch)) * (total * (1.0 - 1e-9)),
        "indices": rng.integers(0, capacity, size=(rows, batch), dtype=np.int64),
        "priorities": rng.uniform(0.1, 10.0, size=(rows, batch)),
    }


# --------------------------------------------------------------------------- formatting


def fmt_capacity(c):
    if c > 1 and c & (c - 1) == 0:
        return f"2^{c.bit_length() - 1}"
    e = round(math.log10(c)) if c > 0 else 0
    if 10**e == c and e >= 3:
        return f"10^{e}"
    return str(c)


def parse_capacity(s):
    s = s.strip().replace(" ", "")
    m = re.fullmatch(r"(\d+)(?:\^|\*\*)(\d+)", s)
    if m:
        return int(m.group(1)) ** int(m.group(2))
    if re.fullmatch(r"\d+(?:\.\d*)?[eE]\d+", s):
        v = float(s)
        if v != int(v):
            raise argparse.ArgumentTypeError(f"capacity {s!r} is not an integer")
        return int(v)
    try:
        return int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad capacity {s!r}; use e.g. 2^20, 10^6, 1e6 or 4096") from None


def _int_list(s):
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}") from None


def _name_list(s):
    return [x.strip() for x in s.split(",") if x.strip()]


def md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return lines


def _dist_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_info():
    model = None
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
                break
    except (OSError, subprocess.SubprocessError):
        pass
    if model is None:
        model = platform.processor() or platform.machine()
    mem = None
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
                    break
    except OSError:
        pass
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    versions = {
        d: _dist_version(d) for d in ("numpy", "torch", "tianshou", "torchrl", "cpprb", "pearl-core", "pearl-cpu")
    }
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": model,
        "cores": f"{os.cpu_count()} (os.cpu_count), {affinity} usable (affinity)",
        "memory": mem or "?",
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "versions": ", ".join(f"{k} {v}" for k, v in versions.items()),
        "load": _loadavg(),
    }


def _loadavg():
    try:
        return "/".join(f"{x:.2f}" for x in os.getloadavg()) + " (1/5/15 min)"
    except OSError:
        return "?"


class Report:
    """Markdown lines, echoed to stdout as they are produced."""

    def __init__(self):
        self.lines = []

    def add(self, *lines):
        for line in lines:
            self.lines.append(line)
            print(line, flush=True)

    def text(self):
        return "\n".join(self.lines) + "\n"


def _progress(msg):
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- main


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Benchmark PEARL sum-tree backends against peer libraries (sample / update / insert).",
    )
    p.add_argument("--quick", action="store_true",
                   help="tiny smoke run (capacity 2^12, batches 32,256, fanout 16, 3 short reps, fast peers)")
    p.add_argument("--out", metavar="FILE", help="also write the markdown report to FILE")
    p.add_argument("--backends", default="all",
                   help="comma list of PEARL backends, 'all' (every available one) or 'none'; "
                        "'reference' selects the O(capacity) oracle")
    p.add_argument("--peers", default=None,
                   help=f"comma list of peers from {','.join(_peers.PEER_NAMES)}, 'all' or 'none' "
                        f"(default: all; --quick: {','.join(QUICK_PEERS)})")
    p.add_argument("--fanouts", type=_int_list, default=None, help="PEARL fanouts (default 2,4,8,16,32; --quick: 16)")
    p.add_argument("--batches", type=_int_list, default=None,
                   help="batch sizes (default 32,256,1024,4096; --quick: 32,256)")
    p.add_argument("--capacities", default=None, help="comma list, e.g. 2^20,10^6 (default; --quick: 2^12)")
    p.add_argument("--threads", default="1,all",
                   help="threads for PEARL backends that take them: comma list, 'all' = os.cpu_count() (default 1,all)")
    p.add_argument("--ops", default=",".join(OPS), help="comma list of sample,update,insert")
    p.add_argument("--reps", type=int, default=None,
                   help="repetitions per cell; the median is reported (default 5; --quick: 3)")
    p.add_argument("--min-time", type=float, default=None, help="seconds per repetition (default 0.2; --quick: 0.01)")
    p.add_argument("--budget", type=float, default=660.0,
                   help="seconds the timed part may take; --min-time shrinks to fit (default 660)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    q = args.quick
    args.fanouts = args.fanouts or ([16] if q else list(FULL_FANOUTS))
    args.batches = args.batches or ([32, 256] if q else list(FULL_BATCHES))
    if args.capacities is None:
        args.capacities = [2**12] if q else list(FULL_CAPACITIES)
    else:
        args.capacities = [parse_capacity(c) for c in args.capacities.split(",") if c.strip()]
    args.reps = args.reps or (3 if q else 5)
    args.min_time = args.min_time or (0.01 if q else 0.2)

    cores = os.cpu_count() or 1
    threads = []
    for t in _name_list(args.threads):
        threads.append(cores if t == "all" else int(t))
    args.threads = sorted(set(threads))

    ops = _name_list(args.ops)
    bad = [o for o in ops if o not in OPS]
    if bad:
        p.error(f"unknown ops {bad}; choose from {OPS}")
    args.ops = [o for o in OPS if o in ops]  # sample first: it needs the unmodified totals

    if args.peers is None:
        args.peers = list(QUICK_PEERS) if q else list(_peers.PEER_NAMES)
        args.peers_default_quick = q
    else:
        args.peers_default_quick = False
        args.peers = ([] if args.peers == "none" else list(_peers.PEER_NAMES) if args.peers == "all"
                      else _name_list(args.peers))
    args.backends = None if args.backends == "all" else [] if args.backends == "none" else _name_list(args.backends)
    for name, vals in (("batches", args.batches), ("fanouts", args.fanouts), ("capacities", args.capacities)):
        if not vals or min(vals) < 1:
            p.error(f"--{name} must be positive")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    faulthandler.enable()  # a crash in a native contestant names the cell it was in
    t_start = time.perf_counter()
    rep = Report()
    skipped = []
    if args.peers_default_quick:
        for name in _peers.PEER_NAMES:
            if name not in args.peers:
                skipped.append((f"peer {name}", "not run by --quick (slow import); pass --peers all to include"))

    _progress("loading contestants ...")
    pearls = pearl_contestants(args.backends, args.fanouts, args.threads, skipped)
    peer_list = peer_contestants(args.peers, skipped)
    contestants = pearls + peer_list

    info = machine_info()
    rep.add("# PEARL replay-ops benchmark", "")
    rep.add(f"- date: {info['date']}")
    command = [os.path.basename(sys.executable)] + [sys.argv[0]] + (sys.argv[1:] if argv is None else list(argv))
    rep.add(f"- command: `{shlex.join(command)}`")
    rep.add(f"- CPU: {info['cpu']}; cores: {info['cores']}; memory: {info['memory']}")
    rep.add(f"- OS: {info['os']}; Python {info['python']}; load average at start: {info['load']}")
    rep.add(f"- versions: {info['versions']}")
    for c in peer_list:
        rep.add(f"- peer `{c.adapter.name}`: {c.adapter.version()}")

    n_cells = len(args.capacities) * len(args.ops) * len(args.batches) * len(contestants)
    min_time = args.min_time
    projected = n_cells * (args.reps + 0.3) * min_time
    if n_cells and projected > args.budget:
        min_time = args.budget / (n_cells * (args.reps + 0.3))
        rep.add(f"- note: {n_cells} cells x {args.reps} reps would take ~{projected:.0f} s; "
                f"seconds per repetition lowered from {args.min_time} to {min_time:.3f} "
                f"to fit --budget {args.budget:.0f} s")
    rep.add(f"- method: median of {args.reps} repetitions of >= {min_time:.3g} s each (contestants interleaved); "
            f"items/s = batch x calls / elapsed; tree filled with uniform(0.1, 10) priorities")
    rep.add("")
    if skipped:
        rep.add("## Skipped", "")
        rep.add(*md_table(["contestant", "reason"], [(n, r.replace("|", "\\|")) for n, r in skipped]))
        rep.add("")
    if not contestants:
        rep.add("No contestant could run; nothing to measure.")
        _write(args, rep)
        return 1

    results = {}  # (capacity, op, batch) -> list of (contestant, median, spread, calls)
    checks = []
    for capacity in args.capacities:
        rng = np.random.default_rng([args.seed, capacity])
        prios = rng.uniform(0.1, 10.0, size=capacity)
        total = math.fsum(prios.tolist())
        live = []
        for c in contestants:
            _progress(f"[{fmt_capacity(capacity)}] building {c.label} ...")
            try:
                c.build(capacity, prios)
            except Exception as exc:  # noqa: BLE001 - a benchmark row records any contestant's failure
                checks.append((fmt_capacity(capacity), c.label, f"build failed, skipped: {type(exc).__name__}: {exc}"))
                continue
            live.append(c)
        # agreement of sample() with the exact answer, before any update
        masses = rng.random(4096) * (total * (1.0 - 1e-9))
        exact = np.searchsorted(np.cumsum(prios), masses, side="right")
        for c in list(live):
            try:
                got = c.sample_check(masses)
            except Exception as exc:  # noqa: BLE001 - a benchmark row records any contestant's failure
                checks.append((fmt_capacity(capacity), c.label, f"sample failed, skipped: {type(exc).__name__}: {exc}"))
                c.close()
                live.remove(c)
                continue
            if got is None:
                checks.append((fmt_capacity(capacity), c.label, "n/a (draws its own masses)"))
            else:
                agree = float(np.mean(np.asarray(got, dtype=np.int64) == exact))
                off = int(np.max(np.abs(np.asarray(got, dtype=np.int64) - exact)))
                checks.append((fmt_capacity(capacity), c.label, f"{agree:.2%} exact (max index error {off})"))

        for op in args.ops:
            for batch in args.batches:
                pool = make_pool(capacity, batch, total, OPS.index(op), args.seed)
                prepared = []
                for c in live:
                    call, cargs = c.prepare(op, pool)
                    prepared.append((c, call, cargs))
                _progress(f"[{fmt_capacity(capacity)} {op} b={batch}] calibrating {len(prepared)} contestants ...")
                plan = []
                for c, call, cargs in prepared:
                    try:
                        n = calibrate(call, cargs, min_time)
                    except Exception as exc:  # noqa: BLE001 - a benchmark row records any contestant's failure
                        checks.append((fmt_capacity(capacity), c.label,
                                       f"{op} b={batch} failed: {type(exc).__name__}: {exc}"))
                        continue
                    plan.append((c, call, cargs, n))
                times = {id(c): [] for c, *_ in plan}
                gc.collect()
                gc.disable()
                try:
                    for r in range(args.reps):
                        k = r % max(1, len(plan))
                        for c, call, cargs, n in plan[k:] + plan[:k]:  # rotate who goes first
                            times[id(c)].append(batch * n / _timed(call, cargs, n))
                finally:
                    gc.enable()
                cell = []
                for c, call, cargs, n in plan:
                    ts = times[id(c)]
                    med = statistics.median(ts)
                    cell.append((c, med, (max(ts) - min(ts)) / med, n))
                results[(capacity, op, batch)] = cell
                _emit_cell(rep, capacity, op, batch, cell)
                _write(args, rep, quiet=True)  # partial results survive a crash
        for c in live:
            c.close()
        gc.collect()

    if checks:
        rep.add("## Sample agreement with the exact answer (4096 masses, before any update)", "")
        rep.add(*md_table(["capacity", "contestant", "result"], checks))
        rep.add("")
    _emit_summary(rep, args, results)
    rep.add("", f"Total wall time: {time.perf_counter() - t_start:.0f} s; load average at end: {_loadavg()}")
    _write(args, rep)
    return 0


def _emit_cell(rep, capacity, op, batch, cell):
    peer_rates = [m for c, m, _, _ in cell if c.group == "peer"]
    best_peer = max(peer_rates) if peer_rates else None
    best_pearl = max((m for c, m, _, _ in cell if c.group == "pearl"), default=None)
    rows = []
    for c, med, spread, n in cell:
        mark = " **best**" if med in (best_peer, best_pearl) else ""
        ratio = f"{med / best_peer:.2f}x" if best_peer else "n/a"
        rows.append((c.label + mark, f"{med / 1e6:.3f}", ratio, f"{spread:.0%}", n))
    rep.add(f"### capacity {fmt_capacity(capacity)} ({capacity:,}), {op}, batch {batch}", "")
    rep.add(*md_table(["contestant", "M items/s", "vs best peer", "spread", "calls/rep"], rows))
    rep.add("")


def _emit_summary(rep, args, results):
    cap = 2**20 if 2**20 in args.capacities else max(args.capacities)
    rep.add(f"## Summary: capacity {fmt_capacity(cap)}, best PEARL config vs best peer", "")
    rows = []
    for batch in args.batches:
        for op in ("sample", "update"):
            cell = results.get((cap, op, batch))
            if not cell:
                continue
            pearl = max(((m, c) for c, m, _, _ in cell if c.group == "pearl"), default=None, key=lambda x: x[0])
            peer = max(((m, c) for c, m, _, _ in cell if c.group == "peer"), default=None, key=lambda x: x[0])
            ratio = pearl[0] / peer[0] if pearl and peer else None
            rows.append((
                batch,
                op,
                f"{pearl[1].label} ({pearl[0] / 1e6:.2f} M/s)" if pearl else "none ran",
                f"{peer[1].label} ({peer[0] / 1e6:.2f} M/s)" if peer else "none ran",
                f"{ratio:.2f}x" if ratio else "n/a",
                ("yes" if ratio >= SPEEDUP_GOAL else "no") if ratio else "n/a",
            ))
    rep.add(*md_table(["batch", "op", "best PEARL", "best peer", "ratio", f">= {SPEEDUP_GOAL:g}x"], rows))


def _write(args, rep, quiet=False):
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(rep.text())
        if not quiet:
            _progress(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
