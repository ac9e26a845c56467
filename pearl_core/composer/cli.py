"""Command-line functions of the composer, for ``pearl_core/cli.py`` to register.

This module defines typer *command functions*, not an app: the CLI owner adds
them with ``app.command("plan")(plan_command)``. Rendering is split into
functions (:func:`render_plan`, :func:`save_grid_png`) so other commands
(``compose``, ``validate``) can reuse them. :func:`render_plan` and
:func:`write_plan_outputs` take a :class:`~pearl_core.composer.plan.PlacementPlan`
or the :class:`~pearl_core.composer.composition.Composition` that holds one.
"""

from __future__ import annotations

import dataclasses
import io
import math
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Optional, Sequence

import typer
from rich.console import Console
from rich.markup import escape

from pearl_core.composer.algorithm import METRICS
from pearl_core.composer.composition import Composition
from pearl_core.composer.options import parse_trainer_kwargs
from pearl_core.composer.render import _placement, grid_values, render_plan
from pearl_core.composer.plan import PlacementPlan, make_plan
from pearl_core.composer.spec import HardwareSpec
from pearl_core.composer.workload import Workload
from pearl_core.errors import InvalidValueError, PearlError
from pearl_core.fileio import atomic_write, atomic_write_all

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from pearl_core.composer.costs import Profiler

__all__ = ["MAX_PNG_PANELS", "PLAN_ONLY_OPTIONS", "batch_plans", "fail", "grid_figure", "grid_values",
           "grids_png_bytes", "parse_png_batches", "parse_trainer_kwargs", "plan_command", "render_plan",
           "save_grid_png", "write_plan_outputs"]

#: ``pearl plan`` parameters that :func:`pearl_core.composer.compose_cli.with_plan_options` leaves out of
#: ``pearl compose`` and ``pearl validate``: ``--png-batches`` is plan's alone; ``--profile/--no-profile`` and
#: ``--replay-ratio`` both commands declare themselves, with the same defaults (so the same flags plan the same).
PLAN_ONLY_OPTIONS = ("png_batches", "profile", "replay_ratio")
#: The most panels ``--png-batches`` draws side by side (more would be too wide to read).
MAX_PNG_PANELS = 8

def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PearlError(f"--png needs matplotlib ({exc}). Fix: pip install matplotlib.") from exc
    return matplotlib, plt


def _default_value(plan: PlacementPlan) -> str:
    return "throughput" if plan.metric == "throughput" else "score"


def _value_label(plan: PlacementPlan, value: str) -> tuple[str, str]:
    """``(what, unit)`` of a grid value: ``("throughput", "samples/s")``, ``("power efficiency", "samples/J")``."""
    if value == "score":
        value = "throughput" if plan.metric == "throughput" else "power_efficiency"
    return {"throughput": ("throughput", "samples/s"), "power_efficiency": ("power efficiency", "samples/J"),
            "iteration_s": ("iteration time", "s per iteration"), "power_w": ("power", "W")
            }.get(value, (value, value))


def _draw_grid(matplotlib, fig: "Figure", ax, plan: PlacementPlan, value: str, title: str) -> None:
    """One RM x learner heatmap on ``ax``, with its own colour bar; the choice and infeasible pairs marked."""
    names, grid = grid_values(plan, value)
    data = [[math.nan if v is None else v for v in row] for row in grid]
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="0.85")  # infeasible: light grey
    im = ax.imshow(data, cmap=cmap)
    ax.set_label("grid")  # tells the panels from the colour bars in fig.axes
    ax.set_xticks(range(len(names)), labels=names)
    ax.set_yticks(range(len(names)), labels=names)
    ax.set_xlabel("learner device")
    ax.set_ylabel("RM device")
    finite = [v for row in data for v in row if not math.isnan(v)]
    top = max(finite) if finite else 0.0
    for i, row in enumerate(data):
        for j, v in enumerate(row):
            if math.isnan(v):
                ax.text(j, i, "infeasible", ha="center", va="center", fontsize=8, color="black")
                continue
            chosen = (names[i], names[j]) == (plan.rm_device, plan.learner_device)
            ax.text(j, i, f"{v:,.4g}" + ("\n(choice)" if chosen else ""), ha="center", va="center", fontsize=8,
                    color="black" if v > 0.6 * top else "white")
    fig.colorbar(im, ax=ax, label=_value_label(plan, value)[1])
    ax.set_title(title, fontsize=9)


