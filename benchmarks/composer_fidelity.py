#!/usr/bin/env python
"""Composer fidelity: the composer's predictions and picks against measured runs, over a grid of workloads.

For each workload (see :func:`pearl_core.composer.sweep.sweep_points`: DQN on
CartPole-v1 and DDPG on Pendulum-v1, batch {32, 128, 512} x MLP {64-64,
256-256} x replay {uniform, prioritized} x actors {1, 2} x envs per actor {1, 8})
the composer plans with profiled cells (cached), then every runnable candidate
(the host variants: protocol setting, learner threads; runner-up assignments on
devices present here) runs the real runtime for ``--window`` seconds in
``--repeats`` alternating rounds. The report (markdown, ``--out``) lists
predicted vs measured seconds per learner iteration per candidate, the pick vs
the measured best, and the overall figures: share of workloads where the pick
is the measured best (or within 3%), median and max ``|error|``.

It is ``pearl validate --sweep`` with a report file and a subset selector::

    python benchmarks/composer_fidelity.py --grid dqn --window 5 --repeats 2
    python benchmarks/composer_fidelity.py --grid quick --only 0:2 --window 2 --repeats 1   # a smoke run
    python benchmarks/composer_fidelity.py --grid dqn --only 0:24 --replicate   # and the machine's repeatability

Runs take about a minute per workload (profiling included); the machine should
be otherwise idle. See ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pearl_core.composer.sweep import GRIDS, run_sweep, sweep_points
from pearl_core.fileio import atomic_write

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "composer_fidelity.md"


def _slice(text: str | None, n: int) -> slice:
    if not text:
        return slice(0, n)
    try:
        a, _, b = text.partition(":")
        return slice(int(a) if a else 0, int(b) if b else n)
    except ValueError:
        raise SystemExit(f"--only {text!r}: expected START:END indices of the grid, e.g. 0:8") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", default="full", choices=sorted(GRIDS), help="which workloads (default: full)")
    ap.add_argument("--only", default=None, help="START:END, a slice of the grid's workloads (e.g. 0:24)")
    ap.add_argument("--window", type=float, default=5.0, help="seconds each candidate runs per round")
    ap.add_argument("--repeats", type=int, default=2, help="alternating rounds per workload")
    ap.add_argument("--replicate", action="store_true",
                    help="validate each workload twice: the report then gives how far two measurements of the "
                         "same runtime plan are apart (the floor under any prediction's error)")
    ap.add_argument("--hardware", default=None, help="hardware spec (default: the detected machine)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"report path (default {DEFAULT_OUT})")
    args = ap.parse_args(argv)
    points = sweep_points(args.grid)
    points = points[_slice(args.only, len(points))]
    if not points:
        raise SystemExit(f"--only {args.only}: no workloads selected from the {args.grid} grid")
    command = "python benchmarks/composer_fidelity.py " + " ".join(sys.argv[1:] if argv is None else argv)

    def write(report) -> str:  # after every workload too: a sweep stopped early keeps what it measured
        text = report.to_markdown().replace("# Composer fidelity sweep", f"# Composer fidelity sweep\n\nCommand: "
                                            f"`{command}`", 1)
        atomic_write(args.out, text, make_parents=True)
        return text

    report = run_sweep(points, hardware=args.hardware, window_s=args.window, repeats=args.repeats,
                       progress=lambda line: print(line, flush=True), after_each=write, replicate=args.replicate)
    print(write(report))
    print(f"report written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
