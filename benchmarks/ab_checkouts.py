"""Compare two checkouts of PEARL side by side: the same benchmark, rounds interleaved.

Each checkout runs its own ``benchmarks/e2e_dqn.py`` (or ``replay_ops.py``) from its
own ``.venv``, one (seed, contestant) run at a time, alternating which checkout goes
first in each round, so a change of the machine's load hits both alike. Used to
check that a refactor keeps learning results and throughput::

    git worktree add /tmp/before <commit>; (cd /tmp/before && make setup)
    .venv/bin/python benchmarks/ab_checkouts.py --a /tmp/before --b . --seeds 0 1 \\
        --jsonl /tmp/ab.jsonl --out benchmarks/results/ab_refactor.md
    .venv/bin/python benchmarks/ab_checkouts.py --a /tmp/before --b . --replay-ops   # replay_ops --quick, 3 rounds

The report gives, per contestant, the median env steps/s and solved-at of each
checkout and their ratio (b / a).
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
             "| contestant | runs a/b | solved a | solved b | median solved-at a | b | median env steps/s a | b | b/a |",
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
    p.add_argument("--jsonl", type=Path, default=None)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    sides = {"a": args.a.resolve(), "b": args.b.resolve()}
    if args.replay_ops:
        for rnd in range(3):
            for side in (("a", "b") if rnd % 2 == 0 else ("b", "a")):
                print(f"## round {rnd + 1}, {side} = {sides[side]}\n\n{run_replay_ops(sides[side])}", flush=True)
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