def grid_figure(plans: "PlacementPlan | Sequence[PlacementPlan]", value: str | None = None) -> "Figure":
    """The matplotlib figure of one RM x learner grid per plan, side by side (the paper's Figure 10 layout).

    Rows are the RM device, columns the learner device; each cell is the
    predicted ``value`` (default: the plan's metric, samples/s for
    ``throughput``, samples/J for ``power_efficiency``), the chosen pair is
    marked ``(choice)`` and infeasible pairs are light grey, labelled
    ``infeasible``. One plan gives exactly the single grid of ``pearl plan
    --png``; several (``--png-batches``: the same workload at several batch
    sizes) give one panel each, titled with the batch size and the metric.

    Each panel has its **own colour scale** (and colour bar), not one shared
    scale: throughput grows roughly with the batch size (by an order of
    magnitude from BS 32 to 512 on the example server), so a shared scale
    would paint the small-batch panels one flat colour and hide what
    Figure 10 is read for, the direction in which the colour changes within
    one grid (along the RM axis when replay dominates at small batches, along
    the learner axis when the learner does at large ones). Every cell prints
    its value, so panels stay comparable by number.

    The caller closes the figure (``matplotlib.pyplot.close(fig)``).
    """
    matplotlib, plt = _pyplot()
    plans = [plans] if isinstance(plans, PlacementPlan) else list(plans)
    if not plans:
        raise InvalidValueError("grid_figure got no plan; expected one or more PlacementPlans.")
    value = value or _default_value(plans[0])
    k = len(plans[0].spec["device"])
    width, height = 1.6 + 1.3 * k, 1.2 + 1.1 * k  # one panel
    single = len(plans) == 1  # the single grid, as pearl plan --png has always drawn it
    fig, axes = plt.subplots(1, len(plans), figsize=(width * len(plans), height + (0 if single else 0.4)),
                             squeeze=False)
    try:
        for ax, plan in zip(axes[0], plans):
            what, unit = _value_label(plan, value)
            w = plan.workload
            title = (f"{w.get('env_id') or ''} BS={w['batch_size']}: predicted {unit}" if single else
                     f"BS={w['batch_size']}: {what} ({unit})")
            _draw_grid(matplotlib, fig, ax, plan, value, title)
        if not single:
            first = plans[0]
            fig.suptitle(f"{first.workload.get('env_id') or ''} on {first.spec.get('name') or 'this machine'}: "
                         f"predicted {_value_label(first, value)[0]} by batch size (each panel its own colour "
                         "scale)", fontsize=10)
        fig.tight_layout()
    except BaseException:
        plt.close(fig)
        raise
    return fig


def _png(fig: "Figure") -> bytes:
    _, plt = _pyplot()
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=120)
    finally:
        plt.close(fig)
    return buf.getvalue()


def save_grid_png(plan: PlacementPlan, path: str | Path, value: str | None = None) -> Path:
    """Draw the RM x learner grid as a heatmap (matplotlib, Agg backend) and write it to ``path``.

    ``value`` defaults to the plan's metric: ``"throughput"`` (samples/s) or
    ``"score"`` for power efficiency (samples/J). See :func:`grid_figure`.
    """
    out = Path(path)
    data = _png(grid_figure([plan], value))
    atomic_write(out, data)  # never a half-written image over an existing one
    return out


def grid_png_bytes(plan: PlacementPlan, value: str | None = None) -> bytes:
    """The bytes :func:`save_grid_png` would write (drawn in a scratch directory)."""
    with tempfile.TemporaryDirectory() as tmp:
        return save_grid_png(plan, Path(tmp) / "grid.png", value).read_bytes()


def grids_png_bytes(plans: Sequence[PlacementPlan], value: str | None = None) -> bytes:
    """The PNG of :func:`grid_figure` for ``plans`` (one panel per plan, side by side), in memory."""
    return _png(grid_figure(plans, value))


