"""pearl_core.runtime.program: a generated program refuses edited plan literals with what changed and the fix
(exit 2, no traceback), and prints --help whatever its default log dir holds."""

from __future__ import annotations

import dataclasses
import io
import json
import runpy
from pathlib import Path

import pytest

from pearl_core.runtime.program import build_parser, main

PROGRAM = Path(__file__).resolve().parents[1] / "golden" / "runtime_dqn_cartpole.py"


@pytest.fixture(scope="module")
def program():
    return runpy.run_path(str(PROGRAM), run_name="generated_program")  # its literals, not its __main__ block


def run(ns, capsys, *, plan_json=None, runtime_plan=None, argv=()):
    rc = main(ns["RUN_CONFIG"], runtime_plan or ns["RUNTIME_PLAN"], plan_json or ns["PLAN_JSON"],
              plan_hash=ns["PLAN_HASH"], backends=ns["BACKENDS"], argv=list(argv))
    return rc, capsys.readouterr().err


def test_the_program_as_written_passes_the_check(program, capsys):
    rc, err = run(program, capsys, argv=["--show-plan"])
    assert rc == 0 and err == ""


def test_damaged_plan_json_is_refused_without_a_traceback(program, capsys):
    rc, err = run(program, capsys, plan_json=program["PLAN_JSON"][:-40])
    assert rc == 2 and "error: PLAN_JSON in this program is not a placement plan PEARL can read" in err
    assert "Fix: compose the program again" in err and "Traceback" not in err


def test_edited_plan_json_is_refused_naming_the_hashes(program, capsys):
    data = json.loads(program["PLAN_JSON"])
    data["workload"]["batch_size"] += 1
    rc, err = run(program, capsys, plan_json=json.dumps(data, sort_keys=True, indent=1))
    assert rc == 2 and "PLAN_JSON differs from the plan this program was generated from" in err
    assert program["PLAN_HASH"][:12] in err and "Fix: compose the program again" in err
    rc, err = run(program, capsys, plan_json=json.dumps(data, sort_keys=True, indent=1), argv=["--show-plan"])
    assert rc == 0 and "warning: PLAN_JSON differs" in err  # --show-plan still shows it


def test_edited_runtime_plan_is_refused_naming_the_field(program, capsys):
    edited = dataclasses.replace(program["RUNTIME_PLAN"], storage_device="cuda:3")
    rc, err = run(program, capsys, runtime_plan=edited)
    assert rc == 2 and "RUNTIME_PLAN differs from the placement in PLAN_JSON" in err
    assert "storage_device = 'cuda:3' (the plan chose 'cpu')" in err and "Fix:" in err


def test_help_prints_a_default_log_dir_holding_a_lone_surrogate(program):
    config = dataclasses.replace(program["RUN_CONFIG"], log_dir="runs/caf\udce9")
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # strict, as a UTF-8 terminal
    build_parser(config, program["PLAN_HASH"]).print_help(file=out)
    out.flush()
    assert "runs/caf\\udce9" in out.buffer.getvalue().decode()


def test_an_edited_value_a_runtime_plan_refuses_is_an_error_line_not_a_traceback(tmp_path):
    import subprocess
    import sys

    text = PROGRAM.read_text()
    assert "    learner_threads=1,\n" in text
    edited = tmp_path / "program.py"
    edited.write_text(text.replace("    learner_threads=1,\n", "    learner_threads=-1,\n", 1))
    done = subprocess.run([sys.executable, str(edited), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "error: this program's settings (line " in done.stderr and "learner_threads" in done.stderr
    assert "compose the program again" in done.stderr
    unedited = subprocess.run([sys.executable, str(PROGRAM), "--help"], capture_output=True, text=True, timeout=120)
    assert unedited.returncode == 0 and "usage:" in unedited.stdout
