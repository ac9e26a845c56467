"""The ``pearl`` command line."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pearl_core.plugins import default_registry

app = typer.Typer(help="PEARL: compose and run deep-RL training on heterogeneous machines.", no_args_is_help=True)


def _versions() -> str:
    """``pearl-core X`` and one line per installed plugin distribution (read from the package metadata, so no
    plugin is imported and no device touched)."""
    from importlib.metadata import entry_points

    from pearl_core._version import __version__

    lines = [f"pearl-core {__version__}"]
    seen = set()
    for ep in entry_points(group="pearl"):
        dist = getattr(ep, "dist", None)
        if dist is not None and dist.name not in seen:
            seen.add(dist.name)
            lines.append(f"{dist.name} {dist.version} (plugin {ep.name!r})")
    return "\n".join(lines)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(_versions())
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", "-V", callback=_print_version, is_eager=True,
                                       help="Print the versions of pearl-core and the installed plugins, and exit.")):
    """PEARL: compose and run deep-RL training on heterogeneous machines."""


@app.command()
def plugins(verbose: bool = typer.Option(False, "--verbose", "-v", help="Show tracebacks of failed plugins.")):
    """List installed plugins and their backends: distribution, version, available or why not."""
    reg = default_registry()
    console = Console()
    table = Table(title="PEARL plugins")
    for col in ("plugin", "backend", "distribution", "version", "status"):
        table.add_column(col)
    status = {s.name: s for s in reg.status()}
    records = reg.plugins()
    for rec in records:
        if rec.error is not None:
            table.add_row(rec.name, "-", rec.distribution or "?", rec.version or "?",
                          "[red]failed to load[/red]: " + escape(f"{type(rec.error).__name__}: {rec.error}"))
            continue
        for bname in rec.backends or ("-",):
            st = status.get(bname)
            text = ("[green]available[/green]" if st and st.available
                    else "[yellow]unavailable[/yellow]: "
                    + escape((st.reason or "no reason given") if st else "no backend registered"))
            table.add_row(rec.name, bname, rec.distribution or "?", rec.version or "?", text)
    if not records:
        console.print("No PEARL plugins are installed. Fix: `pip install pearl-cpu` (or `make test` in a checkout).")
        return
    console.print(table)
    if verbose:
        for rec in records:
            if rec.error is not None:
                console.print(f"\n[bold]{rec.name}[/bold] ({rec.target}):\n{rec.traceback}", markup=False)


@app.command()
def devices():
    """List the devices each available backend detects."""
    reg = default_registry()
    console = Console()
    table = Table(title="Devices detected by PEARL backends")
    for col in ("backend", "device", "kind", "description", "details"):
        table.add_column(col)
    for st in reg.status():
        if not st.available:
            table.add_row(st.name, "-", "-", "[yellow]unavailable[/yellow]: " + escape(str(st.reason)), "")
            continue
        for dev in reg.get_backend(st.name).devices():
            details = ", ".join(f"{k}={v}" for k, v in dev.details.items())
            table.add_row(st.name, escape(dev.name), dev.kind, escape(dev.description), escape(details))
    console.print(table)


from pearl_core.composer.cli import plan_command  # noqa: E402 - registered below the core commands

app.command("plan")(plan_command)

from pearl_core.composer.compose_cli import compose_command  # noqa: E402

app.command("compose")(compose_command)

from pearl_core.composer.sweep import validate_or_sweep_command  # noqa: E402

app.command("validate")(validate_or_sweep_command)


from pearl_core.train_cli import eval_command, train_command  # noqa: E402

app.command("train")(train_command)
app.command("eval")(eval_command)


def main() -> None:  # console-script entry point
    app()


if __name__ == "__main__":
    main()
