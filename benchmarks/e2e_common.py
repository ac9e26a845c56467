"""What the end-to-end benchmarks share (``e2e_dqn.py``, ``e2e_continuous.py``).

* the PEARL contestants (runtime, replay, setting) and the command line's contestant
  and learner-thread lists;
* the stopwatch rules: a PEARL run is timed from building its runtime to ``run()``
  returning (:func:`timed_pearl_run`), a peer's (stable-baselines3, SBX) from building
  its model to ``learn()`` returning (:func:`timed_learn`), with torch and BLAS threads
  pinned for the peer (:func:`pin_threads`); one-off costs of the Python process are
  paid before any stopwatch (:func:`warm_up_process`);
* peers that are not installed are skipped with a line in the report (:func:`drop_missing_peers`);
* the report's pieces: the machine line, the head, number cells, medians, ratio cells,
  and the after-every-run outputs (``--jsonl`` line, ``--out`` rewrite; :func:`keep_run`).

The scripts put this directory on ``sys.path`` before importing it, so they run as
scripts and load by path (as their tests do) alike.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

#: PEARL contestants: name -> (runtime, replay kind, protocol setting of the parallel runtime).
PEARL = {
    "pearl-serial-uniform": ("serial", "uniform", None),
    "pearl-serial-per": ("serial", "prioritized", None),
    "pearl-par1-uniform": ("parallel", "uniform", 1),
    "pearl-par1-per": ("parallel", "prioritized", 1),
    "pearl-par2-uniform": ("parallel", "uniform", 2),
    "pearl-par2-per": ("parallel", "prioritized", 2),
}


# -- command line --------------------------------------------------------------------------
def pick_contestants(parser, spec: str, contestants: tuple[str, ...]) -> list[str]:
    """``--contestants``: ``all``, ``pearl`` (the PEARL ones) or a comma list; unknown names are an error."""
    if spec == "all":
        return list(contestants)
    if spec == "pearl":
        return [c for c in contestants if c in PEARL]
    names = [c.strip() for c in spec.split(",") if c.strip()]
    bad = [c for c in names if c not in contestants]
    if bad:
        parser.error(f"unknown contestant(s) {bad}; choose from {', '.join(contestants)}")
    return names


def parse_learner_threads(parser, text: str) -> dict[int, int]:
    """``--learner-threads 1:1,2:2``: the parallel runtime's learner threads per setting."""
    try:
        threads = {int(s): int(t) for s, t in (x.split(":") for x in text.split(",") if x)}
        assert set(threads) <= {1, 2} and all(t >= 1 for t in threads.values())
    except (ValueError, AssertionError):
        parser.error(f"--learner-threads {text!r}: expected setting:threads pairs, e.g. 1:1,2:2")
    return threads


def import_sbx():
    """Import sbx on JAX's CPU backend (unless ``JAX_PLATFORMS`` says otherwise); raises if it is
    missing or broken. Costs seconds the first time (jax, flax, optax, tensorflow-probability)."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import sbx

    return sbx


def drop_missing_peers(names: list[str], sb3: str, sbx: str) -> list[str]:
    """Remove the stable-baselines3 contestant ``sb3`` and the SBX one ``sbx`` from ``names`` (in
    place) when their library cannot be imported; returns the report's ``skipped ...`` lines."""
    notes = []
    if sb3 in names:
        try:
            import stable_baselines3  # noqa: F401
        except ImportError:
            print(f"stable-baselines3 is not installed (pip install -e .[bench]); skipping {sb3}", file=sys.stderr)
            names.remove(sb3)
            notes.append(f"skipped {sb3}: stable-baselines3 is not installed (pip install -e '.[rl,bench]')")
    if sbx in names:
        try:
            import_sbx()
        except Exception as exc:  # noqa: BLE001 - missing or broken (a jax/jaxlib mismatch...): skip, never crash
            why = f"sbx-rl is not importable ({type(exc).__name__}: {exc}); pip install -e '.[rl,bench]'"
            print(f"{why}; skipping {sbx}", file=sys.stderr)
            names.remove(sbx)
            notes.append(f"skipped {sbx}: {why}")
    return notes


# -- stopwatches ---------------------------------------------------------------------------
def warm_up_process(names: list[str]) -> None:
    """Pay, before any stopwatch, what a contestant's first run would otherwise load inside it:
    torch's optimizer machinery (the first ``torch.optim.Adam`` imports ``torch._dynamo``, ~1.4 s
    here) for everybody, and PEARL's worker fork server (which imports torch once for all the
    workers it forks, ~3 s; :mod:`pearl_core.runtime.procs`) when a parallel contestant runs."""
    import torch

    torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    if any(n.startswith("pearl-par") for n in names):
        from pearl_core.runtime.procs import worker_context

        worker_context(early=True)


