"""``pearl train`` and ``pearl eval``: one command from an env id to a trained run, and back to a score or a video.

::

    pearl train --algo dqn --env CartPole-v1                    # rl-zoo's preset, composed for this machine, run
    pearl train --algo sac --env Pendulum-v1 --max-env-steps 20000 --log-dir runs/sac
    pearl train --resume runs/sac --max-env-steps 40000         # continue that run to 40,000 env steps
    pearl eval runs/sac --episodes 10 --video videos/           # mean ± std, and an mp4 per episode

``pearl train`` takes rl-zoo's published hyper-parameters for the algorithm and env
when there is a preset (:mod:`pearl_core.presets`; printed, each overridable on
the command line, ``--preset FILE`` for your own, ``--no-preset`` for the
trainer's defaults), composes the plan for this machine (``pearl compose``'s
composer, always a plan that runs here), writes the generated program into the
run directory (``<run>/runtime.py``: ``python <run>/runtime.py --resume <run>``
works too) and runs it in this process (:func:`pearl_core.runtime.program.run_plan`).
A run directory that holds an earlier run is never written into: the run takes
``<dir>-2``, ``<dir>-3``, ... and says so.

``pearl eval`` loads the run's policy (:func:`pearl_core.load_policy`), plays
``--episodes`` seeded episodes and prints ``mean ± std``
(:func:`pearl_core.evaluate_policy`); ``--video DIR`` also writes
``DIR/episode-<k>.mp4`` per episode (:mod:`pearl_core.video`).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from pearl_core.errors import PearlError, SpecError
from pearl_core.runtime.program import callback_list

__all__ = ["default_log_dir", "eval_command", "train_command"]

#: The program a ``pearl train`` run keeps in its directory.
PROGRAM_NAME = "runtime.py"


def default_log_dir(algo: str, env_id: str) -> str:
    """``runs/<algo>/<env>`` with the env id made a path segment (``ALE/Pong-v5`` -> ``ALE-Pong-v5``)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", env_id.split(":")[-1]).strip("-") or "env"
    algo_name = re.sub(r"[^A-Za-z0-9._-]+", "-", algo.split(":")[-1]).strip("-").lower() or "trainer"
    return os.path.join("runs", algo_name, name)


def _cwd_on_path() -> None:
    """Put the working directory on ``sys.path``, as ``python -m`` does: an env named ``my_module:MyEnv-v0`` and a
    trainer ``my_module:MyTrainer`` next to the user import here and in the run's spawned workers."""
    if str(Path.cwd()) not in sys.path and "" not in sys.path:
        sys.path.insert(0, str(Path.cwd()))


def _fail(console: Console, exc: BaseException | str, code: int = 2) -> None:
    console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
    raise typer.Exit(code)


def _hidden(text: Optional[str]) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        sizes = tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        sizes = ()
    if not sizes or any(s < 1 for s in sizes):
        raise SpecError(f"--hidden {text!r}; expected comma-separated layer sizes >= 1. Fix: e.g. --hidden 256,256.")
    return sizes


def _kwargs(text: Optional[str]) -> dict[str, Any] | None:
    from pearl_core.composer.cli import parse_trainer_kwargs

    return parse_trainer_kwargs(text)


