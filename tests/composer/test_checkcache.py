"""A warm compose builds no trainer and no installed environment (issue 41, point 8: <= 3 s warm).

:mod:`pearl_core.composer.checkcache` remembers what building the trainer taught the composer (the
check passed, the layers, the learner's preflight) under a fingerprint of the trainer's code, spaces,
kwargs and versions; :mod:`pearl_core.composer.spacecache` remembers the spaces of environments that
gymnasium or an installed family defines. These tests check what is remembered, that a change of code
makes the composer build again, and that a failure is never remembered.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest

from pearl_core.composer import Composer
from pearl_core.composer.api import ComposerError
from pearl_core.composer.checkcache import CACHE_FILE, fingerprint, remembered
from pearl_core.composer.spacecache import CACHE_FILE as SPACES_FILE, remembered_spaces
from pearl_core.composer.spec import HardwareSpec

ROOT = Path(__file__).resolve().parents[2]
THIS_MACHINE = ROOT / "examples" / "hardware" / "this-machine.toml"

TRAINERS = '''
from pearl_core.algorithms import DQN

BUILT = []


class CountingDQN(DQN):
    def __init__(self, *args, **kwargs):
        BUILT.append(1)
        super().__init__(*args, **kwargs)


class ScalarLossDQN(CountingDQN):
    def update_policy(self, *args, **kwargs):
        td = super().update_policy(*args, **kwargs)
        return td[:1]  # one number, not one per sample: the check refuses it
'''


@pytest.fixture
def trainers(tmp_path, monkeypatch):
    name = f"pearl_checkcache_{os.getpid()}_{tmp_path.name.replace('-', '_')}"
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(TRAINERS))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(name)
    yield module, path
    sys.modules.pop(name, None)


def compose(trainer: type, cache: Path) -> str:
    c = Composer(HardwareSpec.load(THIS_MACHINE), cache_dir=cache / "profiles")
    c.set_actors("CartPole-v1", n_actors=1)
    c.set_train_function(trainer, batch_size=32, hidden_sizes=(16,))
    c.set_replay("prioritized", capacity=1_000, fanout=4)
    return c.run(profile=False).plan.content_hash()


def test_a_warm_compose_builds_no_trainer_and_plans_the_same(trainers, tmp_path):
    module, _ = trainers
    cold = compose(module.CountingDQN, tmp_path)
    built_cold = len(module.BUILT)
    assert built_cold >= 2  # the check and the layers (and the learner's preflight) build it
    facts = json.loads((tmp_path / "profiles" / CACHE_FILE).read_text())
    assert {"checked", "layers", "learner"} <= {what for entry in facts.values() for what in entry}
    warm = compose(module.CountingDQN, tmp_path)
    assert len(module.BUILT) == built_cold, "a warm compose built the trainer again"
    assert warm == cold


def test_an_edited_trainer_is_built_again(trainers, tmp_path):
    module, path = trainers
    compose(module.CountingDQN, tmp_path)
    built = len(module.BUILT)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # what an edit of the file changes
    compose(module.CountingDQN, tmp_path)
    assert len(module.BUILT) > built


def test_a_failed_check_is_never_remembered(trainers, tmp_path):
    module, _ = trainers
    for attempt in range(2):
        before = len(module.BUILT)
        with pytest.raises(ComposerError, match="ScalarLossDQN"):
            compose(module.ScalarLossDQN, tmp_path)
        assert len(module.BUILT) > before, f"attempt {attempt}: the failing trainer was not built"
    facts = tmp_path / "profiles" / CACHE_FILE
    assert not facts.exists() or "checked" not in facts.read_text()


def test_a_damaged_facts_file_costs_a_build_and_nothing_else(trainers, tmp_path):
    module, _ = trainers
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / CACHE_FILE).write_text("{not json")
    compose(module.CountingDQN, tmp_path)
    assert json.loads((tmp_path / "profiles" / CACHE_FILE).read_text())  # rewritten whole


def test_classes_defined_in_a_function_are_never_remembered(tmp_path):
    from pearl_core.algorithms import DQN

    class Local(DQN):
        pass

    env = gym.make("CartPole-v1")
    spaces = (env.observation_space, env.action_space)
    with pytest.raises(ValueError, match="inside a function"):
        fingerprint(Local, spaces, {})
    calls = []
    for _ in range(2):
        assert remembered(tmp_path, Local, spaces, {}, "layers", lambda: calls.append(1) or [1]) == [1]
    assert len(calls) == 2


def test_the_fingerprint_follows_kwargs_and_spaces(trainers):
    module, _ = trainers
    a = gym.make("CartPole-v1")
    b = gym.make("MountainCar-v0")
    base = fingerprint(module.CountingDQN, (a.observation_space, a.action_space), {"lr": 1e-3})
    assert base == fingerprint(module.CountingDQN, (a.observation_space, a.action_space), {"lr": 1e-3})
    assert base != fingerprint(module.CountingDQN, (a.observation_space, a.action_space), {"lr": 2e-3})
    assert base != fingerprint(module.CountingDQN, (b.observation_space, b.action_space), {"lr": 1e-3})


# ------------------------------------------------------------------------------------------ spaces
def _counting(env_id: str, calls: list):
    def build():
        calls.append(env_id)
        env = gym.make(env_id)
        return env.observation_space, env.action_space

    return build


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "MountainCar-v0"])
def test_installed_env_spaces_are_remembered_exactly(tmp_path, env_id):
    calls: list = []
    built = remembered_spaces(tmp_path, env_id, None, None, _counting(env_id, calls))
    again = remembered_spaces(tmp_path, env_id, None, None, _counting(env_id, calls))
    assert calls == [env_id]
    assert again == built
    assert [type(s) for s in again] == [type(s) for s in built]
    assert again[0].dtype == built[0].dtype and (again[0].low == built[0].low).all()


def test_user_envs_and_wrappers_are_built_every_time(tmp_path):
    calls: list = []
    build = _counting("CartPole-v1", calls)
    remembered_spaces(tmp_path, "my_module:CartPole-v1", None, None, build)
    remembered_spaces(tmp_path, "my_module:CartPole-v1", None, None, build)
    remembered_spaces(tmp_path, "CartPole-v1", None, ["my_module:wrap"], build)
    remembered_spaces(tmp_path, "CartPole-v1", None, ["my_module:wrap"], build)
    assert len(calls) == 4
    assert not (tmp_path / SPACES_FILE).exists()


def test_kwargs_are_part_of_the_key_and_a_damaged_entry_is_rebuilt(tmp_path):
    calls: list = []
    remembered_spaces(tmp_path, "CartPole-v1", None, None, _counting("CartPole-v1", calls))
    remembered_spaces(tmp_path, "CartPole-v1", {"sutton_barto_reward": True}, None, _counting("CartPole-v1", calls))
    assert len(calls) == 2
    path = tmp_path / SPACES_FILE
    rows = json.loads(path.read_text())
    path.write_text(json.dumps({key: [{"kind": "Box"}, row[1]] for key, row in rows.items()}))  # damaged
    spaces = remembered_spaces(tmp_path, "CartPole-v1", None, None, _counting("CartPole-v1", calls))
    assert len(calls) == 3 and spaces[0].shape == (4,)
