"""The device benchmark (issue 40, table 4): PEARL against stable-baselines3 and SBX on one GPU machine.

Three workloads at rl-baselines3-zoo's settings (PEARL's presets, :mod:`pearl_core.presets`; the peers get
the same values through the end-to-end benchmarks' model builders):

* DQN CartPole-v1: SB3 (torch on the GPU), SBX (JAX on the GPU), PEARL's composed plan, and PEARL's plan
  restricted to the CPU (``place`` every primitive on the host: all-CPU);
* SAC HalfCheetah-v5 (the zoo's HalfCheetah-v4 entry: 1 update per env step, batch 256): SB3, SBX, PEARL;
* DQN ALE/Pong-v5 (the zoo's Atari entry, learning on): SB3, PEARL.

Every contestant run is measured the same way (:class:`Window`): the run starts fresh, collects until it
has made its first update, runs ``--warmup-s`` more seconds, and then a window of ``--window-s`` seconds
is measured: env steps and updates over the window's wall time, and its energy from
:class:`pearl_core.runtime.energy.EnergyMeter` (GPU from NVML's counter, CPU from RAPL or modelled, each
part labelled). A run is capped at ``--run-cap-s`` seconds from its start (a window cut short by the cap
is kept and marked). Rounds are interleaved: every contestant of a workload runs once per round, the
order rotated by one each round; each figure is the median over the rounds. The whole benchmark stops
starting rounds when the next one would pass ``--budget-s``, so one device call always ends in time.

The composed plans are made once per workload before the rounds (``Composer.run(runnable=True)``,
profiling this machine; a compose that profiles past ``--compose-timeout-s`` is redone with the analytic
models only, and the report says so).

Where each contestant runs: on a machine with a CUDA GPU, SB3 with ``device="cuda"`` and SBX with
``JAX_PLATFORMS=cuda``; without one (``--dry-run`` in ``make test``), both on the CPU. PEARL runs what
its composer chose for the machine.

Outputs, rewritten after every round: ``table4.md`` and ``table4.json`` in ``--out`` (default
``benchmarks/results/h200/``; a ``--dry-run`` must name its own ``--out``, so it never overwrites the
committed results)::

    python benchmarks/device/bench.py                                   # the device run (README.md)
    python benchmarks/device/bench.py --dry-run --out /tmp/table4       # seconds per contestant, CPU
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

BENCH = Path(__file__).resolve().parent.parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))  # e2e_common and the end-to-end benchmarks, also when loaded by path

DEFAULT_OUT = BENCH / "results" / "h200"
#: Metrics rows of a PEARL run (its callbacks' clock): one every this many env steps.
METRICS_EVERY = 100
#: Env steps a peer's ``learn()`` is given: never reached, the window's callback ends it.
PEER_TOTAL = 10_000_000


@dataclasses.dataclass(frozen=True)
class Workload:
    key: str
    title: str
    algo: str
    env_id: str
    preset_env: str                    # the zoo's entry (HalfCheetah-v4 for v5: the zoo has no v5 entry)
    contestants: tuple[str, ...]
    learning_starts: int | None        # None: the zoo's; dry-run values in DRY
    note: str = ""


WORKLOADS = (
    Workload("dqn-cartpole", "DQN CartPole-v1", "dqn", "CartPole-v1", "CartPole-v1",
             ("sb3", "sbx", "pearl-composed", "pearl-cpu"), None),
    Workload("sac-halfcheetah", "SAC HalfCheetah-v5", "sac", "HalfCheetah-v5", "HalfCheetah-v4",
             ("sb3", "sbx", "pearl-composed"), None,
             "the zoo's HalfCheetah-v4 entry (it has none for v5): 1 update per env step, batch 256, buffer 1e6"),
    Workload("dqn-pong", "DQN ALE/Pong-v5", "dqn", "ALE/Pong-v5", "ALE/Pong-v5", ("sb3", "pearl-composed"), 5_000,
             "learning_starts 5000 instead of the zoo's 100k (which alone would take SB3 a minute per run); "
             "epsilon decays over 10% of the zoo's 1e7 env steps, so every contestant explores at ~1"),
)
#: ``--dry-run``: smaller replays and earlier learning, so every contestant learns within seconds on 2 cores.
DRY = {"learning_starts": {"dqn-cartpole": None, "sac-halfcheetah": 300, "dqn-pong": 200},
       "capacity": {"dqn-cartpole": None, "sac-halfcheetah": 10_000, "dqn-pong": 2_000}}
LABELS = {"sb3": "SB3", "sbx": "SBX", "pearl-composed": "PEARL composed", "pearl-cpu": "PEARL all-CPU"}
#: The issue's acceptance targets: (workload, contestant, measure, against, factor); against None: absolute.
TARGETS = (("dqn-cartpole", "pearl-composed", "env_steps_per_s", "sbx", 5.0),
           ("dqn-cartpole", "pearl-composed", "env_steps_per_s", "sb3", 10.0),
           ("sac-halfcheetah", "pearl-composed", "env_steps_per_s", None, 1000.0),
           ("sac-halfcheetah", "pearl-composed", "env_steps_per_s", "sbx", 2.0),
           ("dqn-pong", "pearl-composed", "env_steps_per_s", "sb3", 5.0),
           ("dqn-cartpole", "pearl-composed", "env_steps_per_joule", "sb3", 3.4),
           ("sac-halfcheetah", "pearl-composed", "env_steps_per_joule", "sb3", 3.4),
           ("dqn-pong", "pearl-composed", "env_steps_per_joule", "sb3", 3.4))


@dataclasses.dataclass(frozen=True)
class Settings:
    dry_run: bool
    rounds: int
    warmup_s: float
    window_s: float
    run_cap_s: float
    budget_s: float
    compose_timeout_s: float | None   # None: compose in this process, no limit
    compose_budget_s: float           # all composes' profiling together
    profile: bool
    actors: int

    def learning_starts(self, w: Workload) -> int | None:
        return DRY["learning_starts"][w.key] if self.dry_run else w.learning_starts

    def capacity(self, w: Workload) -> int | None:
        return DRY["capacity"][w.key] if self.dry_run else None


# -- the measured window -------------------------------------------------------------------------------
class Window:
    """One run's steady-state window. :meth:`tick` is called with the run's counters (every env step for a
    peer, every metrics row for PEARL) and says whether the run goes on: the window opens ``warmup_s``
    after the first update is seen, closes ``window_s`` later, and the run ends there or at ``cap_s`` from
    this object's creation (a window open then is closed at once and marked ``truncated``).

    Both ends fall on a tick that saw new updates since the tick before: a peer that trains in bursts
    (SB3's DQN: 128 updates after every 256 env steps) is measured over whole collect-and-train cycles,
    from just after one burst to just after another, not from the middle of one."""

    def __init__(self, warmup_s: float, window_s: float, cap_s: float, meter_factory: Callable[[], Any],
                 clock: Callable[[], float] = time.perf_counter):
        self.warmup_s, self.window_s, self.cap_s = warmup_s, window_s, cap_s
        self._meter_factory, self._clock = meter_factory, clock
        self.t_begin = clock()
        self.learning_at: float | None = None
        self.start: tuple[int, int, float] | None = None
        self.end: tuple[int, int, float] | None = None
        self.last: tuple[int, int, float] | None = None
        self.truncated = False
        self.meter: Any = None
        self.energy: Any = None

    def tick(self, env_steps: int, updates: int) -> bool:
        now = self._clock()
        fresh = self.last is not None and int(updates) != self.last[1]  # updates made since the last tick
        self.last = (int(env_steps), int(updates), now)
        if self.end is not None:
            return False
        if self.start is None:
            if updates > 0 and self.learning_at is None:
                self.learning_at = now
            if self.learning_at is not None and now - self.learning_at >= self.warmup_s and fresh:
                self.meter = self._meter_factory()
                self.meter.start()
                self.start = self.last
        elif now - self.start[2] >= self.window_s and fresh:
            self._close()
            return False
        if now - self.t_begin >= self.cap_s:
            if self.start is not None:
                self.truncated = True
                self._close()
            return False
        return True

    def finish(self) -> None:
        """The run has ended: a window still open closes at the last counters seen (``truncated``)."""
        if self.start is not None and self.end is None:
            self.truncated = True
            self._close()

    def _close(self) -> None:
        self.end = self.last
        self.energy = self.meter.stop()

    def result(self) -> dict:
        """The window's figures; raises RuntimeError when no window was measured (learning never started
        or never ran ``warmup_s``, within the cap)."""
        if self.start is None or self.end is None or self.end[2] <= self.start[2]:
            why = ("no update was seen" if self.learning_at is None else
                   f"the warm-up of {self.warmup_s:g} s after the first update did not end")
            raise RuntimeError(f"no window measured within the run's cap of {self.cap_s:g} s: {why}")
        (s0, u0, t0), (s1, u1, t1) = self.start, self.end
        seconds = t1 - t0
        energy = self.energy
        return {"env_steps_per_s": (s1 - s0) / seconds, "updates_per_s": (u1 - u0) / seconds,
                "env_steps_per_joule": energy.per_joule(s1 - s0), "joules_source": joules_source(energy.sources),
                "window_s": round(seconds, 3), "window_env_steps": s1 - s0, "window_updates": u1 - u0,
                "joules": energy.joules, "energy": energy.to_json(), "truncated": self.truncated,
                "learning_after_s": round(self.learning_at - self.t_begin, 3) if self.learning_at else None}


def joules_source(sources: dict) -> str:
    """``{"gpu:0": "measured: NVML ...", "cpu": "modelled: ..."}`` -> ``"gpu:0 measured (NVML ...); cpu modelled
    (...)"``, each part's how with its first clause."""
    out = []
    for part, how in sources.items():
        kind, _, rest = str(how).partition(":")
        detail = rest.strip().split(";")[0].split(" (")[0]
        out.append(f"{part} {kind}" + (f" ({detail})" if detail else ""))
    return "; ".join(out)


