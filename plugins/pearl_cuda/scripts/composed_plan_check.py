#!/usr/bin/env python
"""Compose GPU plans, generate their programs, run them, and compare predicted with measured iteration times.

Run by ``gpu_check.sh`` (step ``composed``) on a machine with an NVIDIA GPU::

    python plugins/pearl_cuda/scripts/composed_plan_check.py --out benchmarks/results/cuda_gpu_check.md

For each case it composes DQN on CartPole-v1 with
``Composer(hardware=None)`` (the devices the installed backends detect), forces
the placement with ``composer.run(place={"rm": ..., "learner": ..., "storage": ...})``
(device names of ``composer.spec.devices``), writes the program with
``RuntimeGen(plan, path)``, runs ``python path --max-env-steps N --quiet
--log-dir DIR`` and reads ``DIR/**/result.json`` (the runtime's ``RunResult``):

* ``s2-gpu``: setting 2, replay manager, Data Storage and learner on the GPU;
* ``s1-cpu-rm``: setting 1, replay manager and Data Storage on the host CPU, learner on the GPU.

The Markdown table gives env steps/s, the plan's predicted seconds per learner
iteration and the measured one (run wall time / updates; the run is also
throttled by the replay ratio and the actors, so measured >= predicted is
expected when the learner is not the bottleneck) and the learner's own time per
update (``learner_time_s / updates``).

Exit codes: 0 every case ran; 1 a case failed (the table says which and why);
3 no usable GPU here (nothing is run and nothing is claimed).
``--smoke-cpu`` places everything on the host CPU instead: it checks this
script's own pipeline where no GPU is (its numbers are not GPU results).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

NO_GPU_EXIT = 3
ENV_ID = "CartPole-v1"


@dataclasses.dataclass(frozen=True)
class Case:
    """One forced placement: device names of the composer's spec for each primitive."""

    name: str
    what: str
    rm: str
    learner: str
    storage: str
    setting: int | None  # None: whatever the composer's host tuning picks (the CPU smoke test)

    def place(self) -> dict[str, str]:
        return {"rm": self.rm, "learner": self.learner, "storage": self.storage}