def timed_pearl_run(cfg, name: str, n_actors: int, envs_per_actor: int,
                    learner_threads: dict[int, int] | None = None, **runtime_kwargs):
    """Run the PEARL contestant ``name`` on ``cfg`` under a stopwatch from building the runtime to
    ``run()`` returning, as for SB3 (the parallel runtime's process start-up and shutdown count).

    Returns ``(result, wall_s, before_clock_s, plan)``: ``before_clock_s`` is the stopwatch time
    before the run's own clock started (construction + ``result.startup_s``), so
    ``before_clock_s + t`` is the stopwatch time of a run-clock time ``t`` (``solved_at_wall_s``,
    the ``wall_s`` of its logs); ``plan`` describes the runtime plan for the JSON lines.
    ``runtime_kwargs`` go to the runtime (``metrics_every``, ...); progress, TensorBoard and the
    learning-curve plot are off."""
    from pearl_core.runtime.config import RuntimePlan

    kind, _, setting = PEARL[name]
    common = dict(progress=False, tensorboard=False, plot=False, **runtime_kwargs)
    t0 = time.perf_counter()
    if kind == "serial":
        from pearl_core.runtime.serial import SerialRuntime

        plan = RuntimePlan(rm_threads=1, learner_threads=1)
        rt = SerialRuntime(cfg, plan, **common)
    else:
        from pearl_core.runtime.parallel import ParallelRuntime

        threads = (learner_threads or {}).get(setting, 1)
        plan = RuntimePlan(setting=setting, n_actors=n_actors, envs_per_actor=envs_per_actor,
                           learner_threads=threads, rm_threads=1)
        rt = ParallelRuntime(cfg, plan, **common)
    t_run = time.perf_counter()
    res = rt.run()
    wall = time.perf_counter() - t0
    before_clock = (t_run - t0) + res.startup_s
    described = ({"setting": setting, "n_actors": n_actors, "envs_per_actor": envs_per_actor,
                  "learner_threads": plan.learner_threads} if kind == "parallel" else {"serial": True})
    return res, wall, before_clock, described


def pin_threads(threads: int):
    """Torch and numpy's BLAS on ``threads`` threads; returns the restore callable."""
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    blas = threadpool_limits(limits=threads, user_api="blas")

    def restore() -> None:
        torch.set_num_threads(before)
        blas.restore_original_limits()

    return restore


def timed_learn(build: Callable, make_callback: Callable[[float], object], budget: int, threads: int):
    """A peer's run (SB3, SBX): threads pinned, then a stopwatch from ``build()`` (the model's
    construction) to ``learn(budget)`` returning, with the callback ``make_callback(t0)`` builds
    (``t0``: the stopwatch's start, ``time.perf_counter()``). Returns ``(model, callback, wall_s)``."""
    restore = pin_threads(threads)
    try:
        t0 = time.perf_counter()
        model = build()
        cb = make_callback(t0)
        model.learn(total_timesteps=budget, callback=cb)
        wall = time.perf_counter() - t0
    finally:
        restore()
    return model, cb, wall


# -- report --------------------------------------------------------------------------------
def fmt(v, spec: str = ".0f") -> str:
    return "-" if v is None else format(v, spec)


def median(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def speedup_cell(x: float | None, base: float | None, target: float) -> str:
    """``x / base`` as a speed-up against ``target`` (``"2.50x (met)"``); "-" if either is missing."""
    if not base or x is None:
        return "-"
    r = x / base
    return f"{r:.2f}x ({'met' if r >= target else 'not met'})"


def fraction_cell(x: float | None, base: float | None, target: float | None = None) -> str:
    """``x / base`` as a fraction (``"0.40 (met)"`` against ``target``, plain without one); "-" if missing."""
    if not base or x is None:
        return "-"
    r = x / base
    return f"{r:.2f}" if target is None else f"{r:.2f} ({'met' if r <= target else 'not met'})"


def ratio_cells(m: dict, base: dict | None, sps_target: float = 3.0,
                wall_target: float | None = 0.5) -> tuple[str, str]:
    """The two ratio cells of a summary row against a baseline's medians (``sps``, ``wall``):
    env steps/s as a speed-up (target >= ``sps_target``) and wall-to-solved as a fraction (target
    <= ``wall_target``); "-" where the baseline is absent or either side has no figure (e.g. never solved)."""
    if base is None:
        return "-", "-"
    return speedup_cell(m["sps"], base["sps"], sps_target), fraction_cell(m["wall"], base["wall"], wall_target)


def machine() -> str:
    try:
        load = os.getloadavg()
        load_s = f"load average {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}"
    except OSError:
        load_s = "load average n/a"
    import torch

    try:
        import stable_baselines3
        sb3 = stable_baselines3.__version__
    except ImportError:
        sb3 = "not installed"
    # SBX only if this process imported it (a contestant): importing jax costs seconds
    sbx = sys.modules.get("sbx")
    sbx_s = ""
    if sbx is not None:
        import jax

        sbx_s = f", sbx-rl {sbx.__version__}, jax {jax.__version__} ({jax.default_backend()})"
    return (f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"torch {torch.__version__}, stable-baselines3 {sb3}{sbx_s}; {load_s}")


def report_head(started: str, load_start: str, runs: int, done: bool) -> str:
    """The report's first lines: the command, when it started, its status, the machine then and now."""
    status = "complete" if done else f"PARTIAL ({runs} runs finished)"
    return (f"command: `{' '.join(['python', *sys.argv])}`\n\n"
            f"started {started} UTC; status: {status}\n\n"
            f"machine at start: {load_start}\n\nmachine now: {machine()}\n\n")


def keep_run(rows: list[dict], row: dict, jsonl: Path | None, out: Path | None, partial: Callable[[], str]) -> dict:
    """A finished run: the contestant's ``row`` (with the load average now) joins ``rows``, goes to
    stderr and to ``jsonl`` (appended), and ``out`` is rewritten with ``partial()`` (the report so far),
    so an interrupted sweep keeps its partial table. Returns the row as kept."""
    row = {**row, "load1": os.getloadavg()[0]}
    rows.append(row)
    print(f"[e2e] {json.dumps(row)}", file=sys.stderr, flush=True)
    if jsonl is not None:
        jsonl.parent.mkdir(parents=True, exist_ok=True)
        with open(jsonl, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(partial(), encoding="utf-8")
    return row