def make_meter():
    from pearl_core.runtime.energy import EnergyMeter

    return EnergyMeter()


# -- peers (stable-baselines3, SBX) -------------------------------------------------------------------------
def build_peer(lib: str, w: Workload, seed: int, s: Settings, device: str):
    """A fresh SB3 (``lib="sb3"``) or SBX model of the workload at the zoo's values, and the env steps its
    ``learn()`` is given (the end-to-end benchmarks' builders: the very values their tables used)."""
    starts, cap = s.learning_starts(w), s.capacity(w)
    if w.key == "dqn-cartpole":
        import e2e_dqn

        if lib == "sb3":
            return e2e_dqn.sb3_dqn(seed, PEER_TOTAL, device), PEER_TOTAL
        return e2e_dqn._sbx_dqn(seed, PEER_TOTAL, clip=True), PEER_TOTAL
    if w.key == "sac-halfcheetah":
        import e2e_continuous as ec

        case = ec.make_case("sac", w.env_id, quick=False, budget=None, mark_every=None, window_offset=None)
        return ec.peer_model(lib, case, seed, learning_starts=starts, buffer=cap, device=device), PEER_TOTAL
    import e2e_pixels as ep

    case = ep.make_case(w.env_id, quick=False, budget=ep.ZOO.n_timesteps, learning_starts=starts)
    return ep.peer_model(lib, case, seed, learning_starts=starts, buffer=cap, device=device), case.budget