@dataclasses.dataclass
class Outcome:
    case: Case
    status: str = "FAIL"
    detail: str = ""
    plan_setting: int | None = None
    runtime_plan: str = ""
    banner: str = ""
    predicted_s: float | None = None
    result: Mapping[str, Any] | None = None
    wall_s: float = 0.0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="Markdown file to append the results to (also printed)")
    ap.add_argument("--max-env-steps", type=int, default=3000, help="env-step budget of each run (default 3000)")
    ap.add_argument("--learning-starts", type=int, default=500, help="env steps before the first update (default 500)")
    ap.add_argument("--batch-size", type=int, default=64, help="learner batch size (default 64)")
    ap.add_argument("--profile-iterations", type=int, default=200,
                    help="iterations per profiled cell of present devices (default 200; cached on disk)")
    ap.add_argument("--no-profile", action="store_true", help="analytic cost models only (no profiling)")
    ap.add_argument("--run-timeout-s", type=float, default=150.0, help="wall-clock limit of each run (default 150)")
    ap.add_argument("--cases", default="s2-gpu,s1-cpu-rm", help="comma-separated cases (default: both)")
    ap.add_argument("--gpu", help="the GPU's device name in the composer's spec (default: the first cuda device)")
    ap.add_argument("--work-dir", help="where programs and logs go (default: a new temporary folder)")
    ap.add_argument("--smoke-cpu", action="store_true",
                    help="place everything on the host CPU: checks this script without a GPU (not a GPU result)")
    a = ap.parse_args(argv)
    for name in ("max_env_steps", "batch_size", "profile_iterations"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1; found {getattr(a, name)}")
    if a.learning_starts < 0:
        ap.error(f"--learning-starts must be >= 0; found {a.learning_starts}")
    if not a.run_timeout_s > 0:
        ap.error(f"--run-timeout-s must be > 0; found {a.run_timeout_s}")
    wanted = [c.strip() for c in a.cases.split(",") if c.strip()]
    unknown = sorted(set(wanted) - {"s2-gpu", "s1-cpu-rm"})
    if unknown or not wanted:
        ap.error(f"--cases: unknown {unknown or 'empty list'}; expected a comma-separated subset of s2-gpu,s1-cpu-rm")
    a.cases = wanted
    return a


def gpu_problem() -> str | None:
    """Why this machine cannot run the GPU cases (``None`` when it can)."""
    try:
        from pearl_cuda.detect import probe
    except ImportError as exc:
        return f"pearl_cuda does not import ({exc})"
    problem = probe()
    if problem is not None:
        return problem
    try:
        import torch
    except ImportError as exc:
        return f"torch is not installed ({exc})"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device (CUDA build: {torch.version.cuda})"
    return None


def emit(out: str | None, text: str) -> None:
    print(text, flush=True)
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")


def cases_for(spec: Any, wanted: Sequence[str], gpu: str | None, smoke_cpu: bool) -> list[Case]:
    """The cases on this spec's devices (host CPU = ``spec.host``; GPU = ``gpu`` or the first cuda device).

    Raises:
        LookupError: no such GPU in the spec (the message lists the spec's devices).
    """
    names = [f"{d.name} ({d.kind})" for d in spec.devices]
    host = spec.host or next(d.name for d in spec.devices if d.kind == "cpu")
    if smoke_cpu:
        dev = host
    else:
        gpus = [d.name for d in spec.devices if d.kind == "cuda"]
        if gpu is not None and gpu not in gpus:
            raise LookupError(f"--gpu {gpu!r} is not a cuda device of the composer's spec; it has {names}")
        if not gpus:
            raise LookupError(f"the composer's detected spec has no cuda device (devices: {names}); detection "
                              "leaves out a GPU its backend cannot describe or use (see `pearl plugins`)")
        dev = gpu or gpus[0]
    # On the host CPU (the smoke test) every primitive is on cpu0 and the composer's tuning picks the setting.
    smoke = " (smoke test: all on the host CPU)" if smoke_cpu else ""
    table = {
        "s2-gpu": Case("s2-gpu", "setting 2: RM, Data Storage and learner on the GPU" + smoke, dev, dev, dev,
                       None if smoke_cpu else 2),
        "s1-cpu-rm": Case("s1-cpu-rm", "setting 1: RM and Data Storage on the CPU, learner on the GPU" + smoke,
                          host, dev, host, None if smoke_cpu else 1),
    }
    return [table[w] for w in wanted]


def find_result(log_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The newest ``result.json`` under ``log_dir`` (the runtime may write into a sub-folder), or ``None``."""
    found = sorted(Path(log_dir).rglob("result.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        return None
    return json.loads(found[-1].read_text(encoding="utf-8"))


def measured_iteration_s(result: Mapping[str, Any] | None) -> float | None:
    """Run wall seconds per learner update, or ``None`` without updates."""
    if not result or not result.get("updates"):
        return None
    return float(result["wall_time_s"]) / int(result["updates"])


def learner_step_s(result: Mapping[str, Any] | None) -> float | None:
    if not result or not result.get("updates"):
        return None
    return float(result.get("learner_time_s", 0.0)) / int(result["updates"])


def _us(s: float | None) -> str:
    return "—" if s is None or not math.isfinite(s) else f"{s * 1e6:,.0f}"


def markdown_table(outcomes: Sequence[Outcome]) -> str:
    head = ("| case | status | setting (plan) | RM / learner / DS (forced) | runtime plan | env steps | env steps/s "
            "| updates | predicted µs/iter | measured µs/iter | measured / predicted | learner µs/update |\n"
            "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for o in outcomes:
        r, c = o.result or {}, o.case
        meas = measured_iteration_s(r)
        ratio = (f"{meas / o.predicted_s:.2f}" if meas is not None and o.predicted_s else "—")
        sps = f"{r['env_steps_per_s']:,.0f}" if "env_steps_per_s" in r else "—"
        want = "any" if c.setting is None else c.setting
        lines.append(f"| {c.name} | {o.status} | {o.plan_setting if o.plan_setting is not None else '—'} (want "
                     f"{want}) | {c.rm} / {c.learner} / {c.storage} | {o.runtime_plan or '—'} | "
                     f"{r.get('env_steps', '—')} | {sps} | {r.get('updates', '—')} | {_us(o.predicted_s)} | "
                     f"{_us(meas)} | {ratio} | {_us(learner_step_s(r))} |")
    notes = [f"- **{o.case.name}** ({o.case.what}): {o.status}" + (f" — {o.detail}" if o.detail else "")
             + (f"; program: `{o.banner}`" if o.banner else "") for o in outcomes]
    return "\n".join(lines + [""] + notes)


def compose(args: argparse.Namespace, log_root: Path) -> Any:
    from pearl_core.algorithms import DQN
    from pearl_core.composer import Composer

    composer = Composer(hardware=None, profile_iterations=args.profile_iterations)
    composer.set_actors(ENV_ID, n_actors=1)
    composer.set_train_function(DQN, batch_size=args.batch_size, replay_ratio=0.5,
                                learning_starts=min(args.learning_starts, args.max_env_steps // 2),
                                total_env_steps=args.max_env_steps)
    composer.set_replay("prioritized", capacity=100_000, fanout=16)
    composer.set_stop(max_env_steps=args.max_env_steps)
    composer.set_run(seed=0, log_dir=str(log_root))
    return composer


def run_case(composer: Any, case: Case, args: argparse.Namespace, work: Path) -> Outcome:
    from pearl_core.composer import RuntimeGen

    o = Outcome(case)
    try:
        plan = composer.run(profile=not args.no_profile, place=case.place())
    except TypeError as exc:
        if "place" in str(exc):
            o.detail = (f"Composer.run() takes no place= argument in this pearl-core ({exc}); the forced "
                        "placement cannot be composed. Fix: update pearl-core (place= is the composer's API for it)")
            return o
        raise
    except Exception as exc:  # noqa: BLE001 - report the composer's refusal as the case's result
        o.detail = f"the composer refused the placement: {type(exc).__name__}: {exc}"
        return o
    o.plan_setting = int(plan.setting)
    o.predicted_s = float(plan.predicted_iteration_s)
    rp = plan.runtime_plan
    keys = ("rm_backend", "rm_device", "learner_device", "storage_device")
    o.runtime_plan = ", ".join(f"{k}={getattr(rp, k)}" for k in keys if hasattr(rp, k))
    got = (plan.rm_device, plan.learner_device, plan.ds_device)
    if got != (case.rm, case.learner, case.storage) or case.setting not in (None, o.plan_setting):
        o.detail = (f"the plan does not honour the forced placement: RM/learner/DS = {got}, setting "
                    f"{o.plan_setting}; expected {(case.rm, case.learner, case.storage)}, setting {case.setting}")
        return o
    program = work / f"runtime_{case.name}.py"
    RuntimeGen(plan, program)
    log_dir = work / f"logs_{case.name}"
    cmd = [sys.executable, str(program), "--max-env-steps", str(args.max_env_steps), "--quiet", "--log-dir",
           str(log_dir)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.run_timeout_s)
    except subprocess.TimeoutExpired:
        o.wall_s = time.perf_counter() - t0
        o.status, o.detail = "TIMEOUT", f"the program ran past {args.run_timeout_s:.0f} s"
        return o
    o.wall_s = time.perf_counter() - t0
    (work / f"run_{case.name}.log").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr, encoding="utf-8")
    o.banner = next((ln.strip() for ln in proc.stdout.splitlines() if "Data Storage on" in ln), "")
    o.result = find_result(log_dir)
    if proc.returncode != 0 or o.result is None:
        tail = " / ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])[-400:]
        o.detail = (f"the program exited {proc.returncode}" + ("" if o.result else ", no result.json")
                    + (f": {tail}" if tail else "")).replace("|", "/")
        return o
    o.status = "PASS"
    o.detail = (f"stopped by {o.result.get('stop_reason')}; startup {o.result.get('startup_s', 0.0):.1f} s, "
                f"process wall {o.wall_s:.1f} s")
    return o


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    where = "the host CPU (smoke test of this script, **not a GPU result**)" if args.smoke_cpu else "the GPU"
    emit(args.out, f"\n## Composed plans end to end on {where}: DQN {ENV_ID}, {args.max_env_steps} env steps each\n")
    if not args.smoke_cpu:
        problem = gpu_problem()
        if problem is not None:
            emit(args.out, f"- **not run**: no usable GPU here ({problem}). Nothing was composed or measured.")
            return NO_GPU_EXIT
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="pearl-composed-"))
    work.mkdir(parents=True, exist_ok=True)
    composer = compose(args, work / "logs")
    try:
        cases = cases_for(composer.spec, args.cases, args.gpu, args.smoke_cpu)
    except LookupError as exc:
        emit(args.out, f"- **failed**: {exc}")
        return 1
    emit(args.out, "- devices (composer.spec): " + ", ".join(f"{d.name} ({d.kind})" for d in composer.spec.devices)
         + f"; profiling: {'off (analytic cells)' if args.no_profile else f'{args.profile_iterations} iterations'}")
    outcomes = [run_case(composer, c, args, work) for c in cases]
    emit(args.out, "\n" + markdown_table(outcomes))
    emit(args.out, f"\nPrograms, logs and result.json files: `{work}`. Measured µs/iter = run wall time / updates "
                   "(includes waiting on actors and the replay-ratio throttle); predicted = the plan's "
                   "`predicted_iteration_s`.")
    return 0 if all(o.status == "PASS" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
