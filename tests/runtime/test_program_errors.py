"""A generated program (:mod:`pearl_core.runtime.program`) whose user script moved or raises, or that is given
a bad option, says so and exits 2: an error, never a traceback.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pearl_core.composer import (
    AssignmentMatrix,
    Composition,
    CostCell,
    DeviceRow,
    DeviceSpec,
    HardwareSpec,
    LinkSpec,
    Workload,
    make_plan,
)
from pearl_core.composer.runtimegen import USER_SCRIPT_MODULE, render_program
from pearl_core.runtime.config import ReplayConfig, RunConfig, StopCriteria

ROOT = Path(__file__).resolve().parents[2]
DQN = "pearl_core.algorithms:DQN"


def good_config(tmp_path=None, **kw) -> RunConfig:
    values = dict(env_id="CartPole-v1", trainer=DQN, trainer_kwargs={"hidden_sizes": [16]}, batch_size=16,
                  learning_starts=32, replay=ReplayConfig(capacity=512), stop=StopCriteria(max_env_steps=200),
                  log_dir=str(tmp_path / "run") if tmp_path is not None else "runs/pearl")
    values.update(kw)
    return RunConfig(**values)


def _layers():
    from pearl_core.composer import LearnerLayer

    return (LearnerLayer("q_net.0", "linear", 4, 64, 256, 320, True, "q_net"),
            LearnerLayer("q_net.2", "linear", 64, 2, 128, 130, True, "q_net"))


# ------------------------------------------------------------------ a generated program whose script moved
def fixed_plan():
    spec = HardwareSpec((DeviceSpec("cpu0", "cpu", 2**34, 10, 65, cores=2, threads=2),),
                        (LinkSpec("cpu0", "cpu0", 5e-6, 5e9),), name="faults", source="faults")
    us = lambda x: CostCell(x * 1e-6, 40.0, "given")  # noqa: E731
    row = DeviceRow("cpu0", "cpu", us(20), us(15), us(5), us(900), us(25), us(20), us(6), us(1000),
                    config={"rm_threads": 1, "learner_threads": 1, "co_rm_threads": 1, "co_learner_threads": 1})
    wl = Workload(batch_size=16, obs_bytes=16, action_bytes=8, n_actors=1, insert_batch=2, layers=_layers(),
                  env_id="CartPole-v1", capacity=512, fanout=16)
    return make_plan(spec, wl, "throughput", matrix=AssignmentMatrix((row,), comm_inclusive=True))


SCRIPT = '''\
from pearl_core.algorithms import DQN


class ScriptDQN(DQN):
    pass
'''


def write_program(tmp_path: Path, setting: int, *, script: Path | None) -> Path:
    plan = fixed_plan()
    trainer = f"{USER_SCRIPT_MODULE}:ScriptDQN" if script else DQN
    config = good_config(tmp_path, trainer=trainer, stop=StopCriteria(max_env_steps=64), learning_starts=16)
    runtime_plan = dataclasses.replace(plan.runtime_plan(), setting=setting, n_actors=1, insert_batch=8,
                                       queue_size=4)
    program = tmp_path / "runtime.py"
    program.write_text(render_program(Composition(plan, config, runtime_plan, str(script) if script else None)))
    return program


def run_program(program: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, str(program), "--quiet", *args], cwd=program.parent, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("setting", [1, 2])
def test_a_generated_program_whose_script_was_moved_says_so_and_exits_2(tmp_path, setting, no_leaks):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    program = write_program(tmp_path, setting, script=script)
    script.rename(tmp_path / "moved.py")
    done = run_program(program)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: the script {str(script)!r} that defines the trainer class was moved or "
                                  "deleted"), done.stderr
    assert "Fix: put the script back at that path" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()  # nothing started, nothing written
    assert run_program(program, "--show-plan").returncode == 0  # the plan can still be read


@pytest.mark.parametrize("setting", [1, 2])
def test_a_generated_program_whose_script_raises_says_so_and_exits_2(tmp_path, setting, no_leaks):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    program = write_program(tmp_path, setting, script=script)
    script.write_text(SCRIPT + "\nraise RuntimeError('boom at import')\n")
    done = run_program(program)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: the script") and "(RuntimeError: boom at import)" in done.stderr
    assert "Fix: run `python" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("setting", [1, 2])
@pytest.mark.parametrize("args, match", [(("--seed", "-1"), "RunConfig.seed = -1 is invalid"),
                                         (("--max-env-steps", "0"), "StopCriteria.max_env_steps = 0 is invalid")])
def test_a_generated_programs_bad_option_is_an_error_not_a_traceback(tmp_path, setting, args, match, no_leaks):
    program = write_program(tmp_path, setting, script=None)
    done = run_program(program, *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and match in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()
