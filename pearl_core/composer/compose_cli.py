"""``pearl compose``: plan like ``pearl plan``, then write the training program (RuntimeGen).

It takes every option of ``pearl plan`` (the parameters of
:func:`pearl_core.composer.cli.plan_command` are reused as they are, so the two
commands cannot drift apart) plus ``-o/--output`` and a few run settings::

    pearl compose --env CartPole-v1 -b 64 --replay prioritized -o runtime.py
    python runtime.py --max-env-steps 2000

Errors print ``error: ...`` and exit with status 2; no file is left behind and
none is changed. The outputs (``-o``, ``--png``, ``--json``) are all or nothing:
every destination is checked before planning starts, everything is rendered in
memory (the program and the grid through a scratch directory), then all files
are written with :func:`pearl_core.fileio.atomic_write_all`, so a pre-existing
program is replaced only together with the other outputs and never deleted.
"""

from __future__ import annotations

import inspect
import tempfile
import typing
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from pearl_core.composer.api import Composer
from pearl_core.composer.cli import PLAN_ONLY_OPTIONS, fail, plan_command, render_plan, save_grid_png
from pearl_core.composer.composition import Composition
from pearl_core.composer.options import composer_from_options  # shared with pearl plan
from pearl_core.errors import ComposerError, PearlError
from pearl_core.fileio import atomic_write_all, check_writable

__all__ = ["compose_command", "composer_from_options", "render_outputs", "with_plan_options"]

_EXTRA = (
    ("output", Path, typer.Option(..., "--output", "-o", help="The program to write, e.g. runtime.py.")),
    ("profile", bool, typer.Option(True, "--profile/--no-profile", help="Measure the present devices' cells "
                                   "(cached on disk); --no-profile uses the analytic models only.")),
    ("profile_budget", Optional[float], typer.Option(None, "--profile-budget", metavar="SECONDS", help="Seconds "
                                                     "profiling may spend measuring, shared among its probes; cells "
                                                     "that do not fit are modelled and the plan's notes say which "
                                                     "(default 45).")),
    ("replay_ratio", float, typer.Option(0.5, "--replay-ratio", help="Learner updates per env step.")),
    ("learning_starts", int, typer.Option(1_000, "--learning-starts", help="Env steps before the first update.")),
    ("n_step", int, typer.Option(1, "--n-step", help="n-step returns: environment steps summed into one stored "
                                 "transition (1: one-step; the trainer must support it, as DQN, DDPG, TD3, SAC do).")),
    ("max_env_steps", int, typer.Option(100_000, "--max-env-steps", help="Env-step budget of the run.")),
    ("eval_return", Optional[float], typer.Option(None, "--eval-return", help="Stop when a greedy evaluation "
                                                  "averages at least this (e.g. 475 for CartPole-v1).")),
    ("log_dir", str, typer.Option("runs/pearl", "--log-dir", help="Where the program writes logs and results.")),
    ("emulated", bool, typer.Option(False, "--emulated", help="Count emulated devices (the FPGA Emulation "
                                    "Device) as present, so a plan placing primitives there runs on the emulator "
                                    "(its timings are never reported as the device's).")),
    ("runnable", bool, typer.Option(False, "--runnable", help="Write the best plan that can run here instead "
                                    "of refusing a what-if plan for absent hardware.")),
    ("vector_backend", Optional[str], typer.Option(None, "--vector-backend", help="How each actor steps its "
                                                   "environments: loop, gym-sync, gym-async (serial runtime only) "
                                                   "or envpool (default: the composer's rule: loop for one env "
                                                   "per actor, envpool where EnvPool has the env unchanged).")),
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
    outputs = [("program", output), ("grid", o["png"]), ("plan", o["json_out"])]
    try:
        for _, path in outputs:  # every destination, before the (slow) planning and before writing any
            if path is not None:
                check_writable(path)
        composer = composer_from_options(o)
        composer.set_stop(eval_return=o["eval_return"], max_env_steps=o["max_env_steps"])
        composer.set_run(log_dir=o["log_dir"])
        from pearl_core.composer.timing import profile_budget

        with profile_budget(o.get("profile_budget")):
            plan = composer.run(profile=o["profile"], place=parse_place(o["place"]), runnable=o["runnable"])
        render_plan(plan, console)
        files = render_outputs(composer, plan, output, o["png"], o["json_out"])
        atomic_write_all(files)
    except (PearlError, OSError) as exc:
        fail(console, exc)
    if o["png"] is not None:
        console.print(f"grid written to {escape(str(o['png']))}")
    if o["json_out"] is not None:
        console.print(f"plan written to {escape(str(o['json_out']))}")
    console.print(f"program written to {escape(str(output))}; run it with: python {escape(str(output))}")


def render_outputs(composer: Composer, plan: Composition, output: Path, png: Optional[Path],
                   json_out: Optional[Path]) -> list[tuple[Path, bytes]]:
    """The contents of every output, rendered without touching any destination.

    The program goes through ``composer.RuntimeGen`` (its checks and refusals) and
    the grid through :func:`~pearl_core.composer.cli.save_grid_png`, both into a
    scratch directory that is removed afterwards.

    Raises:
        ComposerError: the plan cannot run here, or the grid's format is unknown.
    """
    placement = plan.plan if isinstance(plan, Composition) else plan
    files: list[tuple[Path, bytes]] = []
    with tempfile.TemporaryDirectory(prefix="pearl-compose-") as scratch:
        program = composer.RuntimeGen(plan, Path(scratch) / "runtime.py")
        files.append((output, Path(program).read_bytes()))
        if png is not None:
            grid = Path(scratch) / ("grid" + (png.suffix or ".png"))
            try:
                save_grid_png(placement, grid)
            except ValueError as exc:  # matplotlib: an unknown format
                raise ComposerError(f"--png {str(png)!r}: {exc}. Fix: name a .png (or .svg, .pdf) file.") from exc
            files.append((png, grid.read_bytes()))
    if json_out is not None:
        files.append((json_out, placement.to_json().encode("utf-8")))
    return files


def with_plan_options(extra: tuple[tuple[str, Any, Any], ...], *, drop: tuple[str, ...] = ()
                      ) -> tuple[inspect.Signature, dict[str, Any]]:
    """``pearl plan``'s parameters (less ``drop`` and the plan-only ``--png-batches``) followed by ``extra`` ones.

    Typer reads both the signature and the annotations; assign them to a
    ``def command(**options)`` so the command takes every plan option.
    """
    hints = typing.get_type_hints(plan_command)
    params = [p.replace(annotation=hints[p.name]) for p in inspect.signature(plan_command).parameters.values()
              if p.name not in drop and p.name not in PLAN_ONLY_OPTIONS]
    params += [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=ann)
               for name, ann, default in extra]
    annotations = {p.name: p.annotation for p in params}
    annotations["return"] = None
    return inspect.Signature(params, return_annotation=None), annotations


compose_command.__signature__, compose_command.__annotations__ = with_plan_options(_EXTRA)  # type: ignore[attr-defined]