def train_command(
    algo: Optional[str] = typer.Option(None, "--algo", "-a", help="dqn, ddpg, td3, sac, or a trainer import path "
                                       "'pkg.module:Class' (required unless --resume)."),
    env_id: Optional[str] = typer.Option(None, "--env", "-e", help="gymnasium id, e.g. CartPole-v1, ALE/Pong-v5, "
                                         "or 'my_module:MyEnv-v0' (required unless --resume)."),
    hardware: Optional[Path] = typer.Option(None, "--hardware", "-H", help="Hardware spec (TOML). Default: the "
                                            "devices the installed backends detect here."),
    max_env_steps: Optional[int] = typer.Option(None, "--max-env-steps", "-n", help="Env-step budget in total "
                                                "(default: the preset's n_timesteps, else 100,000)."),
    log_dir: Optional[str] = typer.Option(None, "--log-dir", "-o", help="Run directory (default: "
                                          "runs/<algo>/<env>; one holding an earlier run is kept, this run "
                                          "takes <dir>-2, ...)."),
    preset: Optional[Path] = typer.Option(None, "--preset", help="Your own preset file (TOML, the format of "
                                          "pearl_core/presets/dqn.toml) instead of rl-zoo's."),
    no_preset: bool = typer.Option(False, "--no-preset", help="Use the trainer's own defaults, no preset."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Continue the run in this directory (its "
                                          "checkpoint, config and plan) up to --max-env-steps in total."),
    trust_checkpoint: bool = typer.Option(False, "--trust-checkpoint", help="With --resume: import the modules "
                                          "the checkpoint names (trainer, env, wrappers) even if they are not "
                                          "PEARL's own or given by --algo/--env. Importing runs their code."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", "-b", help="Overrides the preset's."),
    learning_starts: Optional[int] = typer.Option(None, "--learning-starts", help="Overrides the preset's."),
    replay_ratio: Optional[float] = typer.Option(None, "--replay-ratio", help="Learner updates per env step; "
                                                 "overrides the preset's."),
    capacity: Optional[int] = typer.Option(None, "--capacity", help="Replay capacity; overrides the preset's."),
    hidden: Optional[str] = typer.Option(None, "--hidden", help="Hidden sizes, e.g. 256,256; overrides the "
                                         "preset's."),
    trainer_kwargs: Optional[str] = typer.Option(None, "--trainer-kwargs", help="JSON object of trainer "
                                                 "keywords, applied over the preset's."),
    replay: Optional[str] = typer.Option(None, "--replay", help="uniform (rl-zoo's) or prioritized."),
    eval_return: Optional[float] = typer.Option(None, "--eval-return", help="Stop once a greedy evaluation "
                                                "averages at least this."),
    eval_every: Optional[int] = typer.Option(None, "--eval-every", help="Env steps between greedy evaluations "
                                             "(logged to evals.csv; default: only with --eval-return)."),
    callback: Optional[list[str]] = typer.Option(None, "--callback", help="A callback 'pkg.module:Name' "
                                                 "(pearl_core.callbacks; a class or factory called with no "
                                                 "arguments); repeatable."),
    save_best: bool = typer.Option(False, "--save-best", help="Keep the best policy evaluated as "
                                   "<run>/best_model.pt (evaluates every --eval-every env steps, default a tenth "
                                   "of the budget)."),
    seed: int = typer.Option(0, "--seed", help="Base seed."),
    n_actors: int = typer.Option(1, "--actors", help="Actor processes."),
    profile: bool = typer.Option(True, "--profile/--no-profile", help="Measure this machine's cells (cached) "
                                 "or use the analytic models only."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
) -> None:
    """Train an algorithm on an env in one command: preset, plan for this machine, program, run."""
    options = dict(locals())
    console = Console(width=max(120, Console().width))
    _cwd_on_path()
    if resume is not None:
        rc = _resume(console, resume, algo=algo, env_id=env_id, max_env_steps=max_env_steps, log_dir=log_dir,
                     quiet=quiet, callbacks=callback_list(callback, save_best), trust=trust_checkpoint)
        raise typer.Exit(rc)
    if algo is None or env_id is None:
        _fail(console, "pearl train needs --algo and --env (or --resume RUN_DIR). Fix: e.g. pearl train --algo dqn "
              "--env CartPole-v1.")
    try:
        composition, directory, _ = _compose(console, **options)
    except (PearlError, OSError) as exc:
        _fail(console, exc)
    rc = _run_composition(console, composition, directory, quiet=quiet, callbacks=callback_list(callback, save_best))
    raise typer.Exit(rc)


def _preset_for(console: Console, algo: str, env_id: str, preset: Optional[Path], no_preset: bool):
    from pearl_core.presets import find_preset, load_preset_file, no_preset_note

    if preset is not None and no_preset:
        raise SpecError("--preset and --no-preset contradict each other. Fix: give one of them.")
    if no_preset:
        console.print("no preset (--no-preset): the trainer's own defaults apply")
        return None
    found = load_preset_file(preset, env_id) if preset is not None else find_preset(algo, env_id)
    if found is None:
        console.print(escape(no_preset_note(algo, env_id)), soft_wrap=True)
    return found


def _compose(console: Console, **o: Any):
    """The composition for the command's options, its run directory and the preset used (or None)."""
    from pearl_core.composer.api import Composer
    from pearl_core.runtime.config import resolve_trainer_name
    from pearl_core.runtime.rundir import fresh_log_dir
    from pearl_core.runtime.wiring import load_trainer_class

    algo, env_id = o["algo"], o["env_id"]
    trainer_path = resolve_trainer_name(algo)
    trainer = load_trainer_class(trainer_path)  # a clear error for a bad name, before anything slow
    chosen = _preset_for(console, algo, env_id, o["preset"], o["no_preset"])
    given_kwargs = _kwargs(o["trainer_kwargs"])
    hidden = _hidden(o["hidden"])
    if chosen is not None:
        chosen = chosen.override(batch_size=o["batch_size"], learning_starts=o["learning_starts"],
                                 replay_ratio=o["replay_ratio"], capacity=o["capacity"], hidden=hidden,
                                 max_env_steps=o["max_env_steps"], trainer_kwargs=given_kwargs,
                                 replay_kind=o["replay"])
        for line in chosen.lines():
            console.print(escape(line), soft_wrap=True)
        if chosen.trainer and chosen.trainer != trainer_path:
            console.print(f"note: the preset is for {escape(chosen.trainer)}; training {escape(trainer_path)}")
        kwargs, batch, starts = dict(chosen.trainer_kwargs), chosen.batch_size, chosen.learning_starts
        ratio, cap, kind, budget = chosen.replay_ratio, chosen.capacity, chosen.replay_kind, chosen.max_env_steps
        random_steps, wrappers = chosen.random_steps, chosen.env_wrappers
    else:
        from pearl_core.algorithms.defaults import hidden_kwargs

        kwargs = dict(given_kwargs or {})
        if hidden is not None:
            kwargs.update(hidden_kwargs(trainer, list(hidden)))
        batch, starts = o["batch_size"] or 64, 1_000 if o["learning_starts"] is None else o["learning_starts"]
        ratio, cap = o["replay_ratio"] or 0.5, o["capacity"] or 100_000
        kind, budget = o["replay"] or "prioritized", o["max_env_steps"] or 100_000
        random_steps, wrappers = 0, None
    directory = fresh_log_dir(o["log_dir"] or default_log_dir(algo, env_id))
    composer = Composer(o["hardware"], "throughput")
    composer.set_actors(env_id, o["n_actors"], wrappers=wrappers)
    composer.set_train_function(trainer, batch, replay_ratio=ratio, learning_starts=starts,
                                random_steps=random_steps, **kwargs)
    composer.set_replay(kind, cap)
    eval_every = o["eval_every"]
    if o["save_best"] and eval_every is None and o["eval_return"] is None:
        eval_every = max(1, budget // 10)
        console.print(f"--save-best: evaluating every {eval_every:,} env steps (a tenth of the budget; --eval-every "
                      "sets it)")
    composer.set_stop(eval_return=o["eval_return"], max_env_steps=budget,
                      **({"eval_every": eval_every} if eval_every is not None else {}))
    composer.set_run(seed=o["seed"], log_dir=directory)
    composition = composer.run(profile=o["profile"], runnable=True)
    if composition.refusals:
        raise SpecError("the plan cannot run here: " + "; ".join(composition.refusals))
    return composition, directory, chosen


def _run_composition(console: Console, composition, directory: str, *, quiet: bool, callbacks: list) -> int:
    """Render the plan, keep the program in the run directory, run it; the exit status."""
    from pearl_core.composer.cli import render_plan
    from pearl_core.composer.plan import pearl_version
    from pearl_core.composer.runtimegen import render_program
    from pearl_core.fileio import atomic_write
    from pearl_core.runtime.program import run_plan

    render_plan(composition, console)
    program = Path(directory) / PROGRAM_NAME
    try:
        atomic_write(program, render_program(composition), make_parents=True)
    except (PearlError, OSError) as exc:
        _fail(console, exc)
    console.print(f"program written to {escape(str(program))} (rerun or resume it with: python "
                  f"{escape(str(program))} --resume {escape(directory)})", soft_wrap=True)
    plan = composition.plan
    rc = run_plan(composition.config, composition.runtime_plan, plan, plan_hash=plan.content_hash(),
                  pearl_version=pearl_version(), quiet=quiet, plan_json=plan.to_json(), callbacks=callbacks)
    if rc == 2 and not any(p.name != PROGRAM_NAME for p in Path(directory).iterdir()):
        program.unlink(missing_ok=True)  # refused before training: leave nothing behind
        try:
            Path(directory).rmdir()
        except OSError:
            pass
    return rc


def _resume(console: Console, run: Path, *, algo: Optional[str], env_id: Optional[str],
            max_env_steps: Optional[int], log_dir: Optional[str], quiet: bool, callbacks: list,
            trust: bool = False) -> int:
    """``pearl train --resume RUN``: the run's own config and plan, from its checkpoint."""
    from pearl_core.composer.plan import PlacementPlan, pearl_version
    from pearl_core.runtime.checkpoint import check_modules, load_checkpoint
    from pearl_core.runtime.config import resolve_trainer_name
    from pearl_core.runtime.program import resumed_config, run_plan

    try:
        from pearl_core.policy import find_checkpoint

        ck = load_checkpoint(find_checkpoint(run))
        if env_id is not None and env_id != ck.config.env_id:
            raise SpecError(f"--resume {str(run)!r} trained {ck.config.env_id!r}, but --env {env_id!r} was given. "
                            "Fix: leave --env out (the run's own is used), or start a new run.")
        if algo is not None and resolve_trainer_name(algo) != ck.config.trainer:
            raise SpecError(f"--resume {str(run)!r} trained {ck.config.trainer!r}, but --algo {algo!r} was given. "
                            "Fix: leave --algo out (the run's own is used), or start a new run.")
        given = [str(resolve_trainer_name(x)).partition(":")[0] for x in (algo, env_id) if x and ":" in str(
            resolve_trainer_name(x))]  # modules the command line names are the user's own choice
        check_modules(ck, trust_modules=trust, allowed=given, path=find_checkpoint(run))
        config, ck_path = resumed_config(ck.config, run, max_env_steps=max_env_steps, log_dir=log_dir)
        plan_file = Path(ck_path).parent / "composer_plan.json"
        plan_json = plan_file.read_text(encoding="utf-8") if plan_file.is_file() else None
        plan = PlacementPlan.from_json(plan_json) if plan_json is not None else None
    except (PearlError, OSError, ValueError, json.JSONDecodeError) as exc:
        _fail(console, exc)
    return run_plan(config, ck.plan, plan, plan_hash=plan.content_hash() if plan is not None else "",
                    pearl_version=pearl_version(), resume_from=ck_path, quiet=quiet, plan_json=plan_json,
                    callbacks=callbacks)


def eval_command(
    run: Path = typer.Argument(..., help="A run directory (its checkpoint.pt) or a checkpoint file."),
    episodes: int = typer.Option(10, "--episodes", "-n", help="Episodes to play."),
    seed: int = typer.Option(0, "--seed", help="Episode k starts from reset(seed=SEED+k)."),
    video: Optional[Path] = typer.Option(None, "--video", help="Also write DIR/episode-<k>.mp4 per episode "
                                         "(needs: pip install 'pearl-core[video]')."),
    stochastic: bool = typer.Option(False, "--stochastic", help="The trainer's exploring actions instead of "
                                    "greedy ones."),
    env_id: Optional[str] = typer.Option(None, "--env", help="Evaluate on another env with the same spaces "
                                         "(default: the run's)."),
    trust_checkpoint: bool = typer.Option(False, "--trust-checkpoint", help="Import the modules the checkpoint "
                                          "names (its trainer's, env's, wrappers') that are not PEARL's own. "
                                          "Importing runs their code."),
) -> None:
    """Evaluate a trained run: mean ± std over seeded episodes, and optionally an mp4 per episode."""
    import pearl_core
    from pearl_core.video import record_episodes

    console = Console(width=max(120, Console().width))
    _cwd_on_path()
    try:
        if episodes < 1:
            raise SpecError(f"--episodes {episodes}; expected an int >= 1. Fix: e.g. --episodes 10.")
        policy = pearl_core.load_policy(run, trust_modules=trust_checkpoint)
        console.print(f"policy {escape(repr(policy))}", soft_wrap=True)
        if video is not None:
            mean, std, files = record_episodes(policy, video, n_episodes=episodes, seed=seed,
                                               deterministic=not stochastic, env_id=env_id)
        else:
            mean, std = pearl_core.evaluate_policy(policy, env_id, n_episodes=episodes, seed=seed,
                                                   deterministic=not stochastic)
            files = []
    except (PearlError, OSError) as exc:
        _fail(console, exc)
    console.print(f"{episodes} episode(s) of {escape(env_id or str(policy.env_id))}: mean return {mean:.2f} ± "
                  f"{std:.2f}")
    for f in files:
        console.print(f"video {escape(str(f))}", soft_wrap=True)
