"""Compare two checkouts of PEARL side by side: the same benchmark, rounds interleaved.

Each checkout runs its own ``benchmarks/e2e_dqn.py`` (or ``replay_ops.py``) from its
own ``.venv``, one (seed, contestant) run at a time, alternating which checkout goes
first in each round, so a change of the machine's load hits both alike. Used to
check that a refactor keeps learning results and throughput::

    git worktree add /tmp/before <commit>; (cd /tmp/before && make setup)
    .venv/bin/python benchmarks/ab_checkouts.py --a /tmp/before --b . --seeds 0 1 \\
        --jsonl /tmp/ab.jsonl --out benchmarks/results/ab_refactor.md
    .venv/bin/python benchmarks/ab_checkouts.py --a /tmp/before --b . --replay-ops   # replay_ops --quick, 3 rounds
    .venv/bin/python benchmarks/ab_checkouts.py --a /tmp/before --b . --window 25000  # fixed window, 3 rounds
    .venv/bin/python benchmarks/ab_checkouts.py --a /tmp/before --b . --window 6000 --algo sac  # SAC Pendulum

The e2e report gives, per contestant, the median env steps/s and solved-at of each
checkout and their ratio (b / a). Runs that stop when solved differ in length (and
in the share of evaluation and start-up in them) from run to run, so ``--window N``
also measures each runtime over a fixed ``N`` env steps with no evaluation (e2e_dqn's
DQN settings, seed 0), which compares throughput alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEARL = ("pearl-serial-uniform", "pearl-serial-per", "pearl-par1-uniform", "pearl-par1-per",
         "pearl-par2-uniform", "pearl-par2-per")


def run_e2e(root: Path, seed: int, contestant: str, budget: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="pearl_ab_") as tmp:
        out = Path(tmp) / "run.jsonl"
        cmd = [str(root / ".venv/bin/python"), str(root / "benchmarks/e2e_dqn.py"), "--seeds", str(seed),
               "--contestants", contestant, "--budget", str(budget), "--jsonl", str(out)]
        subprocess.run(cmd, cwd=root, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.loads(out.read_text().splitlines()[-1])


#: One fixed-window run, executed by each checkout's own interpreter (its own pearl_core).
WINDOW_RUN = """
import json, sys, tempfile
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
from pearl_core.runtime.parallel import ParallelRuntime
from pearl_core.runtime.serial import SerialRuntime
runtime, kind, steps, algo = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if algo == "sac":  # SAC on Pendulum-v1, one update per env step, batch 256 (the zoo's Pendulum settings)
    cfg = RunConfig(env_id="Pendulum-v1", trainer="pearl_core.algorithms:SAC", trainer_kwargs={"actor_lr": 1e-3,
                    "critic_lr": 1e-3}, replay=ReplayConfig(kind=kind, capacity=100_000), batch_size=256,
                    replay_ratio=1.0, learning_starts=1000, seed=0, stop=StopCriteria(max_env_steps=steps),
                    log_dir=tempfile.mkdtemp())
else:
    cfg = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN",
                    trainer_kwargs={"hidden_sizes": (256, 256), "lr": 2.3e-3, "gamma": 0.99,
                                    "target_update_every": 128, "eps_final": 0.04, "eps_decay_steps": 8000,
                                    "max_grad_norm": 10.0},
                    replay=ReplayConfig(kind=kind, capacity=100_000), batch_size=64, replay_ratio=0.5,
                    train_every=256, learning_starts=1000, seed=0, stop=StopCriteria(max_env_steps=steps),
                    log_dir=tempfile.mkdtemp())
kw = dict(progress=False, tensorboard=False, plot=False)
if __name__ == "__main__":
    rt = (SerialRuntime(cfg, RuntimePlan(), **kw) if runtime == "serial"
          else ParallelRuntime(cfg, RuntimePlan(setting=int(runtime[-1])), **kw))
    res = rt.run()
    print(json.dumps({"env_steps_per_s": res.env_steps_per_s, "updates": res.updates}))
