"""The generated program's ``main``: one library function, so a fix reaches programs already written.

A program RuntimeGen writes (:mod:`pearl_core.composer.runtimegen`) holds its
inputs as literals (``RUN_CONFIG``, ``RUNTIME_PLAN``, ``PLAN_JSON``) and ends with::

    if __name__ == "__main__":
        sys.exit(pearl_core.runtime.main(RUN_CONFIG, RUNTIME_PLAN, PLAN_JSON, plan_hash=PLAN_HASH, ...))

:func:`main` parses the program's command line, checks everything it can
before any worker starts (``error: ...``, exit status 2), runs the plan with
:class:`~pearl_core.runtime.ParallelRuntime` (or
:class:`~pearl_core.runtime.rayrun.RayRuntime` with ``--ray``) and writes
``composer_plan.json`` and ``result.json`` into the run's directory. Exit status:
0 the run ended, 1 the run failed (its checkpoint and logs say how far it got),
2 refused before training.

``--resume RUN`` continues a run from its checkpoint (``RUN`` is its
directory or its checkpoint file): trainer, replay (if saved), counters, stop
state and logs, in that run's own directory unless ``--log-dir`` says
otherwise. Budgets are totals: ``--max-env-steps 20000`` on a run at 10,000 env
steps trains 10,000 more. A new run (no ``--resume``) never writes into a
directory that holds an earlier run: it takes ``<log-dir>-2`` etc.
(:mod:`pearl_core.runtime.rundir`) and prints where.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from pearl_core.errors import PearlError, SpecError
from pearl_core.fileio import atomic_write
from pearl_core.runtime.config import RunConfig, RuntimePlan

__all__ = ["build_parser", "callback_list", "main", "plan_edits", "refuse_edited_values", "resumed_config", "run_plan"]


def refuse_edited_values() -> None:
    """Called by a generated program before its ``RUN_CONFIG`` and ``RUNTIME_PLAN``: a value edited into one
    that PEARL refuses (a ``PearlError`` while the program's own lines run) is printed as ``error: ...`` with
    the fix, not as a traceback (the exit status is 1). Other exceptions, and errors raised later from
    :func:`main`, are reported as before."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        frames = []
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        in_program = bool(frames) and frames[0].f_code.co_name == "<module>" and \
            frames[0].f_globals.get("__name__") in ("__main__", "__mp_main__")
        if not (isinstance(exc, PearlError) and in_program):
            previous(kind, exc, tb)
            return
        line = next((f.f_lineno for f in frames if f.f_globals is frames[0].f_globals), None)
        print(f"error: this program's settings (line {line} of {frames[0].f_code.co_filename}) are not valid: "
              f"{exc} If you edited RUN_CONFIG or RUNTIME_PLAN by hand: compose the program again (pearl compose "
              "... -o program.py) with the setting you want, or pass it on the command line (--help).",
              file=sys.stderr)

    sys.excepthook = hook


def build_parser(run_config: RunConfig, plan_hash: str = "") -> argparse.ArgumentParser:
    """The generated program's options (defaults shown from ``run_config``)."""

    def default(value: object) -> str:  # argparse expands % in help texts; a lone surrogate cannot be printed
        text = str(value).encode("utf-8", "backslashreplace").decode("utf-8")
        return " (default: " + text.replace("%", "%%") + ")"

    parser = argparse.ArgumentParser(description="Train with the plan PEARL composed"
                                     + (f" ({plan_hash[:12]})." if plan_hash else "."))
    parser.add_argument("--max-env-steps", type=int, default=None,
                        help="env-step budget, in total (a resumed run counts its earlier steps)"
                        + default(run_config.stop.max_env_steps))
    parser.add_argument("--max-wall-time-s", type=float, default=None,
                        help="wall-time budget in seconds" + default(run_config.stop.max_wall_time_s))
    parser.add_argument("--log-dir", default=None, help="logs, checkpoint, result.json" + default(run_config.log_dir)
                        + "; a directory holding an earlier run is kept and this run goes to <dir>-2, <dir>-3, ...")
    parser.add_argument("--seed", type=int, default=None, help="base seed" + default(run_config.seed))
    parser.add_argument("--resume", metavar="RUN", default=None,
                        help="continue the run in directory RUN (or from the checkpoint file RUN): weights, replay, "
                        "counters and logs; it writes into RUN unless --log-dir is given")
    parser.add_argument("--callback", metavar="MODULE:NAME", action="append", default=None,
                        help="a pearl_core.callbacks callback (a class or factory called with no arguments), "
                        "run at each metrics row, evaluation, checkpoint; repeatable")
    parser.add_argument("--save-best", action="store_true",
                        help="keep the best policy evaluated as <run>/best_model.pt (needs evaluations)")
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    parser.add_argument("--ray", metavar="ADDRESS", default=None,
                        help="run the actors on the Ray cluster at ADDRESS ('auto': the cluster of this machine); "
                        "the replay manager and learner run here, on the plan's devices "
                        "(needs: pip install 'pearl-core[ray]')")
    parser.add_argument("--ray-actors", type=int, default=None,
                        help="with --ray: actors to place (default: the fewest that keep the learner fed)")
    parser.add_argument("--measure-links", action="store_true",
                        help="with --ray: measure each node's link to this process instead of assuming 10 GbE")
    parser.add_argument("--cluster", metavar="SPEC", default=None,
                        help="with --ray: take each node's link from this cluster spec (TOML; a [[node]] per host "
                        "with its address, latency_us, bandwidth_GBps) instead of assuming 10 GbE")
    parser.add_argument("--show-plan", action="store_true", help="print the embedded plan JSON and exit")
    return parser


def resumed_config(config: RunConfig, resume: str | os.PathLike[str] | None, *, max_env_steps: int | None = None,
                   max_wall_time_s: float | None = None, log_dir: str | None = None, seed: int | None = None
                   ) -> tuple[RunConfig, Path | None]:
    """``config`` with the command line's budgets, directory and seed, and the checkpoint file to resume (or None).

    A resumed run writes into the checkpoint's own run directory unless ``log_dir``
    is given.

    Raises:
        PearlError: no checkpoint at ``resume``, or the run already reached the budget asked for.
    """
    from pearl_core.policy import find_checkpoint
    from pearl_core.runtime.checkpoint import load_checkpoint

    stop = config.stop
    if max_env_steps is not None:
        stop = dataclasses.replace(stop, max_env_steps=max_env_steps)
    if max_wall_time_s is not None:
        stop = dataclasses.replace(stop, max_wall_time_s=max_wall_time_s)
    ck_path = None
    if resume is not None:
        ck_path = find_checkpoint(resume)
        ck = load_checkpoint(ck_path)
        if log_dir is None:
            log_dir = str(ck_path.parent)
        done, budget = ck.state.env_steps, stop.max_env_steps
        if budget is not None and done >= budget:
            raise SpecError(f"--resume {str(resume)!r}: that run already took {done:,} env steps, and the budget is "
                            f"{budget:,} in total. Fix: give a larger --max-env-steps (e.g. {done + budget:,} for "
                            f"{budget:,} more).")
    out = dataclasses.replace(config, stop=stop, log_dir=log_dir or config.log_dir,
                              seed=config.seed if seed is None else seed)
    return out, ck_path


def run_plan(config: RunConfig, runtime_plan: RuntimePlan, plan: Any, *, plan_hash: str, pearl_version: str,
             resume_from: Path | None = None, quiet: bool = False, ray: str | None = None,
             ray_actors: int | None = None, measure_links: bool = False, cluster: str | None = None,
             plan_json: str | None = None, callbacks: Sequence[Any] = (), out=None) -> int:
    """Build the runtime, run it, write ``composer_plan.json`` and ``result.json``; the exit status (0, 1 or 2).

    ``plan`` is the :class:`~pearl_core.composer.plan.PlacementPlan` (or ``None``
    when a resumed run's plan is not known: then no ``composer_plan.json`` is written); ``callbacks``
    go to the runtime (:mod:`pearl_core.callbacks`). ``result.json`` also holds the run's ``energy`` and
    ``env_steps_per_joule`` (:class:`~pearl_core.runtime.energy.RunEnergy`: measured where NVML or RAPL
    can be read, else modelled from the plan's host watts, each part saying which).
    """
    from pearl_core.runtime.energy import RunEnergy

    out = out or sys.stdout
    energy = RunEnergy(plan.spec if plan is not None else None)  # meters the run: result.json's energy
    callbacks = [energy, *callbacks]
    try:  # every check fails here with `error: ...` (exit 2), before any worker starts
        if ray is not None:  # the actors where the cluster model puts them (pearl_core.composer.cluster)
            from pearl_core.composer.cluster import ClusterSpec, describe, place_for_plan
            from pearl_core.runtime.rayrun import RayRuntime

            if plan is None:
                raise SpecError("--ray needs the composer's plan to place the actors, and this run has none. Fix: run "
                                "the program RuntimeGen wrote for it.")
            links = ClusterSpec.load(cluster) if cluster else None  # read before connecting
            cl = ClusterSpec.from_ray(ray, measure=measure_links, links=links)
            actors = place_for_plan(cl, plan, replay_ratio=config.replay_ratio, n_actors=ray_actors,
                                    insert_batch=runtime_plan.insert_batch, weight_sync_every=config.weight_sync_every)
            for line in () if quiet else describe(actors, cl):
                print(line, file=out)
            runtime = RayRuntime(config, dataclasses.replace(runtime_plan, n_actors=actors.n_actors), address=ray,
                                 progress=not quiet, resume_from=resume_from, callbacks=callbacks,
                                 **actors.runtime_kwargs())
        else:
            from pearl_core.runtime.parallel import ParallelRuntime

            runtime = ParallelRuntime(config, runtime_plan, progress=not quiet, resume_from=resume_from,
                                      callbacks=callbacks)
    except PearlError as exc:
        print("error: " + str(exc), file=sys.stderr)
        return 2
    log_dir = runtime.config.log_dir
    where = f"PEARL {pearl_version}: plan {plan_hash[:12]}"
    if plan is not None:
        where += (f", RM on {plan.rm_device}, learner on {plan.learner_device}, Data Storage on {plan.ds_device}, "
                  f"setting {plan.setting}")
    print(where, file=out)
    if resume_from is not None:
        print(f"resuming {str(resume_from)!r} at {runtime.checkpoint.state.env_steps:,} env steps", file=out)
    if log_dir != config.log_dir:
        print(f"{config.log_dir!r} holds an earlier run, which is kept; this run writes to {log_dir!r}", file=out)
    try:
        result = runtime.run()
    except SpecError as exc:  # refused before training (e.g. another run owns the log directory)
        print("error: " + str(exc), file=sys.stderr)
        return 2
    except PearlError as exc:  # the run failed (its checkpoint and logs say how far it got)
        print("error: " + str(exc), file=sys.stderr)
        return 1
    finally:
        energy.close()
    # Written once the run has owned its log directory (never over another run's files).
    if plan_json is not None:
        _write_json(os.path.join(result.log_dir, "composer_plan.json"), json.loads(plan_json))
    _write_json(os.path.join(result.log_dir, "result.json"),
                {"plan_hash": plan_hash, "pearl_version": pearl_version, **dataclasses.asdict(result),
                 **energy.fields(result.env_steps)})
    print(result.summary(), file=out)
    print(energy.summary(result.env_steps), file=out)
    print("logs, learning curve, checkpoint and result.json in " + result.log_dir, file=out)
    return 0


def _write_json(path: str, value: object) -> None:
    atomic_write(path, json.dumps(value, indent=2, sort_keys=True), make_parents=True)


def main(run_config: RunConfig, runtime_plan: RuntimePlan, plan_json: str, *, plan_hash: str,
         pearl_version: str = "", backends: Sequence[str] = (), script_error: BaseException | None = None,
         argv: Sequence[str] | None = None) -> int:
    """A generated program's entry point; returns its exit status (see the module docstring).

    Args:
        run_config, runtime_plan, plan_json: the program's ``RUN_CONFIG``, ``RUNTIME_PLAN`` and ``PLAN_JSON``.
        plan_hash: the program's ``PLAN_HASH`` (checked against ``plan_json``; a mismatch is warned about).
        pearl_version: the PEARL version that wrote the program.
        backends: the backends driving the chosen devices (each is checked to be usable here).
        script_error: what loading the user's script raised at the program's import, if anything.
        argv: the command line (default ``sys.argv[1:]``).
    """
    from pearl_core.composer.plan import PlacementPlan
    from pearl_core.plugins import get_backend
    from pearl_core.runtime.wiring import load_trainer_class

    args = build_parser(run_config, plan_hash).parse_args(None if argv is None else list(argv))
    try:
        plan = PlacementPlan.from_json(plan_json)
    except Exception as exc:  # noqa: BLE001 - an edited literal: say so instead of a traceback
        print(f"error: PLAN_JSON in this program is not a placement plan PEARL can read ({type(exc).__name__}: "
              f"{exc}); it was edited or damaged. {_RECOMPOSE}", file=sys.stderr)
        return 2
    edited = plan_edits(plan, plan_hash, runtime_plan)
    if args.show_plan:
        print(plan_json)
        print("plan hash:", plan.content_hash())
        if edited:
            print("warning: " + edited, file=sys.stderr)
        return 0
    if edited:
        print("error: " + edited, file=sys.stderr)
        return 2
    if args.ray is None and (args.ray_actors is not None or args.measure_links or args.cluster):
        print("error: --ray-actors, --measure-links and --cluster place the run on a Ray cluster, but no --ray "
              "ADDRESS was given", file=sys.stderr)
        return 2
    if args.measure_links and args.cluster:
        print("error: --measure-links and --cluster both give the nodes' links. Fix: give one of them",
              file=sys.stderr)
        return 2
    try:  # every check fails here with `error: ...` (exit 2), before any worker starts
        if script_error is not None:
            raise script_error
        for name in backends:
            get_backend(name)
        load_trainer_class(run_config.trainer)
        config, resume_from = resumed_config(run_config, args.resume, max_env_steps=args.max_env_steps,
                                             max_wall_time_s=args.max_wall_time_s, log_dir=args.log_dir,
                                             seed=args.seed)
    except PearlError as exc:
        print("error: " + str(exc), file=sys.stderr)
        return 2
    return run_plan(config, runtime_plan, plan, plan_hash=plan_hash, pearl_version=pearl_version,
                    resume_from=resume_from, quiet=args.quiet, ray=args.ray, ray_actors=args.ray_actors,
                    measure_links=args.measure_links, cluster=args.cluster, plan_json=plan_json,
                    callbacks=callback_list(args.callback, args.save_best))


_RECOMPOSE = ("Fix: compose the program again (`pearl compose ...`, or Composer(...).run() and write it) instead of "
              "editing it; to run another placement, compose with it (e.g. `pearl compose --place ...`).")
#: The RuntimePlan fields the placement plan decides (the rest, e.g. vector_backend, the composer may set).
_PLACEMENT_FIELDS = ("rm_backend", "rm_device", "learner_device", "storage_device", "backends")


def plan_edits(plan: Any, plan_hash: str, runtime_plan: RuntimePlan) -> str:
    """What was edited in a generated program's plan literals, or ``""``: PLAN_JSON against its stamped PLAN_HASH,
    and RUNTIME_PLAN's placement against PLAN_JSON's choice."""
    found = plan.content_hash()
    if found != plan_hash:
        return (f"PLAN_JSON differs from the plan this program was generated from: its sha256 is {found[:12]}..., "
                f"PLAN_HASH says {plan_hash[:12]}... (the JSON was edited). {_RECOMPOSE}")
    try:
        want = plan.runtime_plan(vector_backend=runtime_plan.vector_backend)
    except PearlError as exc:
        return f"PLAN_JSON's choice cannot be turned into a runtime plan here ({exc}). {_RECOMPOSE}"
    changed = [f"{name} = {getattr(runtime_plan, name)!r} (the plan chose {getattr(want, name)!r})"
               for name in _PLACEMENT_FIELDS if getattr(runtime_plan, name) != getattr(want, name)]
    if changed:
        return (f"RUNTIME_PLAN differs from the placement in PLAN_JSON (hash {plan_hash[:12]}...): "
                f"{'; '.join(changed)}. {_RECOMPOSE}")
    return ""


def callback_list(names: Sequence[str] | None, save_best: bool) -> list[Any]:
    """``--callback`` import paths (loaded by the runtime) and, with ``--save-best``, a :class:`BestModelSaver`."""
    from pearl_core.callbacks import BestModelSaver

    return [*(names or ()), *([BestModelSaver()] if save_best else [])]
