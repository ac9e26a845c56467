"""Where each microsecond of a learner update goes, in a run of the parallel runtime.

The workload is `make demo`'s (DQN on CartPole-v1, MLP 256-256, batch 64, prioritized
replay, fanout 16, 0.5 updates per env step, one actor, DCQ batches of 32). Each
variant (protocol setting x learner threads) runs the real
:class:`~pearl_core.runtime.parallel.ParallelRuntime` for ``--window`` seconds after
``learning_starts`` (1000 env steps), variants alternating round by round (A, B, ...,
A, B, ...), medians over ``--rounds``. Per variant the table gives:

* **per update**: the steady slope of the run's ``metrics.csv`` (wall seconds per update,
  :func:`pearl_core.composer.profiling.measured_iteration_s`) and updates/s;
* **phases** (setting 2): the worker's own accounting, ``RunResult.learner_phases_s``
  divided by the updates it covers: ``sample`` (tree descent + gather), ``train``
  (``update_policy``: the native step), ``priorities``, ``insert`` (the actors' rows),
  ``publish`` (weights checked finite and published), ``wait`` (nothing to train: waiting
  for rows the throttle holds back), ``other`` (message polling, the loop); setting 1
  reports only ``train`` (the learner process's ``update_policy``) as the rest is the host's;
* **native step alone**: the same ``update_policy`` timed in this process on a filled
  replay (:func:`pearl_core.composer.profiling.profile_learner`, 1 and 2 threads), and
  the run's updates/s as a share of ``1 / (native step alone with 1 thread)`` x the learner's
  threads (issue: >= 70%);
* **cores used**: CPU seconds per wall second of the learner (setting 1) or worker
  (setting 2) process, of the actors together and of the host (this process), from
  ``/proc/<pid>/stat`` from 0.5 s after the workers are up to the last reading (every
  0.2 s) before the first of them exits (Linux only; ``-`` elsewhere). Their sum against
  the machine's cores says how much of it the run leaves idle.

``--actor-slack N`` overrides the runtime's actor slack (env steps actors may run ahead
of the learner): ``--actor-slack 64`` reproduces the default before the learner's
progress reports were counted in it (two DCQ batches).

    .venv/bin/python benchmarks/update_profile.py                      # 3 rounds x 6 s x 4 variants
    .venv/bin/python benchmarks/update_profile.py --variants 2:1,2:2 --actor-slack 64
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path


def _workload():
    from pearl_core.composer import workload_for_env

    return workload_for_env("CartPole-v1", 64, hidden_sizes=(256, 256), replay="prioritized")


def run_variant(setting: int, threads: int, window_s: float, seed: int, actor_slack: int | None) -> dict:
    """One timed run; returns seconds per update, the updates and the worker's phases per update."""
    from pearl_core.composer.profiling import measured_iteration_s, run_config_for
    from pearl_core.runtime.config import RuntimePlan, StopCriteria
    from pearl_core.runtime.parallel import ParallelRuntime

    wl = _workload()
    config = dataclasses.replace(run_config_for(wl, seed=seed), replay_ratio=0.5, learning_starts=1_000,
                                 stop=StopCriteria(max_wall_time_s=window_s))
    plan = RuntimePlan(setting=setting, learner_threads=threads, rm_threads=1, n_actors=1, envs_per_actor=1,
                       insert_batch=32)
    with tempfile.TemporaryDirectory(prefix="pearl-update-profile-") as tmp:
        config = dataclasses.replace(config, log_dir=str(Path(tmp) / "run"))
        runtime = ParallelRuntime(config, plan, progress=False, tensorboard=False, plot=False, metrics_every=640,
                                  actor_slack=actor_slack)
        cores: dict[str, float] = {}
        sampler = threading.Thread(target=_sample_cores, args=(runtime, window_s, cores), daemon=True)
        sampler.start()
        res = runtime.run()
        sampler.join()
        per_update, n = measured_iteration_s(Path(config.log_dir) / "metrics.csv")
    covered = max(1, res.updates)
    phases = {k: v / covered for k, v in res.learner_phases_s.items()}
    if not phases:  # setting 1: the learner process's update_policy is all it reports
        phases = {"train": res.learner_time_s / covered}
    return {"per_update_s": per_update, "updates": n, "phases": phases, "cores": cores}


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (all its threads); ``None`` if it is gone, a
    zombie (exited, not yet reaped) or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        if fields[0] in ("Z", "X"):
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _sample_cores(runtime, window_s: float, out: dict[str, float]) -> None:
    """Fill ``out`` with the cores the learner/worker, the actors and the host used in the run's steady part:
    CPU seconds between a reading 0.5 s after the workers are up and the last reading (every 0.2 s) while
    all of them are alive, over the wall time between the two."""
    deadline = time.monotonic() + window_s + 120  # start-up of a loaded machine included
    pids = runtime.pids()
    while not (pids["learner"] and pids["actors"]):
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
        pids = runtime.pids()
    time.sleep(0.5)
    roles = {"learner": pids["learner"], "actors": pids["actors"], "host": [os.getpid()]}

    def reading() -> tuple[float, dict[str, float]] | None:
        now = time.monotonic()
        got = {role: [_cpu_seconds(p) for p in ps] for role, ps in roles.items()}
        if any(x is None for xs in got.values() for x in xs):
            return None  # a worker has exited: the run is ending
        return now, {role: sum(xs) for role, xs in got.items()}

    first = last = reading()
    while last is not None and time.monotonic() < deadline:
        time.sleep(0.2)
        now = reading()
        if now is None:
            break
        last = now
    if first is None or last is None or last[0] - first[0] < 0.5:
        return
    dt = last[0] - first[0]
    out.update({role: (last[1][role] - first[1][role]) / dt for role in roles})


