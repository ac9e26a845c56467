"""The calibration runs' window and rounds: defaults, the environment overrides, bad values, the cache key.

The composer owns them (``pearl_core.composer.calibrate``); the CPU backend only measures what it is asked."""

import pytest

from pearl_core.composer.calibrate import (CALIBRATE_BUDGET_S, CALIBRATE_MAX_UPDATES, CALIBRATE_ROUNDS,
                                           CALIBRATE_WINDOW_S, CELL_BUDGET_S, calibration_settings, calibration_setup)
from pearl_core.errors import InvalidOptionError


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("PEARL_CALIBRATE_WINDOW_S", raising=False)
    monkeypatch.delenv("PEARL_CALIBRATE_ROUNDS", raising=False)
    return monkeypatch


def test_defaults_when_unset(clean_env):
    assert calibration_setup() == (CALIBRATE_WINDOW_S, CALIBRATE_ROUNDS) == (3.0, 3)


def test_environment_overrides_each_value(clean_env):
    clean_env.setenv("PEARL_CALIBRATE_WINDOW_S", " 1.5 ")
    assert calibration_setup() == (1.5, CALIBRATE_ROUNDS)
    clean_env.setenv("PEARL_CALIBRATE_ROUNDS", "5")
    assert calibration_setup() == (1.5, 5)
    clean_env.setenv("PEARL_CALIBRATE_WINDOW_S", "")  # empty: the default
    assert calibration_setup() == (CALIBRATE_WINDOW_S, 5)


@pytest.mark.parametrize("name, value", [("PEARL_CALIBRATE_WINDOW_S", "0"), ("PEARL_CALIBRATE_WINDOW_S", "-2"),
                                         ("PEARL_CALIBRATE_WINDOW_S", "nan"), ("PEARL_CALIBRATE_WINDOW_S", "3s"),
                                         ("PEARL_CALIBRATE_ROUNDS", "0"), ("PEARL_CALIBRATE_ROUNDS", "2.5"),
                                         ("PEARL_CALIBRATE_ROUNDS", "-1"), ("PEARL_CALIBRATE_ROUNDS", "two")])
def test_a_bad_value_says_what_was_found_and_the_fix(clean_env, name, value):
    clean_env.setenv(name, value)
    with pytest.raises(InvalidOptionError) as err:
        calibration_setup()
    assert f"{name}={value!r}" in str(err.value) and "Fix:" in str(err.value)
    with pytest.raises(InvalidOptionError):  # the cache key reads them too: no profile under a bad value
        calibration_settings()


def test_the_values_are_part_of_the_profile_cache_key(clean_env):
    default = calibration_settings()
    assert default == {"calibrate_window_s": CALIBRATE_WINDOW_S, "calibrate_rounds": CALIBRATE_ROUNDS,
                       "calibrate_max_updates": CALIBRATE_MAX_UPDATES, "calibrate_budget_s": CALIBRATE_BUDGET_S,
                       "cell_budget_s": CELL_BUDGET_S}
    clean_env.setenv("PEARL_CALIBRATE_ROUNDS", "1")
    assert calibration_settings() != default