"""
WINDOW_CASES = [(r, k) for r in ("serial", "setting1", "setting2") for k in ("uniform", "prioritized")]
#: SAC's window: the serial runtime and setting 2 (the runtime a composed CPU plan uses), both replays.
SAC_WINDOW_CASES = [(r, k) for r in ("serial", "setting2") for k in ("uniform", "prioritized")]


def run_window(root: Path, runtime: str, kind: str, steps: int, algo: str = "dqn") -> dict:
    with tempfile.TemporaryDirectory(prefix="pearl_ab_") as tmp:
        script = Path(tmp) / "window.py"
        script.write_text(WINDOW_RUN)
        out = subprocess.run([str(root / ".venv/bin/python"), str(script), runtime, kind, str(steps), algo], cwd=tmp,
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])


def window_report(rows: list[dict], steps: int, algo: str = "dqn") -> str:
    what = "SAC Pendulum-v1" if algo == "sac" else "DQN CartPole-v1"
    lines = [f"Fixed window ({what}): {steps:,} env steps, no evaluation, seed 0; env steps/s per round (a | b)", "",
             "| runtime | replay | a | b | median a | median b | b/a |", "|---|---|---|---|---|---|---|"]
    for runtime, kind in (SAC_WINDOW_CASES if algo == "sac" else WINDOW_CASES):
        a = [r["env_steps_per_s"] for r in rows if (r["runtime"], r["kind"], r["side"]) == (runtime, kind, "a")]
        b = [r["env_steps_per_s"] for r in rows if (r["runtime"], r["kind"], r["side"]) == (runtime, kind, "b")]
        if a and b:
            ma, mb = statistics.median(a), statistics.median(b)
            lines.append(f"| {runtime} | {kind} | {', '.join(f'{v:,.0f}' for v in a)} | "
                         f"{', '.join(f'{v:,.0f}' for v in b)} | {ma:,.0f} | {mb:,.0f} | {mb / ma:.3f} |")
    return "\n".join(lines) + "\n"


def run_replay_ops(root: Path) -> str:
    cmd = [str(root / ".venv/bin/python"), str(root / "benchmarks/replay_ops.py"), "--quick"]
    return subprocess.run(cmd, cwd=root, check=True, capture_output=True, text=True).stdout


def _med(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def report(rows: list[dict], a: Path, b: Path, started: str) -> str:
    lines = [f"# A/B: {a} (a) vs {b} (b), rounds interleaved", "",
             f"Started {started} UTC; {os.cpu_count()} cores; load average at the end "
             f"{os.getloadavg()[0]:.2f}.", "",
             "| contestant | runs a/b | solved a | solved b | median solved-at a | b "
             "| median env steps/s a | b | b/a |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in dict.fromkeys(r["contestant"] for r in rows):
        ra = [r for r in rows if r["contestant"] == c and r["side"] == "a"]
        rb = [r for r in rows if r["contestant"] == c and r["side"] == "b"]
        sa, sb = _med(ra, "env_steps_per_s"), _med(rb, "env_steps_per_s")
        solved = lambda rs: sum(r.get("solved_at") is not None for r in rs)  # noqa: E731
        fmt = lambda v: "-" if v is None else f"{v:,.0f}"  # noqa: E731
        ratio = f"{sb / sa:.3f}" if sa and sb else "-"
        lines.append(f"| {c} | {len(ra)}/{len(rb)} | {solved(ra)}/{len(ra)} | {solved(rb)}/{len(rb)} | "
                     f"{fmt(_med(ra, 'solved_at'))} | {fmt(_med(rb, 'solved_at'))} | {fmt(sa)} | {fmt(sb)} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", type=Path, required=True, help="first checkout (with its .venv)")
    p.add_argument("--b", type=Path, required=True, help="second checkout (with its .venv)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--contestants", default=",".join(PEARL))
    p.add_argument("--budget", type=int, default=100_000)
    p.add_argument("--replay-ops", action="store_true", help="compare replay_ops.py --quick instead (3 rounds)")
    p.add_argument("--window", type=int, default=None, metavar="STEPS",
                   help="compare throughput over a fixed window of env steps instead (3 rounds)")
    p.add_argument("--algo", choices=["dqn", "sac"], default="dqn", help="--window: DQN CartPole or SAC Pendulum")
    p.add_argument("--jsonl", type=Path, default=None)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    sides = {"a": args.a.resolve(), "b": args.b.resolve()}
    if args.replay_ops:
        for rnd in range(3):
            for side in (("a", "b") if rnd % 2 == 0 else ("b", "a")):
                print(f"## round {rnd + 1}, {side} = {sides[side]}\n\n{run_replay_ops(sides[side])}", flush=True)
        return 0
    if args.window is not None:
        rows = []
        for rnd in range(3):
            for runtime, kind in (SAC_WINDOW_CASES if args.algo == "sac" else WINDOW_CASES):
                for side in (("a", "b") if rnd % 2 == 0 else ("b", "a")):
                    r = {"side": side, "runtime": runtime, "kind": kind,
                         **run_window(sides[side], runtime, kind, args.window, args.algo)}
                    rows.append(r)
                    print(json.dumps(r), file=sys.stderr, flush=True)
        text = window_report(rows, args.window, args.algo)
        print(text)
        if args.out is not None:
            args.out.write_text(text, encoding="utf-8")
        return 0
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    rows: list[dict] = []
    rnd = 0
    for seed in args.seeds:
        for c in args.contestants.split(","):
            for side in (("a", "b") if rnd % 2 == 0 else ("b", "a")):
                r = {"side": side, **run_e2e(sides[side], seed, c, args.budget)}
                rows.append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
                if args.jsonl is not None:
                    with open(args.jsonl, "a", encoding="utf-8") as fh:
                        fh.write(json.dumps(r) + "\n")
            rnd += 1
    text = report(rows, sides["a"], sides["b"], started)
    print(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
