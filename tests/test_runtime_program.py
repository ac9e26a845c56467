"""The generated program's library ``main`` (pearl_core.runtime.program), ``--resume`` and numbered run directories.

The golden program (``tests/golden/runtime_dqn_cartpole.py``) is what RuntimeGen
writes today; ``tests/golden/legacy/`` keeps a program written before ``main``
moved into the library, which must keep running.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pearl_core.errors import SpecError
from pearl_core.runtime import rundir

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "golden" / "runtime_dqn_cartpole.py"
LEGACY = ROOT / "tests" / "golden" / "legacy" / "runtime_dqn_cartpole_2026-12-04.py"


MARK_END = ("from pearl_core.callbacks import Callback\n\n\n"
            "class MarkEnd(Callback):\n"
            "    def on_end(self, run, result):\n"
            "        (run.log_dir / 'ended.txt').write_text(str(result.env_steps))\n")


def run(program: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(cwd)])}  # cwd: the test's callbacks
    return subprocess.run([sys.executable, str(program), "--quiet", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def digest(directory: Path) -> dict[str, str]:
    return {p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def episodes(directory: Path) -> list[dict[str, str]]:
    with open(directory / "episodes.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_holds_run_and_fresh_log_dir(tmp_path):
    d = tmp_path / "runs" / "x"
    assert not rundir.holds_run(d) and rundir.fresh_log_dir(str(d)) == str(d)
    d.mkdir(parents=True)
    (d / "notes.txt").write_text("mine")  # a user's own file does not make it a run
    assert rundir.fresh_log_dir(str(d)) == str(d)
    (d / "config.json").write_text("{}")
    assert rundir.holds_run(d)
    assert rundir.fresh_log_dir(str(d)) == f"{d}-2"
    (tmp_path / "runs" / "x-2").mkdir()
    (tmp_path / "runs" / "x-2" / "checkpoint.pt").write_bytes(b"")
    assert rundir.fresh_log_dir(str(d)) == f"{d}-3"
    assert rundir.fresh_log_dir(str(d) + "/") == f"{d}-3"


def test_the_program_resumes_and_never_replaces_an_earlier_run(tmp_path):
    d = tmp_path / "run"
    first = run(PROGRAM, "--max-env-steps", "1200", "--log-dir", str(d), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    before = digest(d)
    first_episodes = episodes(d)
    assert json.loads((d / "result.json").read_text())["env_steps"] >= 1200

    # a second run into the same directory keeps the first one's files and goes to run-2; it takes a
    # callback by import path (and --save-best: the config evaluates, for eval_return)
    (tmp_path / "my_callbacks.py").write_text(MARK_END)
    again = run(PROGRAM, "--max-env-steps", "600", "--log-dir", str(d), "--callback", "my_callbacks:MarkEnd",
                "--save-best", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert digest(d) == before
    assert f"this run writes to {str(d) + '-2'!r}" in again.stdout
    assert json.loads((tmp_path / "run-2" / "result.json").read_text())["log_dir"] == f"{d}-2"
    assert int((tmp_path / "run-2" / "ended.txt").read_text()) >= 600

    # --resume continues the counters and the logs of the run, in its own directory
    resumed = run(PROGRAM, "--max-env-steps", "2400", "--resume", str(d), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stdout and "1,2" in resumed.stdout
    result = json.loads((d / "result.json").read_text())
    assert result["env_steps"] >= 2400
    rows = episodes(d)
    assert rows[:len(first_episodes)] == first_episodes and len(rows) > len(first_episodes)
    assert not (tmp_path / "run-3").exists()

    # a budget the run already reached is refused, and nothing changes
    state = digest(d)
    done = run(PROGRAM, "--max-env-steps", "1000", "--resume", str(d), cwd=tmp_path)
    assert done.returncode == 2
    assert "already took" in done.stderr and "Fix: give a larger --max-env-steps" in done.stderr
    assert digest(d) == state


def test_resume_of_nothing_is_refused_with_the_fix(tmp_path):
    res = run(PROGRAM, "--resume", str(tmp_path / "nope"), cwd=tmp_path)
    assert res.returncode == 2
    assert "does not exist" in res.stderr and "Fix" in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_program_written_before_main_moved_into_the_library_still_runs(tmp_path):
    assert "def main(" in LEGACY.read_text()  # it carries its own main
    res = run(LEGACY, "--max-env-steps", "300", "--log-dir", str(tmp_path / "old"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "old" / "result.json").read_text())["env_steps"] >= 300


def test_the_generated_program_is_short_and_calls_the_library_main():
    text = PROGRAM.read_text()
    assert "from pearl_core.runtime import main" in text and "def main(" not in text
    tree = ast.parse(text)  # the program is its inputs; what it does lives in pearl_core.runtime.program
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Lambda))]
    legacy = ast.parse(LEGACY.read_text())
    assert len(text.splitlines()) < len(LEGACY.read_text().splitlines()) - 90
    assert [n.name for n in ast.walk(legacy) if isinstance(n, ast.FunctionDef)]  # the old one stamped its own


def test_resumed_config_without_a_budget_keeps_the_configs(tmp_path):
    from pearl_core.runtime.config import RunConfig
    from pearl_core.runtime.program import resumed_config

    cfg = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", log_dir=str(tmp_path / "a"))
    out, ck = resumed_config(cfg, None, seed=7)
    assert ck is None and out.seed == 7 and out.log_dir == cfg.log_dir and out.stop == cfg.stop
    with pytest.raises(SpecError):
        resumed_config(cfg, None, max_env_steps=0)


def test_eval_every_works_on_its_own(tmp_path):
    from pearl_core.runtime import SerialRuntime
    from pearl_core.runtime.config import ReplayConfig, RunConfig, StopCriteria
    from pearl_core.runtime.control import StopMonitor

    assert not StopMonitor(StopCriteria(max_env_steps=10)).evaluates  # nothing asks for evaluations
    assert StopMonitor(StopCriteria(eval_return=1.0)).eval_due(5_000)  # eval_return alone: every 5,000
    alone = StopMonitor(StopCriteria(eval_every=300, max_env_steps=10))
    assert alone.evaluates and not alone.eval_due(299) and alone.eval_due(300)
    cfg = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", batch_size=16, learning_starts=100,
                    trainer_kwargs={"hidden_sizes": [16]}, replay=ReplayConfig("uniform", capacity=1_000),
                    stop=StopCriteria(eval_every=300, eval_episodes=2, max_env_steps=900), log_dir=str(tmp_path / "r"))
    SerialRuntime(cfg, progress=False, plot=False, tensorboard=False).run()
    evals = [line for line in (tmp_path / "r" / "evals.csv").read_text().splitlines()[1:] if line]
    assert len(evals) == 3  # at 300, 600 and 900 env steps, with no eval_return set


def test_wrappers_take_kwargs_and_can_wrap_the_evaluation_envs_only(tmp_path):
    import gymnasium

    from pearl_core.envs import make_env
    from pearl_core.runtime import SerialRuntime
    from pearl_core.runtime.config import ReplayConfig, RunConfig, StopCriteria

    short = {"wrapper": "gymnasium.wrappers:TimeLimit", "kwargs": {"max_episode_steps": 7}, "envs": "evaluation"}

    def episode_length(env) -> int:
        env.reset(seed=0)
        for t in range(1, 1_000):
            _, _, term, trunc, _ = env.step(0)  # always left: CartPole falls after ~10 steps
            if term or trunc:
                return t
        return -1

    ev, tr = make_env("CartPole-v1", 0, wrappers=[short], evaluation=True), make_env("CartPole-v1", 0, wrappers=[short])
    assert isinstance(ev, gymnasium.wrappers.TimeLimit) and ev._max_episode_steps == 7 and episode_length(ev) == 7
    assert episode_length(tr) > 7  # the training env is not wrapped
    both = make_env("CartPole-v1", 0, wrappers=[{"wrapper": "gymnasium.wrappers:TimeLimit",
                                                 "kwargs": {"max_episode_steps": 5}}])
    assert episode_length(both) == 5
    cfg = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", batch_size=16, learning_starts=100,
                    trainer_kwargs={"hidden_sizes": [16]}, replay=ReplayConfig("uniform", capacity=1_000),
                    env_wrappers=(short,), stop=StopCriteria(eval_every=300, eval_episodes=2, max_env_steps=600),
                    log_dir=str(tmp_path / "r"))
    assert RunConfig.from_json(cfg.to_json()) == cfg
    SerialRuntime(cfg, progress=False, plot=False, tensorboard=False).run()
    lines = (tmp_path / "r" / "evals.csv").read_text().splitlines()
    header, evals = lines[0].split(","), [dict(zip(lines[0].split(","), row.split(","))) for row in lines[1:] if row]
    assert len(evals) == 2 and all(float(e["mean_return"]) <= 7 for e in evals), (header, evals)
    episodes = (tmp_path / "r" / "episodes.csv").read_text().splitlines()[1:]
    assert any(int(row.split(",")[-1]) > 7 for row in episodes if row)  # training episodes run longer


@pytest.mark.parametrize("entry, words", [
    ({"wrapper": "gymnasium.wrappers:TimeLimit", "kwarg": {}}, "unknown keys ['kwarg']"),
    ({"kwargs": {}}, "has no 'wrapper'"),
    ({"wrapper": "no-colon"}, "'wrapper' = 'no-colon' is invalid"),
    ({"wrapper": "gymnasium.wrappers:TimeLimit", "kwargs": {"x": float("nan")}}, "JSON values only"),
    ({"wrapper": "gymnasium.wrappers:TimeLimit", "envs": "eval"}, "expected one of ['all', 'training', 'evaluation']"),
    ({"wrapper": "atari", "kwargs": {"a": 1}}, "takes no kwargs"),
    (3, "expected a preset name"),
])
def test_bad_wrapper_entries_are_refused_with_the_fix(entry, words):
    from pearl_core.runtime.config import RunConfig

    with pytest.raises(SpecError) as err:
        RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", env_wrappers=(entry,))
    assert words in str(err.value) and "Fix" in str(err.value)


def test_a_callback_that_cannot_be_made_is_refused_before_the_run(tmp_path):
    (tmp_path / "my_callbacks.py").write_text(MARK_END)
    bad = run(PROGRAM, "--log-dir", str(tmp_path / "b"), "--callback", "my_callbacks:Nope", cwd=tmp_path)
    assert bad.returncode == 2 and "my_callbacks:Nope" in bad.stderr and "Fix" in bad.stderr
    assert not (tmp_path / "b").exists()
