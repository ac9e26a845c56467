"""Matrix and PlacementPlan values: JSON round trips, the content hash, and the runtime plan they produce."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pearl_core.composer import (
    AssignmentMatrix,
    CostCell,
    DeviceRow,
    DeviceSpec,
    HardwareSpec,
    LearnerLayer,
    LinkSpec,
    PlacementPlan,
    Workload,
    make_plan,
)
from pearl_core.composer.plan import setting_label
from pearl_core.errors import SpecError
from pearl_core.runtime.config import Setting

ROOT = Path(__file__).resolve().parents[2]
LAYERS = (LearnerLayer("q.0", "linear", 4, 64, 256, 320, True, "q"),
          LearnerLayer("q.1", "linear", 64, 2, 128, 130, True, "q"))
WL = Workload(batch_size=32, obs_bytes=16, action_bytes=8, n_actors=2, layers=LAYERS, env_id="CartPole-v1")


def server() -> HardwareSpec:
    return HardwareSpec(
        (DeviceSpec("xeon", "cpu", 2**38, 60, 185, cores=16, threads=32),
         DeviceSpec("gpu", "cuda", 2**36, 50, 350, peak_flops=50e12, mem_bandwidth_Bps=2e12)),
        (LinkSpec("xeon", "xeon", 2e-6, 2e10), LinkSpec("xeon", "gpu", 1e-5, 2.4e10)), name="server",
        source="/somewhere/server.toml")


def test_cost_cell_and_matrix_validate_and_round_trip():
    with pytest.raises(SpecError, match="latency_s = -1"):
        CostCell(-1.0)
    with pytest.raises(SpecError, match="source"):
        CostCell(1.0, 0.0, "guessed")
    with pytest.raises(SpecError, match="more than one row"):
        AssignmentMatrix((DeviceRow("a", "cpu"), DeviceRow("a", "cpu")))
    plan = make_plan(server(), WL)
    m = plan.matrix
    again = AssignmentMatrix.from_json(m.to_json())
    assert again == m and again.row("gpu").notes == m.row("gpu").notes
    assert AssignmentMatrix.from_json(json.dumps({"rows": [], "comm_inclusive": True})).comm_inclusive
    with pytest.raises(SpecError, match="unknown field"):
        AssignmentMatrix.from_dict({"rows": [], "cells": []})


def test_plan_json_round_trip_is_exact():
    plan = make_plan(server(), WL, "power_efficiency")
    again = PlacementPlan.from_json(plan.to_json())
    assert again == plan
    assert again.content_hash() == plan.content_hash()
    assert again.chosen.iteration_s == plan.chosen.iteration_s
    json.loads(plan.to_json())  # plain JSON: no NaN or Infinity


def test_content_hash_is_stable_and_tracks_content_not_file_paths():
    a = make_plan(server(), WL)
    b = make_plan(dataclasses.replace(server(), source="/elsewhere/copy.toml"), WL)
    assert a.content_hash() == b.content_hash()
    assert len(a.content_hash()) == 64
    assert make_plan(server(), WL, "power_efficiency").content_hash() != a.content_hash()
    assert make_plan(server(), dataclasses.replace(WL, batch_size=64)).content_hash() != a.content_hash()
    # The hash digests the canonical text (sorted keys, no whitespace) -- what a generated header can quote.
    import hashlib

    assert hashlib.sha256(a.canonical_json().encode()).hexdigest() == a.content_hash()


def test_runtime_plan_for_setting_1_and_setting_2():
    plan = make_plan(server(), WL)
    forced_1 = dataclasses.replace(plan, decision=dataclasses.replace(
        plan.decision, rm_device="xeon", learner_device="gpu", ds_device="xeon", setting=1))
    rp = forced_1.runtime_plan()
    assert (rp.rm_backend, rp.learner_device, rp.storage_device, rp.setting) == ("cpu", "cuda:0", "cpu", 1)
    assert forced_1.setting is rp.setting is Setting.THROUGH_HOST  # ints given are read as the enum
    assert forced_1.predicted_iteration_s == forced_1.chosen.iteration_s
    assert rp.rm_threads == plan.matrix.row("xeon").config["rm_threads"] == 30   # 32 threads - 2 actors
    assert rp.n_actors == 2
    forced_2 = dataclasses.replace(plan, decision=dataclasses.replace(
        plan.decision, rm_device="gpu", learner_device="gpu", ds_device="gpu", setting=2))
    rp = forced_2.runtime_plan(queue_size=4)
    assert (rp.rm_backend, rp.learner_device, rp.storage_device, rp.setting, rp.queue_size) == \
        ("cuda", "cuda:0", "cuda:0", 2, 4)
    assert rp.setting is Setting.COLOCATED
    assert setting_label(rp.setting) == "setting 2 (co-located)"
    assert setting_label(1) == "setting 1 (through the host)"
    cpu_only = dataclasses.replace(plan, decision=dataclasses.replace(
        plan.decision, rm_device="xeon", learner_device="xeon", ds_device="xeon", setting=2))
    rp = cpu_only.runtime_plan()
    cfg = plan.matrix.row("xeon").config
    assert (rp.learner_threads, rp.rm_threads) == (cfg["co_learner_threads"], cfg["co_rm_threads"])


def test_plan_exposes_the_spec_again():
    plan = make_plan(server(), WL)
    assert plan.hardware() == server()
    assert plan.workload_value() == WL
    with pytest.raises(SpecError, match="format"):
        PlacementPlan.from_dict({**plan.to_dict(), "format": 99})


# --------------------------------------------------------------------------- the plan command
def cli_app():
    import typer

    from pearl_core.composer.cli import plan_command

    app = typer.Typer()
    app.command("plan")(plan_command)
    app.command("noop")(lambda: None)  # two commands, so "plan" stays a subcommand as in `pearl plan`
    return app


def test_plan_command_on_the_example_server_prints_matrix_grid_choice_and_draws_png(tmp_path):
    png, out = tmp_path / "grid.png", tmp_path / "plan.json"
    result = CliRunner().invoke(cli_app(), [
        "plan", "--hardware", str(ROOT / "examples" / "hardware" / "cpu-gpu-fpga.toml"), "--hidden", "64,64",
        "-b", "32", "-m", "power_efficiency", "--png", str(png), "--json", str(out)])
    assert result.exit_code == 0, result.output
    text = result.output
    for expected in ("Primitive Device Assignment Matrix", "Predicted throughput", "Predicted power efficiency",
                     "agilex", "h100", "xeon", "Data Storage placement", "Choice: RM on", "plan hash"):
        assert expected in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plan = PlacementPlan.from_json(out.read_text())
    assert plan.metric == "power_efficiency" and len(plan.candidates) == 9


def test_plan_command_reports_bad_input_and_exits_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[device]]\nname = "x"\nkind = "quantum"\n')
    result = CliRunner().invoke(cli_app(), ["plan", "--hardware", str(bad)])
    assert result.exit_code == 2 and "kind = 'quantum' is unknown" in result.output
    result = CliRunner().invoke(cli_app(), ["plan", "--hardware", str(ROOT / "examples" / "hardware" /
                                                                     "this-machine.toml"), "--env", "Nope-v9"])
    assert result.exit_code == 2 and "Nope-v9" in result.output
    result = CliRunner().invoke(cli_app(), ["plan", "--hardware", str(ROOT / "examples" / "hardware" /
                                                                     "this-machine.toml"), "-m", "speed"])
    assert result.exit_code == 2 and "metric" in result.output
