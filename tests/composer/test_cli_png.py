"""`pearl plan --png PATH --png-batches 32,128,512`: one RM x learner grid per batch size, side by side.

The paper's Figure 10 layout. Everything here uses the analytic models (`pearl plan` never profiles)
on the example what-if server, so it runs in seconds.
"""

from __future__ import annotations

import inspect
import os
import re
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pearl_core.cli import app
from pearl_core.composer import HardwareSpec, PlacementPlan
from pearl_core.composer.cli import (MAX_PNG_PANELS, batch_plans, grid_figure, grid_png_bytes, grid_values,
                                     parse_png_batches)
from pearl_core.composer.workload import workload_for_env
from pearl_core.errors import InvalidValueError

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "examples" / "hardware" / "cpu-gpu-fpga.toml"
BASE = ["plan", "-H", str(SERVER), "--hidden", "64,64"]


def plan_cli(*args: str):
    return CliRunner().invoke(app, [*BASE, *args])


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])  # the IHDR chunk: width, height


def flat(text: str) -> str:
    return " ".join(text.split())  # rich wraps long error lines


def drawn(fig) -> list[dict]:
    """What each panel of a grid figure shows: its title, the cell marked (choice), the cells marked infeasible."""
    panels = []
    for ax in (a for a in fig.axes if a.get_label() == "grid"):
        cols = [t.get_text() for t in ax.get_xticklabels()]
        rows = [t.get_text() for t in ax.get_yticklabels()]

        def cell(t):
            x, y = t.get_position()
            return rows[round(y)], cols[round(x)]

        panels.append({"title": ax.get_title(), "rows": rows, "cols": cols,
                       "choice": [cell(t) for t in ax.texts if "(choice)" in t.get_text()],
                       "infeasible": sorted(cell(t) for t in ax.texts if t.get_text() == "infeasible"),
                       "text": {cell(t): t.get_text().split("\n")[0] for t in ax.texts}})
    return panels


def close(fig) -> None:
    import matplotlib.pyplot as plt

    plt.close(fig)


# --------------------------------------------------------------------------- parsing the list
def test_parse_png_batches_reads_a_comma_separated_list_in_order():
    assert parse_png_batches(None) is None
    assert parse_png_batches("512, 32 ,128") == (512, 32, 128)
    assert parse_png_batches("64") == (64,)
    assert len(parse_png_batches(",".join(str(2**i) for i in range(MAX_PNG_PANELS)))) == MAX_PNG_PANELS


@pytest.mark.parametrize("text, match", [
    ("", "lists no batch size"),
    (" , ", "lists no batch size"),
    ("32,,128", "item 2 is empty"),
    ("32,abc", "item 2 = 'abc' is not an int"),
    ("1.5", "item 1 = '1.5' is not an int"),
    ("0", "item 1 = 0 is below 1"),
    ("32,-4", "item 2 = -4 is below 1"),
    ("32,64,32", "batch size 32 is given twice"),
    (",".join(str(i) for i in range(1, MAX_PNG_PANELS + 2)), f"lists {MAX_PNG_PANELS + 1} batch sizes"),
])
def test_bad_batch_lists_are_refused_by_the_cli_and_write_nothing(tmp_path, text, match):
    with pytest.raises(InvalidValueError, match=re.escape(match)):
        parse_png_batches(text)
    png, out = tmp_path / "grid.png", tmp_path / "plan.json"
    png.write_bytes(b"the user's old grid")
    res = plan_cli("--png", str(png), "--json", str(out), "--png-batches", text)
    assert res.exit_code == 2, res.output
    msg = flat(res.output)
    assert "error:" in msg and match in msg, msg
    assert f"expected 1 to {MAX_PNG_PANELS} distinct comma-separated ints >= 1" in msg and "Fix:" in msg
    assert "Choice:" not in msg  # refused before planning
    assert sorted(os.listdir(tmp_path)) == ["grid.png"] and png.read_bytes() == b"the user's old grid"


