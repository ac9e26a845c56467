"""A trainer path that is not a trainer (:func:`pearl_core.runtime.wiring.load_trainer_class`): refused with
the fix by the loader, ``pearl plan`` and every runtime, before anything starts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from run_kinds import DQN, RUNTIMES, good_config, make_runtime

from pearl_core.errors import SpecError

ROOT = Path(__file__).resolve().parents[2]
THIS_MACHINE = ROOT / "examples" / "hardware" / "this-machine.toml"


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
        load_trainer_class("builtins:len")  # not print: a test in the same worker may have patched it
    assert load_trainer_class("test_wiring_trainer_class:DuckTrainer") is DuckTrainer
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
