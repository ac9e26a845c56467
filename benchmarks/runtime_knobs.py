"""Which runtime knobs matter: seconds per update of the parallel runtime as one knob moves.

The knobs (all fields of the runtime plan or run config that change speed, not what is learned
per update): ``envs_per_actor`` (environments each actor steps together, one batched policy forward
per vector step), ``insert_batch`` (transitions per actor message), ``weight_sync_every`` (learner
updates between weight pushes to the actors). Each case is a real :class:`ParallelRuntime` run
(:func:`pearl_core.composer.profiling.measure_run`: the workload at its replay ratio, ``--window``
seconds after learning starts, the steady slope of its metrics) of the base plan with one knob
changed; every case runs once per round and the rounds are interleaved (A, B, C, ..., A, B, C, ...).
The table gives each case's median seconds per update, its min-max, env steps/s and the ratio to
the base case, all from the same run.

    .venv/bin/python benchmarks/runtime_knobs.py --out benchmarks/results/runtime_knobs.md   # ~12 min
    .venv/bin/python benchmarks/runtime_knobs.py --quick                                   # smoke

Workloads: ``demo`` (what ``make demo`` composes: DQN 256-256 on CartPole-v1, batch 64,
prioritized, replay ratio 0.5, one actor) and ``small`` (DQN 64-64, batch 32, uniform).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WORKLOADS = {
    "demo": {"batch": 64, "hidden": (256, 256), "replay": "prioritized"},
    "small": {"batch": 32, "hidden": (64, 64), "replay": "uniform"},
}
BASE = {"envs_per_actor": 1, "insert_batch": 32, "weight_sync_every": 10}
CASES = [("envs_per_actor", v) for v in (2, 4, 8, 16)] + [("insert_batch", v) for v in (1, 4, 128)] + \
        [("weight_sync_every", v) for v in (1, 100)]


def machine() -> str:
    import torch

    from pearl_core.composer.sweep import machine_line

    return f"{platform.platform()}, {machine_line()}, Python {platform.python_version()}, torch {torch.__version__}"


def run_case(wl_base, knobs: dict, *, setting: int, threads: int, window: float) -> float:
    import dataclasses

    from pearl_core.composer.profiling import measure_run
    from pearl_core.runtime.config import RuntimePlan

    wl = dataclasses.replace(wl_base, envs_per_actor=knobs["envs_per_actor"])
    plan = RuntimePlan(setting=setting, learner_threads=threads, rm_threads=threads if setting == 2 else 1,
                       n_actors=wl.n_actors, envs_per_actor=knobs["envs_per_actor"],
                       insert_batch=knobs["insert_batch"])
    return measure_run(wl, plan, window_s=window, learning_starts=max(1000, wl.batch_size),
                       weight_sync_every=knobs["weight_sync_every"], prefix="pearl-knobs-")[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="demo,small", help="comma list of: " + ", ".join(WORKLOADS))
    ap.add_argument("--setting", type=int, default=2, help="protocol setting of the base plan (default 2)")
    ap.add_argument("--threads", type=int, default=2, help="learner threads of the base plan (default 2)")
    ap.add_argument("--window", type=float, default=4.0, help="seconds each case runs per round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    ap.add_argument("--quick", action="store_true", help="smoke: one workload, two cases, 1 round of 1.5 s")
    ap.add_argument("--out", help="also write the Markdown report there")
    args = ap.parse_args()

    from pearl_core.composer import workload_for_env

    names = args.workloads.split(",")
    cases = [("base", None)] + CASES
    if args.quick:
        names, cases, args.window, args.rounds = names[:1], cases[:2], 1.5, 1
    lines = ["# Runtime knobs: seconds per update as one knob moves", "",
             f"machine: {machine()}",
             f"base plan: setting {args.setting}, {args.threads} learner thread(s), "
             + ", ".join(f"{k} {v}" for k, v in BASE.items()),
             f"rounds: {args.rounds} interleaved, {args.window:g} s per case per round; medians", ""]
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    for name in names:
        w = WORKLOADS[name]
        wl = workload_for_env("CartPole-v1", w["batch"], hidden_sizes=w["hidden"], replay=w["replay"],
                              insert_batch=2)
        times: dict[int, list[float]] = {i: [] for i in range(len(cases))}
        for r in range(args.rounds):
            for i, (knob, value) in enumerate(cases):
                knobs = dict(BASE) if knob == "base" else {**BASE, knob: value}
                s = run_case(wl, knobs, setting=args.setting, threads=args.threads, window=args.window)
                times[i].append(s)
                print(f"[{name} round {r + 1}/{args.rounds}] {knob}={value}: {s * 1e3:.3f} ms/update", flush=True)
        base = statistics.median(times[0])
        lines += [f"## {name}: DQN {'-'.join(map(str, w['hidden']))} on CartPole-v1, batch {w['batch']}, "
                  f"{w['replay']}, replay ratio 0.5, 1 actor", "",
                  "| knob | value | median ms/update | min-max | env steps/s | vs base |",
                  "|---|---:|---:|---:|---:|---:|"]
        for i, (knob, value) in enumerate(cases):
            ts = times[i]
            m = statistics.median(ts)
            shown = ", ".join(f"{k} {v}" for k, v in BASE.items()) if knob == "base" else str(value)
            lines.append(f"| {knob} | {shown} | {m * 1e3:.3f} | {min(ts) * 1e3:.3f}-{max(ts) * 1e3:.3f} | "
                         f"{2 / m:,.0f} | {base / m:.2f}x |")
        lines.append("")
    lines.insert(3, f"started {started}, finished {time.strftime('%Y-%m-%d %H:%M:%S')}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        from pearl_core.fileio import atomic_write

        atomic_write(args.out, text + "\n", make_parents=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
