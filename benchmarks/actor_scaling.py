"""Collection scaling: env steps/s of the parallel runtime with 1 .. N actor processes (issue 40, point 1).

Each case is a real :class:`~pearl_core.runtime.parallel.ParallelRuntime` run of DQN on CartPole-v1
(the trainer's and the run config's defaults: batch 64, prioritized replay of 100k, replay ratio 0.5),
``N`` actors stepping ``E`` environments each, in one of two modes:

* ``env-only``: the actors step and their rows are inserted into the replay, and no update runs:
  ``learning_starts`` is set beyond any window (:data:`NEVER`), so the runtime's continuous update
  schedule owes nothing and the actors' env budget (the steps that owe the next update plus the
  slack) is never reached: nothing throttles them;
* ``learner``: the same run with learning on from 1,000 env steps (the default), so the replay-ratio
  throttle holds the actors to what the learner consumes (``--setting``, ``--learner-threads``).

A callback records ``(time, env steps, updates)`` at every logged metrics row; the rate is the slope
over a steady window of ``--window`` seconds that starts ``--warmup`` seconds after the first row
(the processes' start-up and the learner's first updates left out), then the run is stopped. The
rounds are interleaved (every case once per round, then again); the table gives each case's median
over the rounds and the speed-up over one actor at the same envs per actor.

    .venv/bin/python benchmarks/actor_scaling.py --out benchmarks/results/actor_scaling.md   # 1..cores-1 actors
    .venv/bin/python benchmarks/actor_scaling.py --dry-run                                  # 1-2 actors, seconds

On the 16-core machine (issue 40's acceptance: env-only >= 10x one actor's rate at 15 actors):

    .venv/bin/python benchmarks/actor_scaling.py --actors 1-15 --envs 1 --rounds 3 \\
        --out benchmarks/results/actor_scaling_16core.md

(15 actor counts x 2 modes x 3 rounds of about 6 s each: about 9 minutes; ``--envs 1,8`` doubles it.)
The JSON next to the markdown (same name, ``.json``) has every round's figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: ``learning_starts`` of an env-only run: beyond any window, so no update is ever owed.
NEVER = 10**12
MODES = ("env-only", "learner")


@dataclass
class Window:
    """A callback that measures a run's steady rate and ends the run once its window is over."""

    warmup_s: float
    window_s: float
    rows: list[tuple[float, int, int]] = field(default_factory=list)
    start: tuple[float, int, int] | None = None
    end: tuple[float, int, int] | None = None

    def on_step(self, run: Any) -> None:
        row = (time.perf_counter(), int(run.env_steps), int(run.updates))
        self.rows.append(row)
        if self.start is None and row[0] - self.rows[0][0] >= self.warmup_s:
            self.start = row
        elif self.start is not None and row[0] - self.start[0] >= self.window_s:
            self.end = row
            run.stop("actor_scaling: window measured")

    def rates(self) -> tuple[float, float]:
        """``(env steps/s, updates/s)`` over the window; ``nan`` when the run ended before it."""
        if self.start is None or self.end is None:
            return float("nan"), float("nan")
        dt = self.end[0] - self.start[0]
        return (self.end[1] - self.start[1]) / dt, (self.end[2] - self.start[2]) / dt


def run_case(mode: str, n_actors: int, envs: int, *, warmup_s: float, window_s: float, setting: int,
             learner_threads: int, metrics_every: int, seed: int = 0) -> tuple[float, float]:
    """``(env steps/s, updates/s)`` of one run (see the module docstring)."""
    from pearl_core.runtime.config import RunConfig, RuntimePlan, StopCriteria
    from pearl_core.runtime.parallel import ParallelRuntime

    window = Window(warmup_s, window_s)
    with tempfile.TemporaryDirectory(prefix="pearl-actor-scaling-") as tmp:
        config = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", seed=seed,
                           learning_starts=NEVER if mode == "env-only" else 1_000, log_dir=str(Path(tmp) / "run"),
                           # a safety net only: the callback stops the run once its window is measured
                           stop=StopCriteria(max_wall_time_s=60.0 + 4 * (warmup_s + window_s), eval_every=10**9))
        plan = RuntimePlan(setting=setting,  # type: ignore[arg-type]  # an int is converted
                           n_actors=n_actors, envs_per_actor=envs, learner_threads=learner_threads,
                           rm_threads=learner_threads if setting == 2 else 1)
        result = ParallelRuntime(config, plan, progress=False, tensorboard=False, plot=False,
                                 metrics_every=metrics_every, callbacks=[window]).run()
    if getattr(result, "stop_reason", None) == "interrupted":
        raise KeyboardInterrupt(getattr(result, "stop_detail", ""))
    return window.rates()