def parse_png_batches(text: Optional[str]) -> tuple[int, ...] | None:
    """The ``--png-batches`` list, ``"32,128,512"`` -> ``(32, 128, 512)`` (``None`` when not given).

    Raises:
        InvalidValueError: an empty list or item, an item that is not an int
            or is below 1, a batch size given twice, more than
            :data:`MAX_PNG_PANELS` of them.
    """
    if text is None:
        return None
    what = f"--png-batches = {text!r}"
    expected = f"expected 1 to {MAX_PNG_PANELS} distinct comma-separated ints >= 1"
    fix = "Fix: e.g. --png-batches 32,128,512."
    items = [s.strip() for s in text.split(",")]
    if not any(items):
        raise InvalidValueError(f"{what} lists no batch size; {expected}. {fix} Without the option --png draws "
                                "the one grid of --batch-size.")
    out: list[int] = []
    for n, item in enumerate(items, 1):
        if not item:
            raise InvalidValueError(f"{what}: item {n} is empty; {expected}. {fix}")
        try:
            bs = int(item)
        except ValueError:
            raise InvalidValueError(f"{what}: item {n} = {item!r} is not an int; {expected}. {fix}") from None
        if bs < 1:
            raise InvalidValueError(f"{what}: item {n} = {bs} is below 1; {expected}, a batch size is at least "
                                    f"one experience. {fix}")
        if bs in out:
            raise InvalidValueError(f"{what}: batch size {bs} is given twice; {expected}. Fix: give each batch "
                                    "size once.")
        out.append(bs)
    if len(out) > MAX_PNG_PANELS:
        raise InvalidValueError(f"{what} lists {len(out)} batch sizes; {expected} (one panel each, at most "
                                f"{MAX_PNG_PANELS} side by side). Fix: keep {MAX_PNG_PANELS} or fewer, e.g. "
                                "--png-batches 32,128,512.")
    return tuple(out)


def batch_plans(spec: HardwareSpec, workload: Workload, metric: str, batches: Sequence[int], *,
                profiler: "Profiler | None" = None) -> list[PlacementPlan]:
    """:func:`~pearl_core.composer.plan.make_plan` of ``workload`` with each batch size in ``batches``.

    Everything but the batch size stays as given, so each plan is the one
    ``pearl plan -b N`` makes for ``N`` with the same other options (``profiler``:
    the present devices measured, as ``pearl plan`` does; envs per actor stay
    ``workload``'s).

    Raises:
        PearlError: a batch size the workload or the planner refuses (the message names it).
    """
    plans = []
    for bs in batches:
        try:
            plans.append(make_plan(spec, dataclasses.replace(workload, batch_size=bs), metric, profiler=profiler))
        except PearlError as exc:
            raise PearlError(f"--png-batches: batch size {bs}: {exc}") from exc
    return plans