def native_alone(threads: int) -> float:
    from pearl_core.composer.profiling import profile_learner

    return profile_learner(_workload(), threads=threads, iterations=500, warmup=50)


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e6:.0f}"


def report(args, results: dict, alone: dict[int, float], started: str) -> str:
    from pearl_core.runtime.learner import PHASES

    lines = [
        "# Where an update's time goes (`benchmarks/update_profile.py`)",
        "",
        f"Command: `python benchmarks/update_profile.py {' '.join(sys.argv[1:])}`".rstrip(),
        "",
        f"- machine: {platform.platform()}, {os.cpu_count()} logical CPUs, Python {platform.python_version()}; "
        f"load average at the start {started}",
        f"- workload: DQN CartPole-v1, MLP 256-256, batch 64, prioritized (fanout 16), 0.5 updates per env "
        f"step, 1 actor, DCQ batch 32; actor slack {args.actor_slack or 'default'}",
        f"- {args.rounds} alternating rounds x {args.window:g} s per variant; medians",
        "- native step alone (update_policy on a filled replay, this process): "
        + ", ".join(f"{t} thread(s) {_us(s)} us" for t, s in sorted(alone.items())),
        "",
        "| variant | per update us | updates/s | vs 1/(native alone, 1 thread) x threads | "
        + " | ".join(PHASES) + " | cores: learner | actors | host | all |",
        "|---|---:|---:|---:|" + "---:|" * len(PHASES) + "---:|---:|---:|---:|",
    ]
    base = alone.get(1)
    for (setting, threads), runs in results.items():
        if not runs:
            continue
        per = statistics.median(r["per_update_s"] for r in runs)
        ups = 1.0 / per
        share = "-" if not base else f"{ups / (threads / base):.0%}"
        cells = []
        for k in PHASES:
            vals = [r["phases"][k] for r in runs if k in r["phases"]]
            cells.append(_us(statistics.median(vals)) if vals else "-")
        for role in ("learner", "actors", "host"):
            vals = [r["cores"][role] for r in runs if role in r["cores"]]
            cells.append(f"{statistics.median(vals):.2f}" if vals else "-")
        sums = [sum(r["cores"].values()) for r in runs if len(r["cores"]) == 3]
        cells.append(f"{statistics.median(sums):.2f}" if sums else "-")
        lines.append(f"| setting {setting}, {threads} learner thread(s) | {_us(per)} | {ups:.0f} | {share} | "
                     + " | ".join(cells) + " |")
    lines += ["", "Phases are the setting-2 worker's own clock per update (setting 1: the learner process's "
              "update_policy only); their sum is about the per-update time when the worker is the bottleneck. "
              f"Cores: CPU seconds per wall second of each role in the run's steady part (this machine has "
              f"{os.cpu_count()}); learner = the learner process (setting 1) or the worker (setting 2)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", default="2:1,2:2,1:1,1:2",
                   help="comma list of setting:threads (default 2:1,2:2,1:1,1:2)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument("--window", type=float, default=6.0, help="seconds of steady state per run (default 6)")
    p.add_argument("--actor-slack", type=int, default=None, help="override the runtime's actor slack")
    p.add_argument("--out", type=Path, default=None, help="also write the markdown report here")
    args = p.parse_args(argv)
    try:
        variants = [tuple(int(x) for x in v.split(":")) for v in args.variants.split(",") if v]
        assert variants and all(len(v) == 2 and v[0] in (1, 2) and v[1] >= 1 for v in variants)
    except (ValueError, AssertionError):
        p.error(f"--variants {args.variants!r}: expected a comma list of setting:threads, e.g. 2:1,2:2")
    started = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    alone = {t: native_alone(t) for t in sorted({v[1] for v in variants} | {1})}
    results: dict = {v: [] for v in variants}
    for r in range(args.rounds):
        for v in variants:
            t0 = time.perf_counter()
            results[v].append(run_variant(v[0], v[1], args.window, seed=r, actor_slack=args.actor_slack))
            print(f"round {r + 1}/{args.rounds} setting {v[0]} threads {v[1]}: "
                  f"{results[v][-1]['per_update_s'] * 1e6:.0f} us/update ({time.perf_counter() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
    text = report(args, results, alone, started)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