def parse_counts(text: str) -> list[int]:
    """``"1-15"``, ``"1,2,4,8"`` or a mix: sorted distinct ints >= 1."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        lo, _, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise SystemExit(f"actor_scaling: {text!r} is not a list of counts; expected e.g. 1-15, 1,2,4") from None
        if a < 1 or b < a:
            raise SystemExit(f"actor_scaling: {part!r} is not a range of counts >= 1; expected e.g. 1-15")
        out.update(range(a, b + 1))
    return sorted(out)


def machine() -> str:
    import torch

    from pearl_core.composer.sweep import machine_line

    return f"{platform.platform()}, {machine_line()}, Python {platform.python_version()}, torch {torch.__version__}"


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| actors | envs/actor | env-only env steps/s | speed-up vs 1 actor | with learner env steps/s "
             "| updates/s |", "|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        speed = f"{r['speedup']:.2f}x" if r["speedup"] == r["speedup"] else "-"
        lines.append(f"| {r['actors']} | {r['envs']} | {_fmt(r['env_only'])} | {speed} | {_fmt(r['learner'])} "
                     f"| {_fmt(r['updates'])} |")
    return lines


def _fmt(x: float | None) -> str:
    return "-" if x is None or x != x else f"{x:,.0f}"


def _median(xs: list[float]) -> float:
    good = [x for x in xs if x == x]
    return statistics.median(good) if good else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cores = os.cpu_count() or 1
    p.add_argument("--actors", default=f"1-{max(1, min(15, cores - 1))}",
                   help="actor counts, e.g. 1-15 or 1,2,4,8 (default: 1 to min(15, cores - 1))")
    p.add_argument("--envs", default="1", help="envs per actor, e.g. 1 or 1,8 (default 1)")
    p.add_argument("--modes", default=",".join(MODES), help=f"some of {','.join(MODES)}")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=float, default=1.5, help="seconds after the first metrics row, left out")
    p.add_argument("--window", type=float, default=3.0, help="seconds measured per case per round")
    p.add_argument("--setting", type=int, choices=(1, 2), default=2, help="protocol setting of the learner runs")
    p.add_argument("--learner-threads", type=int, default=1)
    p.add_argument("--metrics-every", type=int, default=1_000, help="env steps between the rows the rate is read at")
    p.add_argument("--dry-run", action="store_true", help="1-2 actors, one round of short windows (a smoke test)")
    p.add_argument("--out", type=Path, help="write the table here (markdown) and the figures next to it (.json)")
    a = p.parse_args(argv)
    if a.dry_run:
        a.actors, a.envs, a.rounds, a.warmup, a.window, a.metrics_every = "1-2", "1", 1, 0.3, 0.7, 200
    counts, envs = parse_counts(a.actors), parse_counts(a.envs)
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not modes or set(modes) - set(MODES):
        raise SystemExit(f"actor_scaling: --modes {a.modes!r}; expected some of {','.join(MODES)}")
    over = [n for n in counts if n > max(1, cores - 1)]
    note = (f"{len(over)} count(s) above cores - 1 = {cores - 1} ({over}): actors share cores with the host loop "
            "and the learner there" if over else "")
    cases = [(m, n, e) for m in modes for e in envs for n in counts]
    figures: dict[tuple[str, int, int], list[tuple[float, float]]] = {c: [] for c in cases}
    t0 = time.perf_counter()
    for r in range(a.rounds):  # interleaved: every case once per round
        for case in cases:
            mode, n, e = case
            rate = run_case(mode, n, e, warmup_s=a.warmup, window_s=a.window, setting=a.setting,
                            learner_threads=a.learner_threads, metrics_every=a.metrics_every, seed=r)
            figures[case].append(rate)
            print(f"round {r + 1}/{a.rounds} {mode:8s} {n:2d} actor(s) x {e} env(s): {rate[0]:,.0f} env steps/s, "
                  f"{rate[1]:,.0f} updates/s", file=sys.stderr, flush=True)
    rows = []
    for e in envs:
        one = _median([f[0] for f in figures.get(("env-only", counts[0], e), [])]) if counts[0] == 1 else float("nan")
        for n in counts:
            env_only = _median([f[0] for f in figures.get(("env-only", n, e), [])])
            learn = figures.get(("learner", n, e), [])
            rows.append({"actors": n, "envs": e, "env_only": env_only, "speedup": env_only / one if one > 0 else
                         float("nan"), "learner": _median([f[0] for f in learn]),
                         "updates": _median([f[1] for f in learn]),
                         "rounds": {m: [list(f) for f in figures.get((m, n, e), [])] for m in modes}})
    head = [f"machine: {machine()}", f"commit: {commit()}; date: {time.strftime('%Y-%m-%d')}",
            f"DQN CartPole-v1 (trainer and run config defaults: batch 64, prioritized replay 100k, replay ratio 0.5); "
            f"env-only: learning_starts {NEVER:.0e} (no update owed, actors unthrottled); learner: learning_starts "
            f"1000, setting {a.setting}, {a.learner_threads} learner thread(s)",
            f"{a.rounds} interleaved round(s); per case a {a.window:g} s window after {a.warmup:g} s of warm-up from "
            f"the first metrics row (every {a.metrics_every} env steps); medians over the rounds; "
            f"{time.perf_counter() - t0:,.0f} s in all" + (" (--dry-run)" if a.dry_run else "")]
    text = "\n".join(head + ([note] if note else []) + [""] + table(rows))
    print(text)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n", encoding="utf-8")
        data = {"date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(), "cpu_count": cores,
                "dry_run": bool(a.dry_run), "rounds": a.rounds, "warmup_s": a.warmup, "window_s": a.window,
                "setting": a.setting, "learner_threads": a.learner_threads, "rows": rows}
        a.out.with_suffix(".json").write_text(json.dumps(data, indent=1, default=float) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
