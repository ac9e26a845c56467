"""``pearl compose``: plan like ``pearl plan``, then write the training program (RuntimeGen).

It takes every option of ``pearl plan`` (the parameters of
:func:`pearl_core.composer.cli.plan_command` are reused as they are, so the two
commands cannot drift apart) plus ``-o/--output`` and a few run settings::

    pearl compose --env CartPole-v1 -b 64 --replay prioritized -o runtime.py
    python runtime.py --max-env-steps 2000

Errors print ``error: ...`` and exit with status 2; no file is left behind.
"""

from __future__ import annotations

import inspect
import typing
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from pearl_core.composer.api import Composer
from pearl_core.composer.cli import fail, parse_trainer_kwargs, plan_command, render_plan, write_plan_outputs
from pearl_core.composer.workload import hidden_layers
from pearl_core.errors import PearlError

__all__ = ["compose_command", "composer_from_options", "with_plan_options"]

_EXTRA = (
    ("output", Path, typer.Option(..., "--output", "-o", help="The program to write, e.g. runtime.py.")),
    ("profile", bool, typer.Option(True, "--profile/--no-profile", help="Measure the present devices' cells "
                                   "(cached on disk); --no-profile uses the analytic models only.")),
    ("replay_ratio", float, typer.Option(0.5, "--replay-ratio", help="Learner updates per env step.")),
    ("learning_starts", int, typer.Option(1_000, "--learning-starts", help="Env steps before the first update.")),
    ("max_env_steps", int, typer.Option(100_000, "--max-env-steps", help="Env-step budget of the run.")),
    ("eval_return", Optional[float], typer.Option(None, "--eval-return", help="Stop when a greedy evaluation "
                                                  "averages at least this (e.g. 475 for CartPole-v1).")),
    ("log_dir", str, typer.Option("runs/pearl", "--log-dir", help="Where the program writes logs and results.")),
    ("emulated", bool, typer.Option(False, "--emulated", help="Count emulated devices (the FPGA Emulation "
                                    "Device) as present, so a plan placing primitives there runs on the emulator "
                                    "(its timings are never reported as the device's).")),
    ("runnable", bool, typer.Option(False, "--runnable", help="Write the best plan that can run here instead "
                                    "of refusing a what-if plan for absent hardware.")),
    ("place", Optional[list[str]], typer.Option(None, "--place", help="Force a placement, PRIMITIVE=DEVICE with "
                                                "PRIMITIVE one of rm, learner, storage (repeat the option).")),
)


def parse_place(items: "list[str] | None") -> dict[str, str] | None:
    """``["rm=xeon", "learner=agilex"]`` -> ``{"rm": "xeon", "learner": "agilex"}``; bad items raise ComposerError."""
    from pearl_core.errors import ComposerError

    if not items:
        return None
    out: dict[str, str] = {}
    for item in items:
        key, sep, dev = item.partition("=")
        if not sep or key not in ("rm", "learner", "storage") or not dev:
            raise ComposerError(f"--place {item!r}; expected PRIMITIVE=DEVICE with PRIMITIVE one of rm, learner, "
                                "storage, e.g. --place learner=agilex.")
        out[key] = dev
    return out


def compose_command(**options: Any) -> None:
    """Plan where the replay manager, learner and Data Storage run, then write the training program."""
    o = options
    console = Console(width=max(132, Console().width))
    output: Path = o["output"]
    try:
        composer = composer_from_options(o)
        composer.set_stop(eval_return=o["eval_return"], max_env_steps=o["max_env_steps"])
        composer.set_run(log_dir=o["log_dir"])
        plan = composer.run(profile=o["profile"], place=parse_place(o["place"]), runnable=o["runnable"])
        render_plan(plan, console)
        program = composer.RuntimeGen(plan, output)
    except (PearlError, OSError) as exc:
        fail(console, exc)
    try:
        write_plan_outputs(plan, console, o["png"], o["json_out"])
    except typer.Exit:
        program.unlink(missing_ok=True)  # all or nothing
        raise
    console.print(f"program written to {escape(str(program))}; run it with: python {escape(str(program))}")


def composer_from_options(o: dict[str, Any]) -> Composer:
    """A :class:`Composer` set up from ``pearl plan``'s options plus ``replay_ratio`` and ``learning_starts``.

    Shared by ``pearl compose`` and ``pearl validate``; raises :class:`PearlError` on bad options.
    """
    composer = Composer(o["hardware"], o["metric"], emulated=bool(o.get("emulated", False)))
    composer.set_actors(o["env_id"], o["n_actors"], insert_batch=o["insert_batch"])
    kwargs = parse_trainer_kwargs(o["trainer_kwargs"]) or {}
    from pearl_core.algorithms.defaults import default_trainer, hidden_kwargs  # torch loads only when used

    if o["trainer"]:
        from pearl_core.runtime.wiring import load_trainer_class

        trainer = load_trainer_class(o["trainer"])
    else:
        trainer = default_trainer(composer._spaces[1])  # noqa: SLF001 - set by set_actors above
    if o["hidden"] is not None:
        kwargs.update(hidden_kwargs(trainer, list(hidden_layers(o["hidden"]))))
    composer.set_train_function(trainer, o["batch_size"], replay_ratio=o["replay_ratio"],
                                learning_starts=o["learning_starts"], **kwargs)
    composer.set_replay(o["replay"], o["capacity"], o["fanout"])
    return composer


def with_plan_options(extra: tuple[tuple[str, Any, Any], ...], *, drop: tuple[str, ...] = ()
                      ) -> tuple[inspect.Signature, dict[str, Any]]:
    """``pearl plan``'s parameters (less ``drop``) followed by ``extra`` ones, with resolved annotations.

    Typer reads both the signature and the annotations; assign them to a
    ``def command(**options)`` so the command takes every plan option.
    """
    hints = typing.get_type_hints(plan_command)
    params = [p.replace(annotation=hints[p.name]) for p in inspect.signature(plan_command).parameters.values()
              if p.name not in drop]
    params += [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=ann)
               for name, ann, default in extra]
    annotations = {p.name: p.annotation for p in params}
    annotations["return"] = None
    return inspect.Signature(params, return_annotation=None), annotations


compose_command.__signature__, compose_command.__annotations__ = with_plan_options(_EXTRA)  # type: ignore[attr-defined]