def plan_command(
    hardware: Optional[Path] = typer.Option(None, "--hardware", "-H", help="Hardware spec (TOML). Default: the "
                                            "devices the installed backends detect."),
    env_id: str = typer.Option("CartPole-v1", "--env", help="gymnasium environment id."),
    batch_size: int = typer.Option(32, "--batch-size", "-b", help="Training batch size BS."),
    metric: str = typer.Option("throughput", "--metric", "-m", help=f"One of {list(METRICS)}."),
    hidden: Optional[str] = typer.Option(None, "--hidden", help="MLP hidden sizes, e.g. 64,64 (default: the "
                                         "trainer's own)."),
    trainer: Optional[str] = typer.Option(None, "--trainer", help="Trainer import path 'pkg.module:Class', or "
                                          "DQN, DDPG, TD3, SAC (default: DQN for discrete actions, DDPG for "
                                          "continuous)."),
    trainer_kwargs: Optional[str] = typer.Option(None, "--trainer-kwargs", help="JSON object of trainer "
                                                 "hyper-parameters."),
    replay: str = typer.Option("prioritized", "--replay", help="prioritized or uniform."),
    capacity: int = typer.Option(100_000, "--capacity", help="Replay capacity."),
    fanout: int = typer.Option(16, "--fanout", help="Sum-tree fanout."),
    n_actors: str = typer.Option("1", "--actors", help="Actor processes (on the host), or 'auto': the fewest "
                                 "whose measured rate covers what the learner consumes, within the cores the host "
                                 "loop and the learner leave (docs/user-guide.md)."),
    envs_per_actor: Optional[int] = typer.Option(None, "--envs-per-actor", help="Environments each actor steps "
                                                 "together (one batched policy forward); the runtime plan records "
                                                 "it. Default: measured and chosen when this machine is profiled "
                                                 "(docs/composer.md), else 1."),
    insert_batch: Optional[int] = typer.Option(None, "--insert-batch", help="Experiences inserted per learner "
                                               "iteration BS_i (default: round(1 / replay ratio), as pearl "
                                               "compose plans)."),
    replay_ratio: float = typer.Option(0.5, "--replay-ratio", help="Learner updates per env step."),
    profile: bool = typer.Option(True, "--profile/--no-profile", help="Measure the present devices' cells "
                                 "(cached on disk), as pearl compose does; --no-profile uses the analytic models "
                                 "only."),
    png: Optional[Path] = typer.Option(None, "--png", help="Also draw the RM x learner grid as a PNG heatmap."),
    png_batches: Optional[str] = typer.Option(None, "--png-batches", help="With --png: draw one grid per batch "
                                              "size, side by side (the paper's Figure 10), e.g. 32,128,512: 1 to "
                                              f"{MAX_PNG_PANELS} distinct ints >= 1, each panel the same workload "
                                              "planned with that batch, on its own colour scale. The printed plan "
                                              "and --json stay those of --batch-size. Without it --png draws the "
                                              "one grid of --batch-size."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the plan as JSON."),
    ray: Optional[str] = typer.Option(None, "--ray", metavar="ADDRESS", help="Also place the run on the Ray "
                                      "cluster at ADDRESS ('auto': this machine's cluster): its nodes from "
                                      "ray.nodes(), the replay and learner on the node with the plan's devices "
                                      "(pearl_core/composer/cluster.py)."),
    measure_links: bool = typer.Option(False, "--measure-links", help="With --ray: measure each node's latency "
                                       "and bandwidth to this process (a few seconds) instead of assuming 10 GbE."),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="Also place the run on the cluster this "
                                           "spec describes (TOML: [[node]] name, cpus, devices, latency_us, "
                                           "bandwidth_GBps, driver, address); with --ray, the running cluster's "
                                           "nodes get their links from it, by address."),
    ray_actors: Optional[int] = typer.Option(None, "--ray-actors", help="With --ray / --cluster: actors to place "
                                             "(default: the fewest that keep the learner fed)."),
) -> None:
    """Plan where the replay manager, learner and Data Storage run: matrix, RM x learner grid, choice.

    The plan is made exactly as ``pearl compose`` makes it (the same :class:`Composer`
    calls, profiling and defaults), so the same flags give the same plan and plan hash.
    """
    console = Console(width=max(132, Console().width))
    options = dict(locals())
    try:
        batches = parse_png_batches(png_batches)  # before anything slow
        if batches is not None and png is None:
            raise InvalidValueError(f"--png-batches {png_batches} says which grids --png draws, but no --png was "
                                    "given. Fix: add --png grid.png, or leave --png-batches out.")
        composition = _compose(options)
        plan = composition.plan
        png_plans = None
        if batches is not None:
            png_plans = batch_plans(plan.hardware(), plan.workload_value(), metric, batches,
                                    profiler=_profiler(options, plan))
        cluster_lines = cluster_placement_lines(plan, ray, cluster, ray_actors, measure_links)
    except PearlError as exc:
        fail(console, exc)
    render_plan(composition, console)
    for line in cluster_lines:
        console.print(escape(line), soft_wrap=True)
    if png_plans is not None:
        value = _default_value(plan)
        what, unit = _value_label(plan, value)
        console.print(f"[bold]--png panels[/bold] ({what}, {unit}):")
        for p in png_plans:
            console.print(f"  BS={p.workload['batch_size']}: RM on {escape(p.rm_device)}, learner on "
                          f"{escape(p.learner_device)}, {getattr(p.chosen, value):,.4g} {unit}")
    write_plan_outputs(plan, console, png, json_out, png_plans=png_plans)