def run_peer(lib: str, w: Workload, seed: int, s: Settings, device: str, cap_s: float) -> dict:
    from e2e_common import pin_threads
    from stable_baselines3.common.callbacks import BaseCallback

    model, total = build_peer(lib, w, seed, s, device)
    window = Window(s.warmup_s, s.window_s, cap_s, make_meter)

    class WindowCallback(BaseCallback):
        def _on_step(self) -> bool:
            return window.tick(self.num_timesteps, self.model._n_updates)

    restore = pin_threads(os.cpu_count() or 1)
    try:
        model.learn(total_timesteps=total, callback=WindowCallback())
    finally:
        restore()
        window.finish()
    return window.result()


# -- PEARL ------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Composed:
    """A composed plan as the rounds run it (rebuilt from JSON: a compose may run in a child process)."""

    config: Any
    runtime_plan: Any
    where: str
    info: dict


def compose_here(spec: dict) -> dict:
    """Compose one PEARL contestant (``spec``: workload key, cpu_only, n_actors, profile, learning_starts,
    capacity, log_dir) with the zoo's preset; returns JSON-ready parts."""
    from pearl_core.composer.api import Composer
    from pearl_core.presets import find_preset

    w = next(x for x in WORKLOADS if x.key == spec["workload"])
    t0 = time.perf_counter()
    preset = find_preset(w.algo, w.preset_env)
    if preset is None:
        raise RuntimeError(f"no rl-zoo preset for {w.algo} {w.preset_env}")
    preset = preset.override(learning_starts=spec["learning_starts"], capacity=spec["capacity"])
    composer = Composer(None, "throughput")
    composer.set_actors(w.env_id, spec["n_actors"], wrappers=preset.env_wrappers)
    composer.set_train_function(preset.trainer, preset.batch_size, replay_ratio=preset.replay_ratio,
                                learning_starts=preset.learning_starts, random_steps=preset.random_steps,
                                **preset.trainer_kwargs)
    composer.set_replay(preset.replay_kind, preset.capacity)
    composer.set_stop(max_wall_time_s=600.0)  # each round sets its own stop
    composer.set_run(seed=0, log_dir=spec["log_dir"])
    host = composer.spec.host
    place = {"rm": host, "learner": host, "storage": host} if spec["cpu_only"] else None
    composition = composer.run(profile=spec["profile"], place=place, runnable=True)
    if composition.refusals:
        raise RuntimeError("the plan cannot run here: " + "; ".join(composition.refusals))
    plan, rp = composition.plan, composition.runtime_plan
    where = (f"setting {int(rp.setting)}: RM {plan.rm_device}, learner {plan.learner_device}, storage "
             f"{plan.ds_device}; {rp.n_actors} actor(s) x {rp.envs_per_actor} env(s), learner threads "
             f"{rp.learner_threads}")
    return {"config": composition.config.to_json(), "runtime_plan": rp.to_json(), "where": where,
            "info": {"profiled": spec["profile"], "compose_s": round(time.perf_counter() - t0, 1),
                     "plan_hash": plan.content_hash()[:12], "preset": preset.source}}


