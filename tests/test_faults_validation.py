"""Nothing lost, nothing silent, part 1: validation at the edge, the machine check, and unclear errors.

Hostile values (found by a hostile user) must be refused where they enter, by
one shared set of validators (:mod:`pearl_core.validation`), with a message that
names the field, expected vs found, and the fix; never a raw ``TypeError``, a
late failure inside gymnasium, a ``MemoryError`` or a traceback from the CLI or
a generated program. No assertion depends on how fast anything happens.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

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
    Workload,
    make_plan,
)
from pearl_core.composer.runtimegen import USER_SCRIPT_MODULE, literal, render_program
from pearl_core.errors import InvalidValueError, SpecError
from pearl_core.runtime import ParallelRuntime, SerialRuntime
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria, check_field
from pearl_core.runtime.machine import ENVS_PER_CORE, check_machine, host_memory_bytes, row_bytes
from pearl_core.validation import MAX_SEED, MAX_THREADS

ROOT = Path(__file__).resolve().parents[1]
THIS_MACHINE = ROOT / "examples" / "hardware" / "this-machine.toml"
DQN = "pearl_core.algorithms:DQN"
RUNTIMES = ["serial", 1, 2]  # the serial runtime, and ParallelRuntime with RuntimePlan(setting=1) / setting=2


def good_config(tmp_path=None, **kw) -> RunConfig:
    values = dict(env_id="CartPole-v1", trainer=DQN, trainer_kwargs={"hidden_sizes": [16]}, batch_size=16,
                  learning_starts=32, replay=ReplayConfig(capacity=512), stop=StopCriteria(max_env_steps=200),
                  log_dir=str(tmp_path / "run") if tmp_path is not None else "runs/pearl")
    values.update(kw)
    return RunConfig(**values)


def make_runtime(kind, config: RunConfig):
    opts = dict(progress=False, plot=False, tensorboard=False)
    if kind == "serial":
        return SerialRuntime(config, **opts)
    plan = RuntimePlan(setting=kind, n_actors=1, envs_per_actor=2, insert_batch=8, queue_size=4)
    return ParallelRuntime(config, plan, **opts)


# ============================================================================ 1. validation at the edge
NAN, INF = float("nan"), float("inf")
HOSTILE_FIELDS = [
    # (class, field, value, what the message must say)
    (RunConfig, "checkpoint_every", 0, r"checkpoint_every = 0 is invalid; expected an int >= 1.*0 would mean never"),
    (RunConfig, "checkpoint_every", -10, r"checkpoint_every = -10 is invalid; expected an int >= 1"),
    (RunConfig, "checkpoint_every", 2.5, r"checkpoint_every = 2.5 is invalid.*found a float"),
    (RunConfig, "seed", -1, r"seed = -1 is invalid; expected an int >= 0 and <= 4,294,967,295"),
    (RunConfig, "seed", 1.5, r"seed = 1.5 is invalid.*found a float"),
    (RunConfig, "seed", 2**64, r"seed = 18446744073709551616 is invalid"),
    (RunConfig, "seed", True, r"seed = True is invalid.*found a bool"),
    (RunConfig, "seed", "0", r"seed = '0' is invalid.*found a str"),
    (RunConfig, "batch_size", 10**12, r"batch_size = 1000000000000 is invalid; expected an int >= 1 and <= 16,777,216"),
    (RunConfig, "batch_size", "64", r"batch_size = '64' is invalid.*found a str"),
    (RunConfig, "batch_size", 64.0, r"batch_size = 64.0 is invalid.*found a float"),
    (RunConfig, "learning_starts", None, r"learning_starts = None is invalid.*found a NoneType"),
    (RunConfig, "replay_ratio", "0.5", r"replay_ratio = '0.5' is invalid; expected a finite number.*found a str"),
    (RunConfig, "replay_ratio", NAN, r"replay_ratio = nan is invalid.*not finite"),
    (RunConfig, "replay_ratio", 1e-300, r"replay_ratio = 1e-300 is invalid; expected a finite number >= 1e-06"),
    (RunConfig, "train_every", [256], r"train_every = \[256\] is invalid.*found a list"),
    (RunConfig, "weight_sync_every", 0, r"weight_sync_every = 0 is invalid; expected an int >= 1"),
    (RunConfig, "env_id", 7, r"env_id = 7 is invalid; expected a gymnasium id.*found an int"),
    (RunConfig, "env_id", "  ", r"env_id = '  ' is invalid; expected a gymnasium id"),
    (RunConfig, "trainer", None, r"trainer = None is invalid; expected an import path"),
    (RunConfig, "trainer", "pearl_core.algorithms", r"trainer = 'pearl_core.algorithms' is invalid; expected an "
                                                    r"import path 'package.module:ClassName'"),
    (RunConfig, "trainer_kwargs", [1, 2], r"trainer_kwargs = \[1, 2\] is invalid; expected a mapping"),
    (RunConfig, "trainer_kwargs", {1: 2}, r"trainer_kwargs = \{1: 2\} is invalid; expected a mapping with str keys"),
    (RunConfig, "trainer_kwargs", {"lr": NAN}, r"trainer_kwargs = \{'lr': nan\} is invalid; expected finite JSON"),
    (RunConfig, "trainer_kwargs", {"net": object()}, r"trainer_kwargs = .* is invalid; expected finite JSON values"),
    (RunConfig, "log_dir", 5, r"log_dir = 5 is invalid; expected a path.*found an int"),
    (RunConfig, "log_dir", "", r"log_dir = '' is invalid; expected a path that is not empty"),
    (RunConfig, "save_replay", 1, r"save_replay = 1 is invalid; expected True or False.*found an int"),
    (RunConfig, "on_nonfinite", "skip", r"on_nonfinite = 'skip' is unknown; expected 'stop' or 'drop'"),
    (RunConfig, "on_nonfinite", 3, r"on_nonfinite = 3 is invalid.*found an int"),
    (RunConfig, "replay", 5, r"RunConfig.replay = 5 is invalid; expected a ReplayConfig.*found an int"),
    (RunConfig, "stop", "never", r"RunConfig.stop = 'never' is invalid; expected a StopCriteria.*found a str"),
    (ReplayConfig, "alpha", INF, r"ReplayConfig.alpha = inf is invalid; expected a finite number >= 0 \(not finite\)"),
    (ReplayConfig, "alpha", NAN, r"ReplayConfig.alpha = nan is invalid"),
    (ReplayConfig, "alpha", "0.6", r"ReplayConfig.alpha = '0.6' is invalid.*found a str"),
    (ReplayConfig, "beta", NAN, r"ReplayConfig.beta = nan is invalid; expected a finite number >= 0 and <= 1"),
    (ReplayConfig, "beta_final", 1.5, r"ReplayConfig.beta_final = 1.5 is invalid"),
    (ReplayConfig, "eps", 0.0, r"ReplayConfig.eps = 0.0 is invalid; expected a finite number > 0"),
    (ReplayConfig, "capacity", 10**15, r"ReplayConfig.capacity = 1000000000000000 is invalid; expected an int >= 1 "
                                      r"and <= 1,099,511,627,776"),
    (ReplayConfig, "capacity", 1e5, r"ReplayConfig.capacity = 100000.0 is invalid.*found a float"),
    (ReplayConfig, "fanout", 1, r"ReplayConfig.fanout = 1 is invalid; expected an int >= 2"),
    (ReplayConfig, "kind", "priority", r"ReplayConfig.kind = 'priority' is unknown.*did you mean 'prioritized'"),
    (ReplayConfig, "beta_steps", 0, r"ReplayConfig.beta_steps = 0 is invalid"),
    (ReplayConfig, "stratified", "yes", r"ReplayConfig.stratified = 'yes' is invalid; expected True or False"),
    (StopCriteria, "eval_return", NAN, r"StopCriteria.eval_return = nan is invalid; expected a finite number"),
    (StopCriteria, "mean_return", -INF, r"StopCriteria.mean_return = -inf is invalid"),
    (StopCriteria, "mean_return", "475", r"StopCriteria.mean_return = '475' is invalid.*found a str"),
    (StopCriteria, "max_wall_time_s", INF, r"StopCriteria.max_wall_time_s = inf is invalid"),
    (StopCriteria, "max_env_steps", 1e5, r"StopCriteria.max_env_steps = 100000.0 is invalid.*found a float"),
    (StopCriteria, "window", "20", r"StopCriteria.window = '20' is invalid.*found a str"),
    (StopCriteria, "eval_episodes", 10**6, r"StopCriteria.eval_episodes = 1000000 is invalid; expected an int >= 1 "
                                           r"and <= 10,000"),
    (RuntimePlan, "n_actors", 10**6, r"RuntimePlan.n_actors = 1000000 is invalid; expected an int >= 1 and <= 16,384"),
    (RuntimePlan, "learner_threads", 10**18, r"RuntimePlan.learner_threads = 1000000000000000000 is invalid; "
                                             r"expected an int >= 1 and <= 4,096"),
    (RuntimePlan, "envs_per_actor", "2", r"RuntimePlan.envs_per_actor = '2' is invalid.*found a str"),
]


def _build(cls, field, value):
    if cls is RunConfig:
        return good_config(**{field: value})
    base = {"max_env_steps": 100} if cls is StopCriteria else {}
    return cls(**{**base, field: value})


@pytest.mark.parametrize("cls, field, value, match", HOSTILE_FIELDS,
                         ids=[f"{c.__name__}.{f}={v!r:.20}" for c, f, v, _ in HOSTILE_FIELDS])
def test_config_refuses_hostile_values_with_a_clear_error(cls, field, value, match):
    with pytest.raises(SpecError, match=match) as info:
        _build(cls, field, value)
    message = str(info.value)
    assert "Fix:" in message and "expected" in message  # what was expected, and the fix
    assert type(info.value) is SpecError  # never a raw TypeError/ValueError from inside a check


def test_stop_criteria_without_any_criterion_is_refused():
    with pytest.raises(SpecError, match=r"no criterion is set, so the run would never end.*Fix: e.g."):
        StopCriteria()


def test_config_accepts_and_normalises_numpy_scalars():
    config = good_config(batch_size=np.int64(32), seed=np.uint32(7), replay_ratio=np.float32(0.25),
                         replay=ReplayConfig(capacity=np.int32(1024), alpha=np.float64(0.5)))
    assert type(config.batch_size) is int and type(config.seed) is int and type(config.replay.capacity) is int
    assert type(config.replay_ratio) is float and type(config.replay.alpha) is float
    assert RunConfig.from_json(config.to_json()) == config  # a plain-JSON round trip
    literal(config.to_dict())  # and plain literals for a generated program


def test_largest_counts_and_seed_are_accepted():
    config = good_config(seed=MAX_SEED, stop=StopCriteria(max_env_steps=2**62), checkpoint_every=2**62)
    assert config.seed == 2**32 - 1
    with pytest.raises(SpecError, match=r"max_env_steps = 4611686018427387905 is invalid; expected an int >= 1 and "
                                        r"<= 2\*\*62"):
        StopCriteria(max_env_steps=2**62 + 1)


@pytest.mark.parametrize("data, match", [
    (5, r"RunConfig.from_dict: expected a mapping of field names to values; found a value of type int"),
    ({"env_id": "CartPole-v1"}, r"RunConfig: missing field\(s\) \['trainer'\]"),
    ({"env_id": "CartPole-v1", "trainer": DQN, "checkpoint_every": 0}, r"checkpoint_every = 0 is invalid"),
    ({"env_id": "CartPole-v1", "trainer": DQN, "replay": {"alpha": "x"}}, r"ReplayConfig.alpha = 'x' is invalid"),
    ({"env_id": "CartPole-v1", "trainer": DQN, "stop": {}}, r"no criterion is set"),
    ({"env_id": "CartPole-v1", "trainer": DQN, "bogus": 1}, r"unknown field\(s\) \['bogus'\]"),
])
def test_from_dict_refuses_bad_input_with_a_spec_error(data, match):
    with pytest.raises(SpecError, match=match):
        RunConfig.from_dict(data)


def test_from_json_refuses_text_that_is_not_json():
    with pytest.raises(SpecError, match=r"RunConfig.from_json: not valid JSON"):
        RunConfig.from_json("{not json")
    with pytest.raises(SpecError, match=r"StopCriteria.from_json: not valid JSON"):
        StopCriteria.from_json(b"\xff")


def test_a_bad_value_in_an_edited_config_file_is_refused_when_read(tmp_path):
    """A config read back from JSON (an edited config.json) is refused before any runtime can be built from it."""
    text = json.dumps({**good_config(tmp_path).to_dict(), "seed": -3})
    with pytest.raises(SpecError, match=r"RunConfig.seed = -3 is invalid; expected an int >= 0"):
        RunConfig.from_json(text)


@pytest.mark.parametrize("kind", RUNTIMES)
def test_the_largest_valid_seed_runs_on_every_runtime(tmp_path, kind, no_leaks):
    """The seed bound is one every layer accepts: gymnasium, numpy and torch get seed, seed + i and eval seeds."""
    config = good_config(tmp_path, seed=MAX_SEED,
                         stop=StopCriteria(max_env_steps=200, eval_return=1e9, eval_every=100, eval_episodes=2))
    result = make_runtime(kind, config).run()
    assert result.stop_reason == "max_env_steps" and result.env_steps >= 200
    for bad in (MAX_SEED + 1, -1):
        with pytest.raises(SpecError, match=rf"seed = {bad} is invalid"):
            dataclasses.replace(config, seed=bad)


# ------------------------------------------------------------------ the Composer's setters use the same rules
def composer() -> Composer:
    return Composer(HardwareSpec.load(THIS_MACHINE))


SETTER_CASES = [
    # (setter, kwargs, the config field whose rule applies, its value)
    ("set_run", {"checkpoint_every": 0}, ("RunConfig", "checkpoint_every")),
    ("set_run", {"checkpoint_every": -10}, ("RunConfig", "checkpoint_every")),
    ("set_run", {"seed": 2**40}, ("RunConfig", "seed")),
    ("set_run", {"seed": 0.5}, ("RunConfig", "seed")),
    ("set_run", {"log_dir": 3}, ("RunConfig", "log_dir")),
    ("set_run", {"save_replay": "no"}, ("RunConfig", "save_replay")),
    ("set_stop", {"eval_return": NAN}, ("StopCriteria", "eval_return")),
    ("set_stop", {"max_env_steps": 100, "eval_episodes": 10**6}, ("StopCriteria", "eval_episodes")),
    ("set_stop", {"max_wall_time_s": "10"}, ("StopCriteria", "max_wall_time_s")),
    ("set_replay", {"kind": "prioritized", "alpha": INF}, ("ReplayConfig", "alpha")),
    ("set_replay", {"kind": "prioritized", "capacity": "1e5"}, ("ReplayConfig", "capacity")),
    ("set_replay", {"kind": "prioritized", "capacity": 10**15}, ("ReplayConfig", "capacity")),
    ("set_replay", {"kind": 3}, ("ReplayConfig", "kind")),
    ("set_actors", {"env_id": "CartPole-v1", "n_actors": 10**6}, ("RuntimePlan", "n_actors")),
    ("set_actors", {"env_id": 12}, ("RunConfig", "env_id")),
    ("set_train_function", {"trainer": DQN, "batch_size": 10**12}, ("RunConfig", "batch_size")),
    ("set_train_function", {"trainer": DQN, "replay_ratio": "0.5"}, ("RunConfig", "replay_ratio")),
    ("set_train_function", {"trainer": DQN, "learning_starts": -1}, ("RunConfig", "learning_starts")),
]


@pytest.mark.parametrize("setter, kwargs, rule", SETTER_CASES, ids=[f"{s}{k}" for s, k, _ in SETTER_CASES])
def test_composer_setters_refuse_what_the_config_refuses_and_change_nothing(setter, kwargs, rule):
    c = composer()
    if setter == "set_train_function":
        c.set_actors("CartPole-v1")
    before = dict(vars(c))
    value = kwargs[rule[1]]
    with pytest.raises(SpecError) as config_error:
        check_field(*rule, value)
    with pytest.raises(ComposerError) as info:
        getattr(c, setter)(**kwargs)
    message = str(info.value)
    assert message.startswith(f"Composer.{setter}: {rule[1]} = ")
    # one rule, one message: the Composer's text is the config's, under the setter's name
    assert message.split(" = ", 1)[1] == str(config_error.value).split(" = ", 1)[1]
    assert vars(c) == before  # a rejected call changes nothing


def test_validated_values_reach_the_run_config_normalised():
    c = composer().set_actors("CartPole-v1", n_actors=np.int64(1))
    c.set_train_function(DQN, batch_size=np.int32(32), replay_ratio=np.float64(0.5), hidden_sizes=(16,))
    c.set_replay("prioritized", capacity=np.int64(4096), fanout=8, alpha=np.float32(0.5))
    c.set_run(seed=np.uint8(3), log_dir=Path("runs") / "demo")
    config = c.run_config()
    assert config.batch_size == 32 and type(config.batch_size) is int
    assert config.seed == 3 and config.log_dir == os.path.join("runs", "demo")
    assert type(config.replay.capacity) is int and type(config.replay.alpha) is float


# ============================================================================ 2. the machine check
def plan_for(setting: int, **kw) -> RuntimePlan:
    return RuntimePlan(setting=setting, **{"n_actors": 1, "envs_per_actor": 2, "insert_batch": 8, "queue_size": 4,
                                           **kw})


@pytest.mark.parametrize("setting", [1, 2])
def test_check_machine_accepts_a_plan_that_fits(tmp_path, setting):
    assert check_machine(good_config(tmp_path), plan_for(setting)) is None


@pytest.mark.parametrize("setting", [1, 2])
def test_check_machine_refuses_a_batch_larger_than_the_replay(tmp_path, setting):
    config = good_config(tmp_path, batch_size=1024, replay=ReplayConfig(capacity=512))
    with pytest.raises(SpecError, match=r"batch_size = 1,024 is larger than the replay's capacity = 512; expected "
                                        r"batch_size <= capacity.*Fix: a smaller batch_size or ReplayConfig\(capacity "
                                        r">= 1,024\)"):
        check_machine(config, plan_for(setting))


@pytest.mark.parametrize("setting", [1, 2])
def test_check_machine_refuses_far_more_environments_than_cores(tmp_path, setting):
    config = good_config(tmp_path)
    plan = plan_for(setting, n_actors=100, envs_per_actor=3)
    with pytest.raises(SpecError, match=rf"n_actors \* envs_per_actor = 100 \* 3 = 300 environments is far beyond "
                                        rf"this machine's 2 core\(s\); expected at most {ENVS_PER_CORE} per core "
                                        rf"\(128\)\. Fix: about one actor per core"):
        check_machine(config, plan, cores=2)
    assert check_machine(config, plan, cores=8) is None  # the same plan fits a bigger machine


@pytest.mark.parametrize("setting", [1, 2])
def test_check_machine_refuses_a_replay_beyond_the_available_memory(tmp_path, setting):
    config = good_config(tmp_path, replay=ReplayConfig(capacity=50_000_000))  # 49 B/row: 2.3 GiB + the tree
    with pytest.raises(SpecError, match=r"this run needs about [0-9.]+ GiB of host memory \(Data Storage 2\.28 GiB, "
                                        r"sum tree [0-9.]+ MiB, .*49 bytes per transition of 'CartPole-v1'\) but "
                                        r"1\.00 GiB is available.*Fix: a smaller replay capacity \(about [0-9,]+ would "
                                        r"fill the memory free now\)"):
        check_machine(config, plan_for(setting), memory_bytes=2**30)
    assert check_machine(config, plan_for(setting), memory_bytes=2**34) is None


def test_host_memory_counts_only_what_lives_in_host_memory():
    config = good_config(replay=ReplayConfig(capacity=1000))
    host = host_memory_bytes(config, RuntimePlan(), 45)
    assert host["Data Storage"] == 45_000 and host["sum tree"] > 16_000
    on_device = host_memory_bytes(config, RuntimePlan(storage_device="cuda:0", rm_backend="cuda",
                                                      learner_device="cuda:0"), 45)
    assert on_device["Data Storage"] == 0 and on_device["sum tree"] == 0
    uniform = host_memory_bytes(good_config(replay=ReplayConfig("uniform", capacity=1000)), RuntimePlan(), 45)
    assert uniform["sum tree"] == 0
    assert row_bytes("CartPole-v1") == 4 * 4 * 2 + 8 + 4 + 1 + 4  # obs, next_obs (float32 x4), action, reward,
    #                                                                done, steps


def test_check_machine_refuses_a_log_dir_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(SpecError, match=r"log_dir = .*a-file/run'.*is a file, not a directory.*Fix: choose another"):
        check_machine(good_config(log_dir=str(blocker / "run")), plan_for(1))
    with pytest.raises(SpecError, match=r"expected a path without a NUL byte"):
        check_machine(good_config(log_dir="runs/\x00x"), plan_for(2))
    assert blocker.read_text() == "x" and not (tmp_path / "run").exists()  # nothing was written


def test_check_machine_needs_a_config_and_a_plan():
    with pytest.raises(SpecError, match=r"check_machine needs a RunConfig and a RuntimePlan; found dict"):
        check_machine({}, RuntimePlan())  # type: ignore[arg-type]


# ============================================================================ 3. unclear errors
# ------------------------------------------------------------------ huge sum trees
def _tree_classes():
    from pearl_core.testing.reference import ReferenceSumTree

    out = [ReferenceSumTree]
    try:
        from pearl_cpu.sumtree import CpuSumTree
    except ImportError:  # pragma: no cover - the CPU plugin is installed in the dev environment
        return out
    return out + [CpuSumTree]


@pytest.mark.parametrize("cls", _tree_classes(), ids=lambda c: c.__name__)
@pytest.mark.parametrize("capacity", [10**15, 2**64, 10**30])
def test_a_sum_tree_that_cannot_fit_is_refused_before_allocating(cls, capacity):
    with pytest.raises(InvalidValueError, match=r"sum tree capacity") as info:
        cls(capacity, 16)
    assert "Fix:" in str(info.value) and "capacity" in str(info.value)
    assert not isinstance(info.value, (MemoryError, TypeError))


@pytest.mark.parametrize("cls", _tree_classes(), ids=lambda c: c.__name__)
def test_the_tree_size_is_checked_against_the_free_memory(cls, monkeypatch):
    import pearl_core.sumtree as sumtree

    monkeypatch.setattr(sumtree, "memory_available_bytes", lambda: 100 * 2**20)
    monkeypatch.setattr(sumtree, "memory_total_bytes", lambda: 200 * 2**20)
    with pytest.raises(InvalidValueError, match=r"sum tree capacity = 16,777,216 \(fanout 16\) needs [0-9.]+ GiB of "
                                                r"memory; this machine has 0\.10 GiB available \(0\.20 GiB in all\), "
                                                r"so nothing was allocated\. Fix: use a smaller replay capacity"):
        cls(2**24, 16)
    assert cls(2**16, 16).capacity == 2**16  # small trees are not even measured


def test_the_cpu_trees_size_is_known_before_it_is_built():
    cpu = pytest.importorskip("pearl_cpu.sumtree")
    rng = random.Random(0)
    cases = [(1, 2), (7, 3), (1000, 16), (10**6, 2), (37, 10**12), (2**20, 5)]
    cases += [(rng.randint(1, 100_000), rng.randint(2, 3000)) for _ in range(50)]
    for capacity, fanout in cases:
        assert cpu.native_bytes(capacity, fanout) == cpu.CpuSumTree(capacity, fanout).memory_bytes, (capacity, fanout)
    with pytest.raises(InvalidValueError, match=r"fanout = 1,099,511,627,776 is too wide for the CPU tree.*Fix"):
        cpu.CpuSumTree(2**40, 2**40)


# ------------------------------------------------------------------ absurd core counts
SPEC = """
name = "absurd"
[[device]]
name = "cpu0"
kind = "cpu"
cores = {cores}
memory_GiB = 16
idle_power_W = 10
active_power_W = 50
mem_bandwidth_GBps = 10
"""


@pytest.mark.parametrize("key, value", [("cores", 10**18), ("cores", MAX_THREADS + 1), ("threads", 10**18)])
def test_absurd_core_counts_are_refused_by_the_spec(key, value):
    text = SPEC.format(cores=value) if key == "cores" else SPEC.format(cores=2) + f"threads = {value}\n"
    with pytest.raises(SpecError, match=rf"{key} = {value} is invalid; expected an integer >= 1 and <= 4096"):
        HardwareSpec.from_toml(text)
    with pytest.raises(SpecError, match=rf"{key} = {value} is invalid"):
        DeviceSpec("cpu0", "cpu", 2**30, 1, 2, **({"cores": value} if key == "cores" else {"cores": 2, key: value}))


def test_pearl_plan_with_absurd_cores_prints_an_error_and_exits_2(tmp_path):
    from pearl_core.cli import app

    spec = tmp_path / "absurd.toml"
    spec.write_text(SPEC.format(cores=10**18))
    res = CliRunner().invoke(app, ["plan", "-H", str(spec)])
    assert res.exit_code == 2, res.output
    assert "error:" in res.output and "cores = 1000000000000000000 is invalid" in res.output
    assert "Traceback" not in res.output


def test_the_widest_valid_cpu_is_planned_without_a_linear_loop():
    """4096 threads: the co-located split is found as if every split were tried, in O(bs + log threads) evaluations."""
    from pearl_core.composer.analytic import cpu_row

    wl = Workload(batch_size=64, obs_bytes=16, action_bytes=8, n_actors=1, insert_batch=2,
                  layers=_layers(), env_id="CartPole-v1", capacity=100_000, fanout=16)
    dev = DeviceSpec("big", "cpu", 2**40, 100, 800, cores=MAX_THREADS, threads=MAX_THREADS)
    row = cpu_row(dev, wl, is_host=True)
    assert row.config["co_learner_threads"] + row.config["co_rm_threads"] <= MAX_THREADS - 1
    small = cpu_row(DeviceSpec("small", "cpu", 2**34, 10, 65, cores=8, threads=8), wl, is_host=True)
    assert small.config["co_rm_threads"] >= 1


def _brute_force_split(avail, bs, rm, learn):
    best = None
    for t_l in range(1, avail):
        t_r = max(1, min(avail - t_l, bs))
        cs, cu, cn = rm(t_r)
        cl = learn(t_l)
        total = cs + max(cu + cn, cl)
        if best is None or total < best[0]:
            best = (total, t_l, t_r, (cs, cu, cn), cl)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_the_fast_split_search_equals_trying_every_split(seed):
    from pearl_core.composer.analytic import _best_split

    rng = random.Random(seed)
    avail, bs = rng.randint(2, 300), rng.randint(1, 80)
    plateau = rng.randint(1, avail)  # the learner stops getting faster past some thread count (a tie region)
    scale = rng.choice([1e-6, 1e-3, 1.0])

    def rm(t):
        return (scale * (3 + 50 / t), scale * (1 + 20 / t), scale * (2 + 10 / t))

    def learn(t):
        return scale * (5 + 400 / min(t, plateau))

    assert _best_split(avail, bs, rm, learn) == _brute_force_split(avail, bs, rm, learn)


def test_host_tuning_reads_only_the_profiled_thread_counts():
    from pearl_core.composer.matrix import CostCell, DeviceCosts, DeviceRow
    from pearl_core.composer.spec import DeviceSpec
    from pearl_core.composer.tuning import host_variants
    from pearl_core.composer.workload import Workload

    cell = CostCell(1e-4, 1.0, "profiled")
    row = DeviceRow("c", "cpu", cell, cell, cell, cell, costs=DeviceCosts(1e-5, 1e-5, ((1, 0.01), (2, 0.008))))
    wl = Workload(batch_size=8, obs_bytes=16, action_bytes=8)
    big = DeviceSpec("c", "cpu", 2**30, 1.0, 2.0, cores=4096)  # the spec's count bounds only what was measured
    assert sorted({v.learner_threads for v in host_variants(big, row, wl)}) == [1, 2]
    two = DeviceSpec("c", "cpu", 2**30, 1.0, 2.0, cores=2)  # one actor leaves one core
    assert {v.learner_threads for v in host_variants(two, row, wl)} == {1}


def _layers():
    from pearl_core.composer import LearnerLayer

    return (LearnerLayer("q_net.0", "linear", 4, 64, 256, 320, True, "q_net"),
            LearnerLayer("q_net.2", "linear", 64, 2, 128, 130, True, "q_net"))


# ------------------------------------------------------------------ a trainer path that is not a trainer
class DuckTrainer:
    """Not a Trainer subclass, but with the trainer methods: the duck-typed contract check_trainer accepts."""

    def get_action(self, obs, explore):  # pragma: no cover - never run here
        raise NotImplementedError

    def update_policy(self, batch, weights):  # pragma: no cover
        raise NotImplementedError

    def get_weights(self):  # pragma: no cover
        raise NotImplementedError

    def set_weights(self, weights):  # pragma: no cover
        raise NotImplementedError


def test_load_trainer_class_refuses_a_class_that_is_not_a_trainer():
    from pearl_core.runtime.wiring import load_trainer_class

    with pytest.raises(SpecError, match=r"'builtins:dict' names the class builtins.dict, which is not a trainer: "
                                        r"expected a pearl_core.trainer.Trainer subclass.*it lacks \['get_action', "
                                        r"'update_policy', 'get_weights', 'set_weights'\]\. Fix:"):
        load_trainer_class("builtins:dict")
    with pytest.raises(SpecError, match=r"names a builtin_function_or_method, not a class"):
        load_trainer_class("builtins:print")
    assert load_trainer_class("test_faults_validation:DuckTrainer") is DuckTrainer
    assert load_trainer_class(DQN).__name__ == "DQN"


@pytest.mark.parametrize("trainer", ["builtins:print", "builtins:dict", "json:JSONDecoder"])
def test_pearl_plan_with_a_trainer_that_is_not_one_prints_an_error_and_exits_2(trainer):
    from pearl_core.cli import app

    res = CliRunner().invoke(app, ["plan", "-H", str(THIS_MACHINE), "--trainer", trainer])
    assert res.exit_code == 2, res.output
    assert "error:" in res.output and trainer in res.output
    assert "Traceback" not in res.output and "Box(" not in res.output  # print(obs_space, act_space) never ran


@pytest.mark.parametrize("kind", RUNTIMES)
def test_a_run_with_a_trainer_that_is_not_one_starts_nothing(tmp_path, kind, no_leaks):
    runtime = make_runtime(kind, good_config(tmp_path, trainer="builtins:dict", trainer_kwargs={}))
    with pytest.raises(SpecError, match=r"'builtins:dict' names the class builtins.dict, which is not a trainer"):
        runtime.run()


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


def test_validators_never_leak_a_raw_type_error():
    from pearl_core import validation as v

    class Weird:
        def __index__(self):
            raise TypeError("no")

        def __fspath__(self):
            raise TypeError("no")

    rules = {"int": lambda x: v.int_at_least(x, "f", 0), "number": lambda x: v.number(x, "f"),
             "probability": lambda x: v.probability(x, "f"), "bool": lambda x: v.boolean(x, "f"),
             "one_of": lambda x: v.one_of(x, "f", ("a", "b")), "text": lambda x: v.text(x, "f"),
             "path": lambda x: v.path(x, "f"), "seed": lambda x: v.seed(x, "f")}
    for value in (Weird(), object(), None, [1], {1: 2}, 1 + 2j, b"1"):  # the wrong type for every rule
        for name, rule in rules.items():
            with pytest.raises(SpecError, match=r"^f = .* is invalid; expected .*\(found an? \w+\)") as info:
                rule(value)
            assert type(info.value) is SpecError, name
    for name in ("int", "number", "probability", "bool", "seed"):  # a str is the wrong type for these
        with pytest.raises(SpecError, match=r"\(found a str\)"):
            rules[name]("1")
    with pytest.raises(SpecError, match=r"f = 1000000.* is invalid; expected a finite number \(too large\)"):
        v.number(10**400, "f")  # too large for a float: refused, not an OverflowError
    with pytest.raises(SpecError, match=r"f = 'c' is unknown; expected 'a' or 'b'"):
        rules["one_of"]("c")
    assert rules["text"]("x") == "x" and rules["path"](Path("p")) == "p" and rules["number"](2) == 2
