"""How often the composer's pick is right, by how far its prediction put the pick ahead.

Reads the reports ``composer_fidelity.py`` writes (``results/composer_fidelity*.md``) and, per
workload, takes the composer's pick and the candidate it predicted next best. The pick's lead is
``predicted(runner-up) / predicted(pick) - 1``; it is negative where a tie rule chose a candidate
predicted slightly slower (lower traffic, see ``pearl_core/composer/tuning.py``). The table counts,
by lead, the workloads whose pick measured best or within ``PICK_TOLERANCE`` (3%) of it: where the
lead is small the measurement decides by its own noise, where it is large the prediction stands.

    python benchmarks/fidelity_leads.py benchmarks/results/composer_fidelity_dqn_16_48_r3.md ...
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from pearl_core.composer.sweep import PICK_TOLERANCE

#: Upper bounds of the lead buckets; the last bucket is open.
BUCKETS = (0.0, 0.03, 0.10, 0.20)


@dataclass(frozen=True)
class Candidate:
    workload: str
    label: str
    predicted_s: float
    measured_s: float
    chosen: bool


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def read_report(path: Path) -> list[Candidate]:
    """The candidates of a sweep report's table; raises ``ValueError`` naming the file without one."""
    lines = path.read_text().splitlines()
    header = next((i for i, ln in enumerate(lines) if ln.startswith("| workload | candidate |")), None)
    if header is None:
        raise ValueError(f"{path}: no candidate table (a '| workload | candidate | ...' header); "
                         "expected a report written by benchmarks/composer_fidelity.py")
    names = [c.strip() for c in lines[header].strip().strip("|").split("|")]
    col = {n: names.index(n) for n in ("workload", "candidate", "predicted ms", "measured ms", "pick")}
    out = []
    for ln in lines[header + 2:]:
        if not ln.startswith("|"):
            break
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if len(cells) < len(names):
            continue  # a workload that was not validated
        out.append(Candidate(cells[col["workload"]], cells[col["candidate"]], _number(cells[col["predicted ms"]]),
                             _number(cells[col["measured ms"]]), cells[col["pick"]].startswith("*")))
    return out


def leads(candidates: list[Candidate]) -> list[tuple[str, float, bool]]:
    """Per workload with a measured pick and a measured runner-up: (workload, lead, pick right)."""
    by_wl: dict[str, list[Candidate]] = {}
    for c in candidates:
        if math.isfinite(c.predicted_s) and math.isfinite(c.measured_s):
            by_wl.setdefault(c.workload, []).append(c)
    out = []
    for wl, cs in by_wl.items():
        pick = [c for c in cs if c.chosen]
        others = [c for c in cs if not c.chosen]
        if len(pick) != 1 or not others:
            continue
        runner = min(others, key=lambda c: c.predicted_s)
        best = min(c.measured_s for c in cs)
        right = pick[0].measured_s <= (1 + PICK_TOLERANCE) * best
        out.append((wl, runner.predicted_s / pick[0].predicted_s - 1, right))
    return out


def bucket_name(i: int) -> str:
    lo = BUCKETS[i - 1] if i else None
    hi = BUCKETS[i] if i < len(BUCKETS) else None
    if lo is None:
        return f"< {hi:.0%} (a tie rule's pick)"
    return f"{lo:.0%} to {hi:.0%}" if hi is not None else f">= {lo:.0%}"


def table(rows: list[tuple[str, float, bool]]) -> str:
    counts = [[0, 0] for _ in range(len(BUCKETS) + 1)]
    for _, lead, ok in rows:
        i = next((k for k, hi in enumerate(BUCKETS) if lead < hi), len(BUCKETS))
        counts[i][0] += 1
        counts[i][1] += ok
    lines = ["| predicted lead of the pick over the runner-up | workloads "
             f"| pick right ({PICK_TOLERANCE:.0%}) | share |",
             "|---|---:|---:|---:|"]
    for i, (n, ok) in enumerate(counts):
        share = f"{ok / n:.0%}" if n else "-"
        lines.append(f"| {bucket_name(i)} | {n} | {ok} | {share} |")
    n, ok = sum(c[0] for c in counts), sum(c[1] for c in counts)
    lines.append(f"| all | {n} | {ok} | {ok / n:.0%} |" if n else "| all | 0 | 0 | - |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="+", type=Path, help="reports written by composer_fidelity.py")
    args = ap.parse_args(argv)
    rows = []
    for path in args.reports:
        try:
            got = leads(read_report(path))
        except (OSError, ValueError) as exc:
            print(f"fidelity_leads: {exc}", file=sys.stderr)
            return 2
        print(f"{path}: {len(got)} workloads with a pick and a runner-up")
        rows += got
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