def test_png_batches_without_png_is_refused(tmp_path):
    res = plan_cli("--png-batches", "32,128", "--json", str(tmp_path / "plan.json"))
    assert res.exit_code == 2
    msg = flat(res.output)
    assert "no --png was given" in msg and "Fix: add --png grid.png" in msg, msg
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- the figure
def test_panels_sit_side_by_side_and_the_text_plan_stays_that_of_batch_size(tmp_path):
    single = plan_cli("-b", "64", "--png", str(tmp_path / "one.png"))
    assert single.exit_code == 0, single.output
    w1, h1 = png_size((tmp_path / "one.png").read_bytes())
    widths = {}
    for batches in ("32,128,512", "32,512"):
        png, out = tmp_path / f"{batches}.png", tmp_path / f"{batches}.json"
        res = plan_cli("-b", "64", "--png", str(png), "--json", str(out), "--png-batches", batches)
        assert res.exit_code == 0, res.output
        n = len(batches.split(","))
        w, h = png_size(png.read_bytes())
        widths[n] = w
        assert w == n * w1 and h > h1  # n panels of the single grid's width, plus a title row
        assert f"{n}-panel grid written to" in flat(res.output)
        for bs in batches.split(","):
            assert re.search(rf"BS={bs}: RM on \w+, learner on \w+", res.output), res.output
        # The printed plan and --json are still those of -b 64, not of a panel.
        assert PlacementPlan.from_json(out.read_text()).workload["batch_size"] == 64
        assert "BS 64," in res.output
    assert widths[3] > widths[2] > w1
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


@pytest.mark.parametrize("metric", ["throughput", "power_efficiency"])
def test_each_panel_marks_the_choice_pearl_plan_makes_for_that_batch(tmp_path, metric):
    batches = (32, 128, 512)
    expected, cells = [], []
    value = "throughput" if metric == "throughput" else "score"
    for bs in batches:  # what `pearl plan -b N` chooses, and its grid
        res = plan_cli("-b", str(bs), "-m", metric, "--json", str(tmp_path / f"{bs}.json"))
        assert res.exit_code == 0, res.output
        p = PlacementPlan.from_json((tmp_path / f"{bs}.json").read_text())
        expected.append((p.rm_device, p.learner_device))
        names, grid = grid_values(p, value)
        cells.append({(names[i], names[j]): "infeasible" if v is None else f"{v:,.4g}"
                      for i, row in enumerate(grid) for j, v in enumerate(row)})
    assert cells[0] != cells[1] != cells[2]  # so a panel drawn from the wrong batch shows

    # The CLI's summary of its panels ...
    res = plan_cli("-m", metric, "--png", str(tmp_path / "grid.png"), "--png-batches", "32,128,512")
    assert res.exit_code == 0, res.output
    for bs, (rm, ln) in zip(batches, expected):
        assert f"BS={bs}: RM on {rm}, learner on {ln}," in res.output

    # ... and the figure it draws: one panel per batch, in order, each marking that batch's choice.
    spec = HardwareSpec.load(SERVER)
    # BS_i 2: pearl plan plans the insert batch of compose's default replay ratio 0.5 (issue 41, point 8)
    wl = workload_for_env("CartPole-v1", 64, hidden_sizes="64,64", insert_batch=2)
    plans = batch_plans(spec, wl, metric, batches)
    fig = grid_figure(plans)
    try:
        panels = drawn(fig)
        what = "throughput (samples/s)" if metric == "throughput" else "power efficiency (samples/J)"
        assert [p["title"] for p in panels] == [f"BS={bs}: {what}" for bs in batches]
        assert [p["choice"] for p in panels] == [[c] for c in expected]
        assert [p["text"] for p in panels] == cells  # every cell: the value `pearl plan -b N` predicts
        assert all(p["rows"] == p["cols"] == ["xeon", "h100", "agilex"] for p in panels)
        assert "CartPole-v1 on cpu-gpu-fpga" in fig._suptitle.get_text()
    finally:
        close(fig)


def test_infeasible_cells_are_drawn_as_such(tmp_path):
    # An FPGA with 8 DSP blocks can hold neither the RM nor the learner: its row and column are infeasible.
    text = re.sub(r"(?m)^dsp_blocks = \d+", "dsp_blocks = 8", SERVER.read_text())
    assert "dsp_blocks = 8" in text
    (tmp_path / "small.toml").write_text(text)
    spec = HardwareSpec.load(tmp_path / "small.toml")
    plans = batch_plans(spec, workload_for_env("CartPole-v1", 32, hidden_sizes="64,64"), "throughput", (32, 256))
    for fig_plans in (plans, plans[:1]):  # the panels and the single grid alike
        fig = grid_figure(fig_plans)
        try:
            panels = drawn(fig)
        finally:
            close(fig)
        assert len(panels) == len(fig_plans)
        for panel, plan in zip(panels, fig_plans):
            names, grid = grid_values(plan)
            none = sorted((names[i], names[j]) for i in range(3) for j in range(3) if grid[i][j] is None)
            assert len(none) == 5 and panel["infeasible"] == none
            assert panel["choice"] == [(plan.rm_device, plan.learner_device)]
            assert panel["choice"][0] not in none
    res = CliRunner().invoke(app, ["plan", "-H", str(tmp_path / "small.toml"), "--png", str(tmp_path / "g.png"),
                                   "--png-batches", "32,256"])
    assert res.exit_code == 0, res.output
    assert png_size((tmp_path / "g.png").read_bytes())[0] == 2 * png_size(grid_png_bytes(plans[0]))[0]