def compose(w: Workload, cpu_only: bool, s: Settings, log_dir: str, notes: list[str],
            timeout_s: float | None) -> Composed:
    """The contestant's plan. Profiling with a ``timeout_s``: composed in a child process, and on a timeout
    or a failure again here with the analytic models only (a note says so); ``timeout_s`` None: here."""
    from pearl_core.runtime.config import RunConfig, RuntimePlan

    spec = {"workload": w.key, "cpu_only": cpu_only, "n_actors": s.actors, "profile": s.profile,
            "learning_starts": s.learning_starts(w), "capacity": s.capacity(w), "log_dir": log_dir}
    what = f"{w.title} {'all-CPU ' if cpu_only else ''}compose"
    out, why = None, ""
    if s.profile and timeout_s is not None:
        t0 = time.perf_counter()
        try:
            if timeout_s < 5:
                raise subprocess.TimeoutExpired("compose", timeout_s)
            proc = subprocess.run([sys.executable, __file__, "--compose-child", json.dumps(spec)],
                                  capture_output=True, text=True, timeout=timeout_s, check=False)
            if proc.returncode == 0:
                out = json.loads(proc.stdout.strip().splitlines()[-1])
            else:
                why = f"with profiling failed ({(proc.stderr.strip().splitlines() or ['no output'])[-1]})"
        except subprocess.TimeoutExpired:
            why = (f"with profiling did not end within {timeout_s:.0f} s (the compose budget's share; "
                   f"{time.perf_counter() - t0:.0f} s spent)")
    if out is None:
        if why:
            notes.append(f"{what} {why}: composed with the analytic models only")
        out = compose_here({**spec, "profile": s.profile and timeout_s is None})
    return Composed(RunConfig.from_json(out["config"]), RuntimePlan.from_json(out["runtime_plan"]), out["where"],
                    out["info"])


def run_pearl(plan: Composed, seed: int, s: Settings, log_dir: str, cap_s: float) -> dict:
    from pearl_core.callbacks import Callback
    from pearl_core.runtime.config import StopCriteria
    from pearl_core.runtime.parallel import ParallelRuntime

    window = Window(s.warmup_s, s.window_s, cap_s, make_meter)

    class WindowCallback(Callback):
        def on_step(self, run) -> None:
            if not window.tick(run.env_steps, run.updates):
                run.stop("the benchmark's window is measured")

    config = dataclasses.replace(plan.config, stop=StopCriteria(max_wall_time_s=cap_s), seed=seed, log_dir=log_dir)
    runtime = ParallelRuntime(config, plan.runtime_plan, progress=False, tensorboard=False, plot=False,
                              metrics_every=METRICS_EVERY, callbacks=[WindowCallback()])
    try:
        runtime.run()
    finally:
        window.finish()
    return window.result()


