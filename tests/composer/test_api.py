"""The Composer API (Listing 1), the Composition it returns, RuntimeGen and `pearl compose`.

Golden files: ``tests/golden/runtime_*.py`` hold the exact text RuntimeGen writes
for two fixed plans. After an intended change of the generated program (or of the
plan's JSON layout) regenerate them with

    PEARL_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/composer/test_api.py -k golden

and review the diff before committing.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pearl_core.algorithms import DDPG, DQN
from pearl_core.composer import (
    AssignmentMatrix,
    Composer,
    ComposerError,
    Composition,
    CostCell,
    DeviceRow,
    DeviceSpec,
    HardwareSpec,
    LinkSpec,
    PlacementPlan,
    RuntimeGen,
    Workload,
    make_plan,
)
from pearl_core.composer import api as api_module
from pearl_core.composer import runtimegen
from pearl_core.composer.runtimegen import literal, render_program, trainer_reference
from pearl_core.errors import InvalidValueError, PearlError
from pearl_core.runtime import ReplayConfig, RunConfig, StopCriteria
from pearl_core.runtime.config import Setting
from pearl_core.runtime.program import build_parser

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
THIS_MACHINE = ROOT / "examples" / "hardware" / "this-machine.toml"

HOSTILE = [
    "it's",
    'say "hi"',
    "two\nlines",
    "\"; import os; os.system('x')#",
    "'''; os.system('x'); '''",
    '"""; os.system("x"); """',
    "back\\slash\\",
    "tab\tcr\r",
    "ünïcødé ✓ 雪 🚀",
    "line\u2028sep\u2029para\x0c\x0b",
    "\x00nul",
    "\ud800 lone surrogate",
    "${plan_json} {run_config} %s {}",
    "# not a comment\n# really",
    "100% %(prog)s %s",
]


# ----------------------------------------------------------------------------- fixtures
def composer(**kw) -> Composer:
    return Composer(HardwareSpec.load(THIS_MACHINE), **kw)


def cartpole(c: Composer | None = None) -> Composer:
    c = c or composer()
    c.set_actors("CartPole-v1", n_actors=1)
    c.set_train_function(DQN, batch_size=32, hidden_sizes=(32, 32), total_env_steps=5_000)
    c.set_replay("prioritized", capacity=4_096, fanout=8)
    return c


def fixed_plan(env_id: str = "CartPole-v1", batch_size: int = 64, spec_name: str = "golden") -> PlacementPlan:
    """A plan that depends on no cost model: a hand-written matrix for a hand-written spec."""
    spec = HardwareSpec((DeviceSpec("cpu0", "cpu", 2**34, 10, 65, cores=2, threads=2),),
                        (LinkSpec("cpu0", "cpu0", 5e-6, 5e9),), name=spec_name, source="golden")
    us = lambda x: CostCell(x * 1e-6, 40.0, "given")  # noqa: E731
    row = DeviceRow("cpu0", "cpu", us(20), us(15), us(5), us(900), us(25), us(20), us(6), us(1000),
                    config={"rm_threads": 1, "learner_threads": 1, "co_rm_threads": 1, "co_learner_threads": 1})
    matrix = AssignmentMatrix((row,), comm_inclusive=True)
    from pearl_core.composer import LearnerLayer

    layers = (LearnerLayer("q_net.0", "linear", 4, 256, 1024, 1280, True, "q_net"),
              LearnerLayer("q_net.2", "linear", 256, 256, 65536, 65792, True, "q_net"),
              LearnerLayer("q_net.4", "linear", 256, 2, 512, 514, True, "q_net"))
    wl = Workload(batch_size=batch_size, obs_bytes=16, action_bytes=8, n_actors=1, insert_batch=2, layers=layers,
                  env_id=env_id, capacity=100_000, fanout=16)
    return make_plan(spec, wl, "throughput", matrix=matrix)


def fixed_config(env_id: str = "CartPole-v1", trainer: str = "pearl_core.algorithms:DQN", **kw) -> RunConfig:
    values = dict(env_id=env_id, trainer=trainer, trainer_kwargs={"total_env_steps": 50_000},
                  replay=ReplayConfig("prioritized", capacity=100_000, fanout=16), batch_size=64, replay_ratio=0.5,
                  stop=StopCriteria(eval_return=475.0, eval_every=5_000, eval_episodes=20, max_env_steps=100_000),
                  learning_starts=1_000, log_dir="runs/demo")
    values.update(kw)
    return RunConfig(**values)


def assign(tree: ast.Module, name: str):
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    raise AssertionError(f"{name} is not assigned at top level")


def header(text: str) -> list[str]:
    return text.split("from __future__ import annotations")[0].splitlines()


# ----------------------------------------------------------------------------- literals
@pytest.mark.parametrize("value", HOSTILE + [0, -7, 2**70, 1.5, -0.0, 1e-300, True, False, None, [], (), {}, (1,),
                                             [1, "a", None], {"k": [1, (2, 3)], "é\n": {"x": 1.25}}])
def test_literal_round_trips(value):
    text = literal(value)
    assert ast.literal_eval(text) == value or (value != value)
    assert type(ast.literal_eval(text)) is type(value)
    assert "\n" not in text and "\r" not in text


class EvilStr(str):
    def __repr__(self):
        return "__import__('os').system('x')"


@pytest.mark.parametrize("value, where", [
    (EvilStr("x"), "EvilStr"), (Path("/tmp"), "Path"), (float("nan"), "not finite"), (float("inf"), "not finite"),
    ({1, 2}, "set"), (object(), "object"), ({1: "a"}, "not a str"), (b"bytes", "bytes"), (1 + 2j, "complex"),
])
def test_literal_rejects_anything_else(value, where):
    with pytest.raises(InvalidValueError, match=where) as info:
        literal(value, "trainer_kwargs['x']")
    assert "trainer_kwargs['x']" in str(info.value) and "expected a plain literal" in str(info.value)


def test_literal_rejects_cycles():
    loop: list = []
    loop.append(loop)
    with pytest.raises(InvalidValueError, match="nested deeper"):
        literal(loop)


# ----------------------------------------------------------------------------- Composer errors
def test_out_of_order_and_missing_calls_are_clear():
    c = composer()
    with pytest.raises(ComposerError, match=r"before set_actors.*Fix: call composer.set_actors"):
        c.set_train_function(DQN, batch_size=32)
    with pytest.raises(ComposerError, match=r"missing: set_actors.*set_train_function.*set_replay"):
        c.run(profile=False)
    c.set_actors("CartPole-v1")
    c.set_train_function(DQN, batch_size=32, hidden_sizes=(16,))
    with pytest.raises(ComposerError, match=r"missing: set_replay\('prioritized' \| 'uniform'") as info:
        c.run(profile=False)
    assert "set_actors" not in str(info.value).split("missing:")[1]
    with pytest.raises(ComposerError, match=r"got a PlacementPlan alone; expected the Composition.*Fix: plan = "
                                            r"composer.run\(\)"):
        c.RuntimeGen(fixed_plan(), "never.py")
    assert not Path("never.py").exists()


@pytest.mark.parametrize("call, match", [
    (lambda c: c.set_actors("CartPol-v1"), r"'CartPol-v1' is not a registered gymnasium environment.*CartPole-v1"),
    (lambda c: c.set_actors(""), "expected a gymnasium id"),
    (lambda c: c.set_actors("CartPole-v1", n_actors=0), r"n_actors = 0 is invalid; expected an int >= 1"),
    (lambda c: c.set_replay("priority"), r"kind = 'priority' is unknown.*did you mean 'prioritized'"),
    (lambda c: c.set_replay("uniform", capacity=-5), r"capacity = -5 is invalid; expected an int >= 1"),
    (lambda c: c.set_replay("prioritized", fanout=1), r"fanout = 1 is invalid; expected an int >= 2"),
    (lambda c: c.set_replay("prioritized", beta=1.5), r"beta = 1.5 is invalid"),
    (lambda c: c.set_stop(), r"at least one of"),
    (lambda c: c.set_stop(max_env_steps=0), r"max_env_steps = 0 is invalid"),
    (lambda c: c.set_run(seed=-1), r"seed = -1"),
])
def test_bad_values_are_rejected(call, match):
    with pytest.raises(ComposerError, match=match):
        call(composer())


def test_bad_composer_arguments():
    with pytest.raises(ComposerError, match=r"metric = 'speed' is unknown"):
        Composer(HardwareSpec.load(THIS_MACHINE), metric="speed")
    with pytest.raises(ComposerError, match=r"is not a file; expected a hardware-spec TOML"):
        Composer("no/such/spec.toml")
    with pytest.raises(ComposerError, match="expected None, a path"):
        Composer(42)  # type: ignore[arg-type]


def test_trainer_that_does_not_fit_the_env():
    c = composer().set_actors("CartPole-v1")
    with pytest.raises(ComposerError, match=r"trainer DDPG does not fit 'CartPole-v1'"):
        c.set_train_function(DDPG, batch_size=32)
    with pytest.raises(ComposerError, match="expected a trainer class"):
        c.set_train_function(DQN(*_spaces()), batch_size=32)  # an instance
    with pytest.raises(ComposerError, match=r"trainer_kwargs\['hidden_sizes'\] = <ndarray>"):
        import numpy as np

        c.set_train_function(DQN, batch_size=32, hidden_sizes=np.array([8, 8]))
    with pytest.raises(ComposerError, match="no attribute 'DQNN'"):
        c.set_train_function("pearl_core.algorithms:DQNN", batch_size=32)
    with pytest.raises(ComposerError, match="batch_size = 0"):
        c.set_train_function(DQN, batch_size=0)

    class Local(DQN):
        pass

    with pytest.raises(ComposerError, match="defined inside a function"):
        c.set_train_function(Local, batch_size=32)
    assert c._trainer is None  # rejected calls changed nothing


def _spaces():
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    return env.observation_space, env.action_space


def test_changing_the_env_rechecks_the_trainer():
    c = cartpole()
    with pytest.raises(ComposerError, match="does not fit 'Pendulum-v1'"):
        c.set_actors("Pendulum-v1")
    assert c._env_id == "CartPole-v1"


def test_run_returns_a_composition_and_saves_its_plan_atomically(tmp_path):
    c = cartpole()
    composed = c.run(profile=False, save=tmp_path / "plan.json")
    assert isinstance(composed, Composition)
    plan = composed.plan
    assert isinstance(plan, PlacementPlan)
    assert plan.workload["env_id"] == "CartPole-v1" and plan.workload["batch_size"] == 32
    assert plan.workload["insert_batch"] == 2  # round(1 / replay_ratio 0.5)
    assert len(plan.workload["layers"]) >= 3  # the trainer's Linear layers were extracted
    assert PlacementPlan.from_json((tmp_path / "plan.json").read_text()) == plan
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]
    config = c.run_config()
    assert config.trainer == "pearl_core.algorithms.dqn:DQN" and config.stop.max_env_steps == 100_000
    # what users read off "the plan" of the paper's listing
    assert composed.config == config and composed.runtime_plan == plan.runtime_plan()
    assert composed.user_script is None
    assert (composed.rm_device, composed.learner_device, composed.ds_device) == \
        (plan.rm_device, plan.learner_device, plan.ds_device)
    assert composed.setting is plan.setting and isinstance(composed.setting, Setting)
    assert composed.predicted_iteration_s == plan.predicted_iteration_s > 0
    assert composed.metric == "throughput" and composed.chosen == plan.chosen
    assert composed.content_hash() == plan.content_hash()
    assert repr(composed).startswith(f"Composition(plan {plan.content_hash()[:12]}: RM on {plan.rm_device!r}")
    with pytest.raises(AttributeError):
        composed.config = fixed_config()  # type: ignore[misc] # frozen


def test_run_leaves_nothing_behind_on_error(tmp_path, monkeypatch):
    c = cartpole(Composer(HardwareSpec.load(THIS_MACHINE), cache_dir=tmp_path / "cache"))

    def broken(*a, **k):
        raise PearlError("profiling exploded")

    monkeypatch.setattr("pearl_core.composer.plan.algorithm1", broken)
    with pytest.raises(PearlError, match="exploded"):
        c.run(profile=False, save=tmp_path / "plan.json")
    # only what composing learned before the failure (the trainer's layers and check, the env's spaces), whole
    left = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in left} <= {"trainer-facts.json", "env-spaces.json"}
    assert all(json.loads(p.read_text()) for p in left)


def test_runtimegen_write_is_atomic(tmp_path, monkeypatch):
    composed = Composition(fixed_plan(), fixed_config())
    target = tmp_path / "runtime.py"
    target.write_text("old")

    def boom(*a, **k):
        raise OSError("disk full")

    import pearl_core.fileio

    monkeypatch.setattr(pearl_core.fileio.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        RuntimeGen(composed, target)
    assert [p.name for p in tmp_path.iterdir()] == ["runtime.py"] and target.read_text() == "old"
    monkeypatch.undo()
    with pytest.raises(ComposerError, match="does not exist"):
        RuntimeGen(composed, tmp_path / "no" / "dir.py")
    with pytest.raises(ComposerError, match="is a directory"):
        RuntimeGen(composed, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["runtime.py"] and target.read_text() == "old"


def test_runtimegen_takes_a_composition_only(tmp_path):
    plan = fixed_plan()
    with pytest.raises(ComposerError, match=r"got a PlacementPlan alone; expected the Composition.*"
                                            r"Composition\(placement_plan, run_config\)"):
        RuntimeGen(plan, tmp_path / "a.py")  # type: ignore[arg-type]
    with pytest.raises(ComposerError, match=r"composition = 'plan' \(str\); expected the Composition"):
        RuntimeGen("plan", tmp_path / "a.py")  # type: ignore[arg-type]
    with pytest.raises(ComposerError, match="composed for batch size 64 but the run config says 32"):
        Composition(plan, fixed_config(batch_size=32))
    with pytest.raises(ComposerError, match=r"config = .* is a str; expected a RunConfig"):
        Composition(plan, "config")  # type: ignore[arg-type]
    with pytest.raises(ComposerError, match=r"a class in '__main__'.*move the trainer into a module"):
        Composition(plan, fixed_config(trainer="__main__:MyDQN"))
    with pytest.raises(ComposerError, match="no script path was given"):
        Composition(plan, fixed_config(trainer=f"{runtimegen.USER_SCRIPT_MODULE}:T"))
    # a library trainer with the composing script: the script registers the env (runtimegen.env_script)
    assert Composition(plan, fixed_config(), user_script="/tmp/x.py").user_script == "/tmp/x.py"
    assert list(tmp_path.iterdir()) == []
    out = RuntimeGen(Composition(plan, fixed_config()), tmp_path / "a.py")
    ast.parse(out.read_text(encoding="utf-8"))


def test_runtimegen_needs_no_global_state(tmp_path):
    # a composition built by hand, never seen by a Composer, is all RuntimeGen needs
    assert not hasattr(api_module, "_COMPOSED")
    by_hand = Composition(fixed_plan(), fixed_config())
    text = RuntimeGen(by_hand, tmp_path / "a.py").read_text(encoding="utf-8")
    assert ast.literal_eval(assign(ast.parse(text), "PLAN_HASH")) == by_hand.plan.content_hash()
    # a composition outlives its composer
    c = cartpole()
    composed = c.run(profile=False)
    del c
    assert "max_env_steps=100000" in RuntimeGen(composed, tmp_path / "b.py").read_text(encoding="utf-8")


def test_recomposing_keeps_each_compositions_own_settings(tmp_path):
    c = cartpole()
    first = c.run(profile=False)
    c.set_stop(max_env_steps=777)
    second = c.run(profile=False)
    assert first.plan == second.plan  # stop criteria do not change the placement plan...
    assert first.content_hash() == second.content_hash()
    text = c.RuntimeGen(second, tmp_path / "r.py").read_text(encoding="utf-8")
    assert "max_env_steps=777" in text  # ...each composition writes the settings it was composed with
    assert "max_env_steps=100000" in RuntimeGen(first, tmp_path / "f.py").read_text(encoding="utf-8")
    c2 = cartpole()
    c2.set_stop(max_env_steps=888)
    third = c2.run(profile=False)
    assert third.content_hash() == first.content_hash()
    # two compositions of the same plan by two composers stay independent
    text = RuntimeGen(first, tmp_path / "x.py").read_text(encoding="utf-8")
    assert "max_env_steps=100000" in text and "max_env_steps=888" not in text and "max_env_steps=777" not in text
    assert "max_env_steps=888" in c2.RuntimeGen(third, tmp_path / "y.py").read_text(encoding="utf-8")


# ----------------------------------------------------------------------------- hostile inputs
@pytest.mark.parametrize("evil", HOSTILE)
def test_generated_program_is_safe_for_any_input(evil):
    plan = fixed_plan(env_id=evil, spec_name=evil)
    assert plan.spec["name"] == evil
    config = fixed_config(env_id=evil, trainer=f"{runtimegen.USER_SCRIPT_MODULE}:{evil}",
                          trainer_kwargs={evil: [evil, {"k": evil}], "n": 1}, log_dir=evil)
    script = f"/tmp/{evil}/train.py"
    text = render_program(Composition(plan, config, plan.runtime_plan(), script))
    tree = ast.parse(text)
    assert all(line.startswith("#") or not line for line in header(text))
    # values round-trip through the literals
    call = assign(tree, "RUN_CONFIG")
    kw = {k.arg: k.value for k in call.keywords}
    assert ast.literal_eval(kw["env_id"]) == evil
    assert ast.literal_eval(kw["trainer"]) == config.trainer
    assert ast.literal_eval(kw["trainer_kwargs"]) == {evil: [evil, {"k": evil}], "n": 1}
    assert ast.literal_eval(kw["log_dir"]) == evil
    assert ast.literal_eval(assign(tree, "USER_SCRIPT")) == script
    plan_json = ast.literal_eval(assign(tree, "PLAN_JSON"))
    assert PlacementPlan.from_json(plan_json) == plan
    assert ast.literal_eval(assign(tree, "PLAN_HASH")) == plan.content_hash()
    # nothing but our own calls: no os.system, no eval/exec anywhere
    names = {n.attr if isinstance(n, ast.Attribute) else n.id for n in ast.walk(tree)
             if isinstance(n, (ast.Attribute, ast.Name))}
    assert not names & {"system", "eval", "exec", "__import__", "popen"}
    # the whole top level executes (imports, RunConfig) and the values are equal
    ns: dict = {"__name__": "generated"}
    exec(compile(text.replace("load_script_module(USER_SCRIPT,", "(lambda *a: None)(USER_SCRIPT,"),
                 "<generated>", "exec"), ns)
    assert ns["RUN_CONFIG"] == config and ns["RUNTIME_PLAN"] == plan.runtime_plan()
    with pytest.raises(SystemExit) as done:  # the program's --help shows the hostile defaults too
        build_parser(ns["RUN_CONFIG"], ns["PLAN_HASH"]).parse_args(["--help"])
    assert done.value.code == 0
    assert PlacementPlan.from_json(ns["PLAN_JSON"]).content_hash() == ns["PLAN_HASH"]


def test_trainer_defined_in_main(tmp_path, monkeypatch):
    import types

    good = tmp_path / "good.py"
    good.write_text("import x\nclass T: pass\nif __name__ == '__main__':\n    c = Composer()\n    plan = c.run()\n")
    fake = types.ModuleType("__main__")
    fake.__file__ = str(good)
    monkeypatch.setitem(sys.modules, "__main__", fake)
    cls = type("T", (), {"__module__": "__main__"})
    assert trainer_reference(cls) == (f"{runtimegen.USER_SCRIPT_MODULE}:T", str(good))
    bad = tmp_path / "bad.py"
    bad.write_text("class T: pass\ncomposer = Composer()\nplan = composer.run()\n")
    fake.__file__ = str(bad)
    with pytest.raises(InvalidValueError, match=r"calls Composer\(\.\.\.\) at top level \(line 2\).*__main__"):
        trainer_reference(cls)
    del fake.__file__
    with pytest.raises(InvalidValueError, match="without a script file.*move the class into a module"):
        trainer_reference(cls)


def test_composing_while_a_program_loads_the_script_is_refused(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("from pearl_core.composer import Composer\nComposer(None).run()\n")
    with pytest.raises(PearlError, match="was called while a generated program was importing"):
        runtimegen.load_script_module(str(script), "pearl_test_loaded_script")
    assert "pearl_test_loaded_script" not in sys.modules
    with pytest.raises(PearlError, match="is not there any more"):
        runtimegen.load_script_module(str(tmp_path / "gone.py"), "pearl_test_gone")


# ----------------------------------------------------------------------------- golden files
def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("PEARL_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} is missing; run with PEARL_UPDATE_GOLDEN=1 to create it"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, (f"generated program differs from {path}; if the change is intended, regenerate with "
                              "PEARL_UPDATE_GOLDEN=1 (see the module docstring) and review the diff")


def test_golden_builtin_trainer():
    plan = fixed_plan()
    text = render_program(Composition(plan, fixed_config(), plan.runtime_plan()))
    assert "    setting=Setting.COLOCATED,\n" in text  # the setting reads as its name
    _golden("runtime_dqn_cartpole.py", text)


def test_golden_trainer_in_users_script():
    plan = fixed_plan()
    config = fixed_config(trainer=f"{runtimegen.USER_SCRIPT_MODULE}:TinyDQN", trainer_kwargs={"hidden_sizes": [64]})
    text = render_program(Composition(plan, config, plan.runtime_plan(envs_per_actor=2), "/home/me/train.py"))
    _golden("runtime_user_script.py", text)


# ----------------------------------------------------------------------------- CLI
def test_compose_cli_writes_the_program(tmp_path):
    from pearl_core.cli import app

    out = tmp_path / "runtime.py"
    res = CliRunner().invoke(app, ["compose", "-H", str(THIS_MACHINE), "--no-profile", "-b", "64", "--hidden",
                                   "32,32", "--json", str(tmp_path / "plan.json"), "-o", str(out),
                                   "--max-env-steps", "5000", "--log-dir", "runs/x"])
    assert res.exit_code == 0, res.output
    assert "Choice:" in res.output and "program written to" in res.output
    text = out.read_text(encoding="utf-8")
    tree = ast.parse(text)
    kw = {k.arg: k.value for k in assign(tree, "RUN_CONFIG").keywords}
    assert ast.literal_eval(kw["trainer_kwargs"]) == {"hidden_sizes": [32, 32]}
    assert ast.literal_eval(kw["log_dir"]) == "runs/x"
    plan = PlacementPlan.from_json((tmp_path / "plan.json").read_text())
    assert ast.literal_eval(assign(tree, "PLAN_HASH")) == plan.content_hash()


@pytest.mark.parametrize("args, match", [
    (["--env", "Nope-v0"], "not a registered gymnasium environment"),
    (["--replay", "fancy"], "kind = 'fancy' is unknown"),
    (["--capacity", "-5"], "capacity = -5"),
    (["--trainer-kwargs", "[1]"], "expected a JSON object"),
    (["--trainer-kwargs", "{bad"], "not valid JSON"),
    (["--trainer", "pearl_core.algorithms:DDPG"], "does not fit 'CartPole-v1'"),
    (["--png", "/nonexistent/dir/grid.png"], "No such file or directory|grid"),
])
def test_compose_cli_errors_exit_2_and_leave_no_file(tmp_path, args, match):
    import re

    from pearl_core.cli import app

    out = tmp_path / "runtime.py"
    res = CliRunner().invoke(app, ["compose", "-H", str(THIS_MACHINE), "--no-profile", "-o", str(out), *args])
    assert res.exit_code == 2, res.output
    assert "error:" in res.output and re.search(match, " ".join(res.output.split())), res.output
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- the program runs
@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
def test_generated_program_trains_with_a_tiny_budget(tmp_path):
    c = cartpole()
    c.set_run(log_dir=str(tmp_path / "default-logs"))
    plan = c.run(profile=False)
    program = c.RuntimeGen(plan, tmp_path / "runtime.py")
    shown = subprocess.run([sys.executable, str(program), "--show-plan"], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert f"plan hash: {plan.content_hash()}" in shown.stdout and "warning" not in shown.stderr
    log_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, str(program), "--max-env-steps", "300", "--log-dir", str(log_dir),
                          "--quiet"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "stopped by max_env_steps" in out.stdout
    result = json.loads((log_dir / "result.json").read_text())
    assert result["plan_hash"] == plan.content_hash() and result["env_steps"] >= 300
    assert PlacementPlan.from_json(json.dumps(json.loads((log_dir / "composer_plan.json").read_text()))) == plan.plan
    assert (log_dir / "episodes.csv").exists() and not (tmp_path / "default-logs").exists()


@pytest.mark.slow
def test_program_with_a_trainer_from_the_users_script(tmp_path):
    script = tmp_path / "my_train.py"
    script.write_text(textwrap.dedent(f"""
        from pearl_core.algorithms import DQN
        from pearl_core.composer import Composer, RuntimeGen


        class TinyDQN(DQN):
            \"\"\"A user's trainer, defined in the script itself.\"\"\"


        if __name__ == "__main__":
            composer = Composer({str(THIS_MACHINE)!r})
            composer.set_actors("CartPole-v1", n_actors=1)
            composer.set_train_function(TinyDQN, batch_size=16, hidden_sizes=[16])
            composer.set_replay("uniform", capacity=2048)
            RuntimeGen(composer.run(profile=False), "runtime.py")
    """))
    made = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-3000:]
    text = (tmp_path / "runtime.py").read_text(encoding="utf-8")
    assert f"USER_SCRIPT = {str(script)!r}" in text and "'pearl_user_script:TinyDQN'" in text
    out = subprocess.run([sys.executable, "runtime.py", "--max-env-steps", "300", "--log-dir", "run", "--quiet"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "result.json").read_text())["env_steps"] >= 300
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".py") == ["my_train.py", "runtime.py"]


def test_composer_is_exported():
    import pearl_core
    from pearl_core.composer import __all__ as names

    assert {"Composer", "RuntimeGen", "ComposerError", "Composition", "PlacementPlan"} <= set(names)
    assert pearl_core.Composer is Composer and pearl_core.RuntimeGen is RuntimeGen
    assert api_module.RuntimeGen is RuntimeGen
    assert api_module.ComposerError is pearl_core.errors.ComposerError is ComposerError
    from pearl_core.composer import Plan  # the former name, for programs generated before the rename

    assert Plan is PlacementPlan


# ----------------------------------------------------------------------------- docs and example
def test_documented_listing_runs(tmp_path, monkeypatch):
    import re

    doc = (ROOT / "docs" / "composer.md").read_text(encoding="utf-8")
    listing = re.findall(r"```python\n(.*?)```", doc, flags=re.S)[0]
    example = (ROOT / "examples" / "dqn_cartpole.py").read_text(encoding="utf-8")
    assert len(example.splitlines()) < 30
    for line in listing.splitlines()[4:]:  # the doc's Listing 1 is the example's
        call = line.split("#")[0].strip()
        if call.startswith("composer.set_") or call.startswith("composer = "):
            assert call in example, call
    # No profiling in the test (it is the profiler's own tests' business); the plan is still real.
    monkeypatch.setattr("pearl_core.composer.profiling.profiler_for", lambda *a, **k: (lambda d, w: None))
    monkeypatch.chdir(tmp_path)
    exec(compile(listing, "composer.md", "exec"), {"__name__": "__main__"})
    text = (tmp_path / "runtime.py").read_text(encoding="utf-8")
    assert "eval_return=475.0" in text and "'hidden_sizes': [256, 256]" in text and "log_dir='runs/demo'" in text


@pytest.mark.slow
def test_example_composes_generates_and_trains(tmp_path):
    cmd = [sys.executable, str(ROOT / "examples" / "dqn_cartpole.py"), "--max-env-steps", "300",
           "--log-dir", str(tmp_path / "run"), "--quiet"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Choice:" in out.stdout and "stopped by max_env_steps" in out.stdout
    assert (tmp_path / "runs" / "demo" / "runtime.py").exists()
    assert json.loads((tmp_path / "run" / "result.json").read_text())["env_steps"] >= 300


def test_program_reports_a_missing_backend_and_exits_2(tmp_path):
    plan = fixed_plan()
    text = render_program(Composition(plan, fixed_config(log_dir=str(tmp_path / "logs"))))
    assert "BACKENDS = ('cpu',)" in text
    program = tmp_path / "runtime.py"
    program.write_text(text.replace("BACKENDS = ('cpu',)", "BACKENDS = ('nosuch',)"), encoding="utf-8")
    out = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert "error: no backend named 'nosuch'" in out.stderr and "Traceback" not in out.stderr
    assert "warning: PLAN_JSON differs" not in out.stderr and not (tmp_path / "logs").exists()


def test_compose_cli_continuous_env_uses_ddpg_hidden_sizes(tmp_path):
    from pearl_core.cli import app

    out = tmp_path / "runtime.py"
    res = CliRunner().invoke(app, ["compose", "-H", str(THIS_MACHINE), "--no-profile", "--env", "Pendulum-v1",
                                   "--hidden", "16,16", "--replay", "uniform", "-o", str(out)])
    assert res.exit_code == 0, res.output
    kw = {k.arg: k.value for k in assign(ast.parse(out.read_text(encoding="utf-8")), "RUN_CONFIG").keywords}
    assert ast.literal_eval(kw["trainer"]) == "pearl_core.algorithms.ddpg:DDPG"
    assert ast.literal_eval(kw["trainer_kwargs"]) == {"actor_hidden": [16, 16], "critic_hidden": [16, 16]}