# --------------------------------------------------------------------------- unchanged and all-or-nothing
def test_without_png_batches_the_single_grid_is_unchanged(tmp_path):
    res = plan_cli("-b", "64", "--png", str(tmp_path / "grid.png"))
    assert res.exit_code == 0, res.output
    assert "grid written to" in res.output and "panel" not in res.output
    data = (tmp_path / "grid.png").read_bytes()
    spec = HardwareSpec.load(SERVER)
    wl = workload_for_env("CartPole-v1", 64, hidden_sizes="64,64", insert_batch=2)  # BS_i of replay ratio 0.5
    plan = batch_plans(spec, wl, "throughput", (64,))[0]
    assert data == grid_png_bytes(plan)  # the one grid of -b 64
    assert png_size(data) == (660, 540)  # (1.6 + 1.3 x 3 devices) x (1.2 + 1.1 x 3) inches at 120 dpi
    fig = grid_figure(plan)
    try:
        (panel,) = drawn(fig)
        assert panel["title"] == "CartPole-v1 BS=64: predicted samples/s"
    finally:
        close(fig)
    # One batch in the list draws that batch's single grid.
    res = plan_cli("-b", "64", "--png", str(tmp_path / "one.png"), "--png-batches", "64")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "one.png").read_bytes() == data


@pytest.mark.parametrize("where", ["missing-dir", "is-a-directory"])
def test_a_bad_png_path_changes_nothing_and_leaves_no_temp_file(tmp_path, where):
    (tmp_path / "adir").mkdir()
    png = tmp_path / "nope" / "grid.png" if where == "missing-dir" else tmp_path / "adir"
    out = tmp_path / "plan.json"
    out.write_text("old plan")
    res = plan_cli("--png", str(png), "--json", str(out), "--png-batches", "32,128")
    assert res.exit_code == 2 and "error:" in res.output, res.output
    assert sorted(os.listdir(tmp_path)) == ["adir", "plan.json"] and out.read_text() == "old plan"
    assert os.listdir(tmp_path / "adir") == []


def test_compose_and_validate_do_not_take_png_batches(tmp_path):
    from pearl_core.composer.cli import plan_command
    from pearl_core.composer.compose_cli import compose_command
    from pearl_core.composer.validate import validate_command

    assert "png_batches" in inspect.signature(plan_command).parameters
    assert "png_batches" not in inspect.signature(compose_command).parameters
    assert "png_batches" not in inspect.signature(validate_command).parameters
    assert "png" in inspect.signature(compose_command).parameters  # the rest of plan's options still shared
    res = CliRunner().invoke(app, ["compose", "-H", str(SERVER), "--no-profile", "-o", str(tmp_path / "rt.py"),
                                   "--png", str(tmp_path / "g.png"), "--png-batches", "32,128"])
    assert res.exit_code == 2 and "png-batches" in res.output
    assert list(tmp_path.iterdir()) == []


def test_the_documented_example_runs(tmp_path, monkeypatch):
    import shlex

    doc = (ROOT / "docs" / "composer.md").read_text(encoding="utf-8")
    section = doc.split("## The RM x learner grid as a picture", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    commands = [shlex.split(line) for line in block.splitlines() if line.strip()]
    assert len(commands) == 2 and all(c[:2] == ["pearl", "plan"] and "--png-batches" in c for c in commands)
    monkeypatch.chdir(tmp_path)
    for argv in commands:
        argv = [str(ROOT / a) if a.startswith("examples/") else a for a in argv[1:]]
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 0, res.output
        png = tmp_path / argv[argv.index("--png") + 1]
        n = len(argv[argv.index("--png-batches") + 1].split(","))
        assert png_size(png.read_bytes())[0] == n * 660