# -- the machine -------------------------------------------------------------------------------------------
def gpu_name() -> str | None:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        if out:
            return out
    except (OSError, subprocess.SubprocessError):
        pass
    return os.environ.get("PEARL_COMMIT", "unknown (no git here; set PEARL_COMMIT)")


def versions() -> str:
    import importlib.metadata as md

    parts = [f"Python {platform.python_version()}"]
    for dist in ("torch", "jax", "stable-baselines3", "sbx-rl", "gymnasium", "mujoco", "ale-py"):
        try:
            parts.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            parts.append(f"{dist} not installed")
    return ", ".join(parts)


# -- the report ----------------------------------------------------------------------------------------------
def summarise(w: Workload, c: str, runs: list[dict], where: str) -> dict:
    ok = [r for r in runs if "error" not in r]

    def med(key: str) -> float | None:
        return statistics.median(r[key] for r in ok) if ok and all(r[key] is not None for r in ok) else None

    sps = med("env_steps_per_s")
    srcs = list(dict.fromkeys(r["joules_source"] for r in ok))
    row = {"workload": w.key, "contestant": c, "env_steps_per_s": sps, "updates_per_s": med("updates_per_s"),
           "env_steps_per_joule": med("env_steps_per_joule"), "joules_source": " | ".join(srcs) or None,
           "label": LABELS[c], "where": where, "rounds": len(ok),
           "spread": (max(r["env_steps_per_s"] for r in ok) - min(r["env_steps_per_s"] for r in ok)) / sps
           if sps else None,
           "runs": runs}
    errors = [r["error"] for r in runs if "error" in r]
    if errors:
        row["errors"] = errors
    return row


