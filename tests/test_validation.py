"""Validation at the edge (:mod:`pearl_core.validation`): hostile values are refused where they enter.

One shared set of validators, used by the run config and the Composer's setters, with a message that names
the field, expected vs found, and the fix; never a raw ``TypeError``, a late failure inside gymnasium or a
``MemoryError``. No assertion depends on how fast anything happens.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest

from run_kinds import DQN, RUNTIMES, good_config, make_runtime

from pearl_core.composer import (
    Composer,
    ComposerError,
    HardwareSpec,
)
from pearl_core.composer.runtimegen import literal
from pearl_core.errors import SpecError
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria, check_field
from pearl_core.validation import MAX_SEED

ROOT = Path(__file__).resolve().parents[1]
THIS_MACHINE = ROOT / "examples" / "hardware" / "this-machine.toml"


# ============================================================================ validation at the edge
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