def _compose(options: dict) -> Composition:
    """``pearl plan``'s composition: :func:`~pearl_core.composer.options.composer_from_options` and
    :meth:`Composer.run`, as ``pearl compose`` calls them (its run settings at their defaults: they do not
    change the placement plan)."""
    from pearl_core.composer.options import composer_from_options

    o = {"learning_starts": 1_000, **options, "hardware": options["hardware"]}
    if o["hardware"] is not None and not Path(o["hardware"]).is_file():
        HardwareSpec.load(o["hardware"])  # the spec loader's own error for a missing file
    composer = composer_from_options(o)
    return composer.run(profile=o["profile"])


def _profiler(options: dict, plan: PlacementPlan) -> "Profiler | None":
    """The profiler of ``pearl plan``'s composition (``None`` with ``--no-profile``), for the
    ``--png-batches`` panels."""
    if not options["profile"]:
        return None
    from pearl_core.composer.profiling import profiler_for

    return profiler_for(plan.hardware())


def cluster_placement_lines(plan: PlacementPlan, address: Optional[str], spec: Optional[Path],
                            n_actors: Optional[int], measure_links: bool = False) -> Sequence[str]:
    """``--ray`` / ``--cluster``: the run's placement on the cluster, as lines (none without either)."""
    if measure_links and address is None:
        raise InvalidValueError("--measure-links measures a running cluster's links, but no --ray was given "
                                "(a --cluster spec states its links).")
    if measure_links and spec is not None:
        raise InvalidValueError("--measure-links and --cluster both give the nodes' links. Fix: give one of them.")
    if address is None and spec is None:
        if n_actors is not None:
            raise InvalidValueError("--ray-actors places actors on a cluster, but no --ray or --cluster was given.")
        return ()
    from pearl_core.composer.cluster import ClusterSpec, describe, place_for_plan

    given = ClusterSpec.load(spec) if spec is not None else None  # a bad spec is refused before connecting
    # the spec's cluster, or the running one's nodes (with a spec too, their links from it)
    nodes = given if address is None else ClusterSpec.from_ray(address, measure=measure_links, links=given)
    assert nodes is not None  # a spec, an address, or both (neither returned above)
    return describe(place_for_plan(nodes, plan, n_actors=n_actors), nodes)


def fail(console: Console, exc: BaseException | str) -> NoReturn:
    """Print ``error: <message>`` and exit with status 2 (the CLI's bad-input status)."""
    console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
    raise typer.Exit(2)


def write_plan_outputs(plan: "PlacementPlan | Composition", console: Console, png: Optional[Path],
                       json_out: Optional[Path], *, png_plans: Optional[Sequence[PlacementPlan]] = None
                       ) -> list[Path]:
    """Write ``--png`` and ``--json`` (the placement plan's) when given; returns the paths written.

    ``png_plans`` (``--png-batches``): the PNG draws these plans' grids side by
    side (:func:`grid_figure`) instead of ``plan``'s one grid.

    All or nothing (:func:`pearl_core.fileio.atomic_write_all`): both
    destinations are checked first, both files are written under temporary
    names, then moved into place; on an error no output changed (an existing
    file is never removed), the error is printed and the exit status is 2.
    """
    plan = _placement(plan)
    items: list[tuple[Path, bytes | str]] = []
    labels: list[str] = []
    try:
        if png is not None:
            items.append((Path(png), grid_png_bytes(plan) if png_plans is None else grids_png_bytes(png_plans)))
            labels.append("grid" if png_plans is None else f"{len(png_plans)}-panel grid")
        if json_out is not None:
            items.append((Path(json_out), plan.to_json()))
            labels.append("plan")
        written = atomic_write_all(items) if items else []
    except (PearlError, OSError) as exc:
        fail(console, exc)
    for label, path in zip(labels, written):
        console.print(f"{label} written to {escape(str(path))}")
    return written
