"""Printing a plan: the workload, the matrix, the RM x learner grid, the candidates, the Data Storage costs
and the one choice (:func:`render_plan`, used by ``pearl plan``, ``pearl compose``, ``pearl validate`` and
:func:`~pearl_core.composer.api.print_plan`).

Kept apart from the command functions of :mod:`pearl_core.composer.cli` so that the
composer's API can print a plan without importing the commands (which compose
through the API).
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pearl_core.composer.algorithm import Candidate
from pearl_core.composer.composition import Composition
from pearl_core.composer.matrix import CELL_NAMES
from pearl_core.composer.plan import PlacementPlan, setting_label
from pearl_core.composer.workload import Workload
from pearl_core.errors import PearlError

__all__ = ["grid_values", "render_plan"]

_CELL_HEADERS = {"rm_sample": "sample", "rm_update": "update", "rm_insert": "insert", "learner": "learner",
                 "co_rm_sample": "co sample", "co_rm_update": "co update", "co_rm_insert": "co insert",
                 "co_learner": "co learner"}


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:,.2f}"


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def grid_values(plan: PlacementPlan, value: str = "throughput") -> tuple[list[str], list[list[float | None]]]:
    """The RM x learner grid (rows: RM device, columns: learner device) of ``value``.

    ``value`` is a :class:`Candidate` attribute: ``"throughput"``, ``"score"``,
    ``"iteration_s"``, ``"power_w"``. Infeasible pairs are ``None``.
    """
    names = [d["name"] for d in plan.spec["device"]]
    grid = [[getattr(plan.decision.candidate(i, j), value) for j in names] for i in names]
    return names, grid


def _placement(plan: "PlacementPlan | Composition") -> PlacementPlan:
    return plan.plan if isinstance(plan, Composition) else plan


def render_plan(plan: "PlacementPlan | Composition", console: Console) -> None:
    """Print the workload, the matrix, the RM x learner grid, every candidate, the DS costs and the choice.

    For a composition, the runtime plan printed is the composition's (with the composer's overrides).
    """
    runtime_plan = plan.runtime_plan if isinstance(plan, Composition) else None
    notices = plan.notices if isinstance(plan, Composition) else ()
    plan = _placement(plan)
    wl = plan.workload
    w = Workload.from_dict(wl)
    dec = plan.decision
    console.print(f"[bold]Hardware[/bold] {escape(str(plan.spec.get('name') or ''))}: "
                  + ", ".join(f"{d['name']} ({d['kind']})" for d in plan.spec["device"])
                  + f"; host {plan.spec['host']}")
    console.print(f"[bold]Workload[/bold] {escape(w.env_id or '?')}: BS {w.batch_size}, BS_i {w.insert_batch}, "
                  f"{w.n_actors} actor(s) x {w.envs_per_actor} env(s), experience {w.experience_bytes} B"
                  + (f" ({w.stored_bytes} B stored)" if w.stored_bytes and w.stored_bytes != w.experience_bytes else "")
                  + f", {w.replay} replay "
                  f"(capacity {w.capacity}, fanout {w.fanout}, {w.tree_levels} levels), "
                  f"{len(w.layers)} layers, {w.train_flops / 1e6:,.2f} MFLOP per step")
    console.print(f"[bold]Metric[/bold] {dec.metric}; cells "
                  + ("include communication (given matrix)" if dec.comm_inclusive else
                     "are compute only; Eq. 7 adds latency + bytes/bandwidth per message"))

    table = Table(title="Primitive Device Assignment Matrix (us per iteration; co = RM and learner co-located)")
    table.add_column("device")
    for name in CELL_NAMES:
        table.add_column(_CELL_HEADERS[name], justify="right")
    table.add_column("source")
    for row in plan.matrix.rows:
        cells = [_us(None if c is None else c.latency_s) for _, c in row.cells()]
        sources = sorted({c.source for _, c in row.cells() if c is not None})
        table.add_row(escape(row.device), *cells, ",".join(sources) or "-")
    console.print(table)
    for row in plan.matrix.rows:
        for note in row.notes:
            console.print(f"  [dim]{escape(row.device)}: {escape(note)}[/dim]")
        if row.config:
            console.print(f"  [dim]{escape(row.device)} config: "
                          + escape(", ".join(f"{k}={v}" for k, v in row.config.items())) + "[/dim]")

    for value, what, digits in (("throughput", "Predicted throughput (samples/s)", 0),
                                ("score", "Predicted power efficiency (samples/J)", 1)):
        if value == "score" and dec.metric != "power_efficiency":
            continue
        console.print(f"[bold]{what}[/bold]: RM device (rows) x learner device (columns); * = choice")
        console.print(_grid_table(plan, value, digits))

    c = Table(title="Candidates, best first (Eq. 7 terms in us as cell+communication)")
    for col in ("RM", "learner", "set", "T_itr us", "sample", "upd+ins", "learner", "samples/s", "W", "samples/J",
                "traffic B"):
        c.add_column(col, justify="right" if col not in ("RM", "learner") else "left")
    for cand in dec.ranking() + [x for x in dec.candidates if not x.feasible]:
        c.add_row(*_candidate_cells(cand))
    console.print(c)
    for cand in dec.candidates:
        if not cand.feasible:
            console.print(f"  [dim]({escape(cand.rm_device)}, {escape(cand.learner_device)}) infeasible: "
                          f"{escape(cand.reason)}[/dim]")

    console.print(f"[bold]Data Storage placement[/bold] for RM={escape(dec.rm_device)}, "
                  f"learner={escape(dec.learner_device)} (per-iteration traffic cost, us)")
    d = Table()
    for col in ("device", "cost us", "indices", "experiences", "insertions", "traffic B"):
        d.add_column(col, justify="left" if col == "device" else "right")
    for o in dec.ds_options:
        if not o.feasible:
            d.add_row(escape(o.device), "-", "-", "-", "-", escape(o.reason))
            continue
        d.add_row(escape(o.device), _us(o.cost_s), *[_us(f.cost_s) for f in o.flows], f"{o.traffic_bytes:,}")
    console.print(d)

    if plan.variants:
        _render_variants(plan, console)
    _render_choice(plan, console)
    for name, knob in (plan.tuning.get("knobs") or {}).items():  # chosen by the composer (pearl_core.composer.knobs)
        console.print(f"  {escape(name)}: {escape(str(knob.get('reason', knob.get('value'))))}")
    try:
        console.print(f"  runtime plan: {escape(repr(runtime_plan or plan.runtime_plan()))}")
    except PearlError as exc:
        console.print(f"  [yellow]no runtime plan: {escape(str(exc))}[/yellow]")
    console.print(f"  plan hash: {plan.content_hash()}")
    for notice in notices:
        console.print(f"[yellow]warning:[/yellow] {escape(notice)}", soft_wrap=True)


def _render_choice(plan: PlacementPlan, console: Console) -> None:
    """The one choice: devices, the final setting (the host tuning's where it ran) and its prediction.

    Algorithm 1 scores each (RM, learner) pair from the isolated cells (Eq. 7); on the
    host the tuning then predicts the runtime's variants and may take the other setting.
    The choice printed is the final one, the one the runtime plan and the program use;
    Algorithm 1's own estimate is shown only as the step before it, labelled so.
    """
    dec, v = plan.decision, plan.variant
    tie = f" (tie with {dec.tied_with} broken by {dec.tie_break})" if dec.tie_break else ""
    threads = f", {v.learner_threads} learner thread(s)" if v is not None else ""
    console.print(f"[bold green]Choice[/bold green]: RM on {escape(dec.rm_device)}, learner on "
                  f"{escape(dec.learner_device)}, Data Storage on {escape(dec.ds_device)}, "
                  f"{setting_label(plan.setting)}{threads}{escape(tie)}")
    ch = dec.chosen
    pred, tput, power = ((v.predicted_s, v.throughput, v.power_w) if v is not None
                         else (float(ch.iteration_s), float(ch.throughput), float(ch.power_w)))  # type: ignore[arg-type]
    console.print(f"  predicted {pred * 1e6:,.1f} us per iteration, {tput:,.0f} samples/s, {power:,.1f} W, "
                  f"{tput / power:,.1f} samples/J" + (f" ({v.bound} bound, host tuning)" if v is not None else ""))
    if v is not None:
        step = (f"Algorithm 1's Eq. 7 estimate for this pair from the isolated cells was "
                f"{ch.iteration_s * 1e6:,.1f} us in {setting_label(dec.setting)}")  # type: ignore[operator]
        revised = ("; the host tuning's prediction of the runtime's variants revised the setting to "
                   f"{int(plan.setting)}" if v.setting != dec.setting else "")
        console.print(f"  [dim]({step}{revised}; see the host tuning table and docs/composer.md)[/dim]")


def _render_variants(plan: PlacementPlan, console: Console) -> None:
    """The host tuning: each runtime variant's prediction; the chosen one overrides Algorithm 1's setting."""
    table = Table(title="Host tuning (RM and learner on the host CPU): runtime variants")
    for col in ("setting", "learner threads", "RM threads", "predicted us", "samples/s", "W", "bound"):
        table.add_column(col, justify="right")
    for v in plan.variants:
        mark = "* " if v == plan.variant else "  "
        table.add_row(f"{mark}{int(v.setting)}", str(v.learner_threads), str(v.rm_threads),
                      f"{v.predicted_s * 1e6:,.1f}", f"{v.throughput:,.0f}", f"{v.power_w:,.1f}", v.bound)
    console.print(table)
    if any(v.bound == "floor" for v in plan.variants):
        console.print("  [dim]bound 'floor': not run; its learner step alone is slower than the best run, so it "
                      "cannot win (predicted at that lower bound)[/dim]")


def _grid_table(plan: PlacementPlan, value: str, digits: int) -> Table:
    names, grid = grid_values(plan, value)
    dec = plan.decision
    g = Table()
    g.add_column("RM \\ learner")
    for n in names:
        g.add_column(escape(n), justify="right")
    for i, rm in enumerate(names):
        cells = []
        for j, ln in enumerate(names):
            v = grid[i][j]
            mark = "*" if (rm, ln) == (dec.rm_device, dec.learner_device) else ""
            cells.append("-" if v is None else f"{mark}{v:,.{digits}f}")
        g.add_row(escape(rm), *cells)
    return g


def _candidate_cells(c: Candidate) -> list[str]:
    if not c.feasible:
        return [escape(c.rm_device), escape(c.learner_device), str(int(c.setting)), "-", "-", "-", "-", "-", "-", "-",
                f"{c.traffic_bytes:,}"]
    return [escape(c.rm_device), escape(c.learner_device), str(int(c.setting)), _us(c.iteration_s),
            f"{_us(c.sample_s)}+{_us(c.sample_comm_s)}", f"{_us(c.update_insert_s)}+{_us(c.update_insert_comm_s)}",
            f"{_us(c.learner_s)}+{_us(c.learner_comm_s)}", _num(c.throughput), _num(c.power_w, 1),
            _num(None if not c.power_w else c.throughput / c.power_w, 1),  # type: ignore[operator]
            f"{c.traffic_bytes:,}"]