def _num(v: float | None, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


def ratio(rows: list[dict], w: str, c: str, base: str, key: str) -> float | None:
    get = {(r["workload"], r["contestant"]): r[key] for r in rows}
    x, b = get.get((w, c)), get.get((w, base))
    return x / b if x is not None and b else None


def markdown(doc: dict) -> str:
    rows = doc["rows"]
    dry = " (DRY RUN: seconds per contestant, no figures to quote)" if doc["dry_run"] else ""
    lines = [f"# Table 4: PEARL vs stable-baselines3 and SBX on one GPU machine{dry}",
             "", f"- date: {doc['date']}; commit: {doc['commit']}; status: {doc['status']}",
             f"- machine: GPU {doc['gpu']}; {doc['cpu_cores']} CPU cores; {doc['platform']}",
             f"- versions: {doc['versions']}", f"- command: `{doc['command']}`",
             f"- method: {doc['method']}", "",
             "| workload | contestant | where | env steps/s | updates/s | env steps/J | joules source | rounds "
             "| spread | env steps/s vs SB3 | vs SBX | env steps/J vs SB3 |", "|" + "---|" * 12]
    for r in rows:
        vs = [ratio(rows, r["workload"], r["contestant"], b, k) if r["contestant"] != b else None
              for b, k in (("sb3", "env_steps_per_s"), ("sbx", "env_steps_per_s"), ("sb3", "env_steps_per_joule"))]
        lines.append(f"| {r['workload']} | {r['label']} | {r['where']} | {_num(r['env_steps_per_s'])} | "
                     f"{_num(r['updates_per_s'])} | {_num(r['env_steps_per_joule'], ',.1f')} | "
                     f"{r['joules_source'] or '-'} | {r['rounds']} | {_num(r['spread'], '.0%')} | "
                     + " | ".join(_num(v, '.2f') + ("x" if v is not None else "") for v in vs) + " |")
    lines += ["", "## The issue's targets", "", "| workload | measure | PEARL composed | against | target | met |",
              "|---|---|---|---|---|---|"]
    for t in doc["targets"]:
        lines.append(f"| {t['workload']} | {t['measure']} | {_num(t['value'], ',.2f')} | {t['against']} | "
                     f"{t['target']} | {t['met']} |")
    lines += ["", "## PEARL's plans", ""] + [f"- {k}: {v}" for k, v in doc["plans"].items()]
    if doc["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in doc["notes"]]
    return "\n".join(lines) + "\n"


def targets(rows: list[dict]) -> list[dict]:
    out = []
    get = {(r["workload"], r["contestant"]): r for r in rows}
    for wk, c, key, base, factor in TARGETS:
        r = get.get((wk, c))
        if r is None:
            continue
        value = r[key] if base is None else ratio(rows, wk, c, base, key)
        met = "-" if value is None else ("yes" if value >= factor else "no")
        out.append({"workload": wk, "measure": key + ("" if base is None else " ratio"), "value": value,
                    "against": "absolute" if base is None else LABELS[base],
                    "target": f">= {factor:g}" + ("" if base is None else "x"), "met": met})
    return out


def write(out: Path, doc: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "table4.json").write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    (out / "table4.md").write_text(markdown(doc), encoding="utf-8")


# -- main --------------------------------------------------------------------------------------------------
def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help="every contestant for a second or two on this "
                   "machine (1 round, small replays, no profiling); needs --out")
    p.add_argument("--out", type=Path, default=None, help=f"where table4.md/json go (default {DEFAULT_OUT})")
    p.add_argument("--workloads", default="all", help="comma list of " + ", ".join(w.key for w in WORKLOADS))
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 3; dry run 1)")
    p.add_argument("--warmup-s", type=float, default=None, help="seconds after the first update before the "
                   "window opens (default 2; dry run 0.3)")
    p.add_argument("--window-s", type=float, default=None, help="the measured window (default 5; dry run 1)")
    p.add_argument("--run-cap-s", type=float, default=None, help="seconds a run may take from its start "
                   "(default 25; dry run 20)")
    p.add_argument("--budget-s", type=float, default=None, help="no round starts that would end past this many "
                   "seconds from the start (default 420; dry run 300)")
    p.add_argument("--compose-timeout-s", type=float, default=60.0, help="a compose that profiles longer is redone "
                   "with the analytic models only (default 60, the issue's target)")
    p.add_argument("--compose-budget-s", type=float, default=120.0, help="the composes' profiling together: each "
                   "gets at most what is left of it (default 120)")
    p.add_argument("--no-profile", action="store_true", help="compose with the analytic models only")
    p.add_argument("--actors", type=int, default=None, help="PEARL's actor processes (default: half the cores, "
                   "at most 8; 1 on 2 cores)")
    p.add_argument("--compose-child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.dry_run and args.out is None:
        p.error("--dry-run needs --out DIR: a dry run never writes over the committed results in "
                f"{DEFAULT_OUT}. Fix: e.g. --out /tmp/table4")
    return args


def settings_for(args: argparse.Namespace) -> Settings:
    dry = args.dry_run

    def pick(given, real, smoke):
        return given if given is not None else (smoke if dry else real)

    cores = os.cpu_count() or 1
    return Settings(dry_run=dry, rounds=pick(args.rounds, 3, 1), warmup_s=pick(args.warmup_s, 2.0, 0.3),
                    window_s=pick(args.window_s, 5.0, 1.0), run_cap_s=pick(args.run_cap_s, 25.0, 20.0),
                    budget_s=pick(args.budget_s, 420.0, 300.0),
                    compose_timeout_s=None if dry else args.compose_timeout_s, compose_budget_s=args.compose_budget_s,
                    profile=not (dry or args.no_profile), actors=pick(args.actors, max(1, min(8, cores // 2)), 1))


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.compose_child is not None:  # a compose in a child process: its parts as one JSON line
        print(json.dumps(compose_here(json.loads(args.compose_child))))
        return 0
    t_start = time.perf_counter()
    s = settings_for(args)
    out = args.out or DEFAULT_OUT
    keys = [w.key for w in WORKLOADS] if args.workloads == "all" else args.workloads.split(",")
    workloads = [w for w in WORKLOADS if w.key in keys]
    if len(workloads) != len(keys):
        raise SystemExit(f"--workloads {args.workloads!r}: expected a comma list of "
                         f"{', '.join(w.key for w in WORKLOADS)}")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX shares the GPU with torch
    from e2e_common import drop_missing_peers, warm_up_process

    warm_up_process(["pearl-par"])  # PEARL's fork server before anything touches CUDA
    gpu = gpu_name()
    os.environ.setdefault("JAX_PLATFORMS", "cuda" if gpu else "cpu")
    device = "cuda" if gpu else "cpu"
    peers = ["sb3", "sbx"]
    notes = drop_missing_peers(peers, "sb3", "sbx")  # removes a peer whose library does not import
    where = {"sb3": f"torch {device}"}
    if "sbx" in peers:
        import jax

        where["sbx"] = f"JAX {jax.default_backend()}"
    notes += [w.note for w in workloads if w.note]

    def log(msg: str) -> None:
        print(f"[device-bench {time.perf_counter() - t_start:6.1f}s] {msg}", file=sys.stderr, flush=True)

    doc: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit(), "gpu": gpu or "none",
        "cpu_cores": os.cpu_count(), "dry_run": s.dry_run, "platform": platform.platform(), "versions": versions(),
        "command": " ".join(["python", *sys.argv]), "settings": dataclasses.asdict(s),
        "method": (f"{s.rounds} interleaved round(s); per run: the first update, {s.warmup_s:g} s of warm-up, then "
                   f"a {s.window_s:g} s window (env steps, updates, EnergyMeter joules); run cap {s.run_cap_s:g} s; "
                   "median over rounds"),
        "status": "running", "rows": [], "targets": [], "plans": {}, "notes": notes}
    runs: dict[tuple[str, str], list[dict]] = {}
    plans: dict[tuple[str, str], Composed] = {}
    with tempfile.TemporaryDirectory(prefix="pearl_devbench_") as tmp:
        compose_left = s.compose_budget_s
        for w in workloads:
            for c in w.contestants:
                if c.startswith("pearl"):
                    log(f"composing {w.key} {c} ...")
                    t0 = time.perf_counter()
                    timeout = None if s.compose_timeout_s is None else min(s.compose_timeout_s, compose_left)
                    try:
                        plans[(w.key, c)] = plan = compose(w, c == "pearl-cpu", s, f"{tmp}/compose", notes, timeout)
                        doc["plans"][f"{w.key} {c}"] = f"{plan.where}; {plan.info}"
                    except Exception as exc:  # noqa: BLE001 - a contestant that cannot compose is reported, not fatal
                        traceback.print_exc()
                        runs[(w.key, c)] = [{"error": f"compose failed: {type(exc).__name__}: {exc}"}]
                    compose_left = max(0.0, compose_left - (time.perf_counter() - t0))
        round_s: list[float] = []
        for rnd in range(s.rounds):
            elapsed = time.perf_counter() - t_start
            if round_s and elapsed + max(round_s) > s.budget_s:
                notes.append(f"stopped after {rnd} round(s): another would end past the budget of {s.budget_s:g} s "
                             f"(at {elapsed:.0f} s; a round took up to {max(round_s):.0f} s)")
                break
            t_round = time.perf_counter()
            for w in workloads:
                names = [c for c in w.contestants if c in peers or c in {k[1] for k in plans if k[0] == w.key}]
                k = rnd % len(names) if names else 0
                for c in names[k:] + names[:k]:
                    log(f"round {rnd + 1}: {w.key} {c} ...")
                    try:
                        if c in ("sb3", "sbx"):
                            r = run_peer(c, w, rnd, s, device, s.run_cap_s)
                        else:
                            r = run_pearl(plans[(w.key, c)], rnd, s, f"{tmp}/{w.key}-{c}-{rnd}", s.run_cap_s)
                    except Exception as exc:  # noqa: BLE001 - one failing run is recorded; the others still run
                        traceback.print_exc()
                        r = {"error": f"{type(exc).__name__}: {exc}"}
                    log(f"  {json.dumps({k: v for k, v in r.items() if k != 'energy'}, default=str)}")
                    gc.collect()  # the run's replay and model go before the next run starts
                    runs.setdefault((w.key, c), []).append({"round": rnd, **r})
            round_s.append(time.perf_counter() - t_round)
            doc["rows"] = [summarise(w, c, runs.get((w.key, c), []),
                                     plans[(w.key, c)].where if (w.key, c) in plans else where.get(c, "-"))
                           for w in workloads for c in w.contestants]
            doc["targets"] = targets(doc["rows"])
            doc["status"] = f"partial: {rnd + 1} of {s.rounds} round(s)"
            write(out, doc)
    doc["status"] = f"complete: {len(round_s)} round(s) in {time.perf_counter() - t_start:.0f} s"
    write(out, doc)
    log(f"written: {out / 'table4.md'}, {out / 'table4.json'}")
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
