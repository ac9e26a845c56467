"""Envs from the user's own script or module work in composing and in the generated program (issue 41, point 5)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from pearl_core.composer import runtimegen
from pearl_core.errors import InvalidValueError

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = '''\
import gymnasium
from pearl_core.algorithms import DQN
from pearl_core.composer import Composer

gymnasium.register("PearlScriptCartPole-v0", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
                   max_episode_steps=100)

if __name__ == "__main__":
    c = Composer(None)
    c.set_actors("PearlScriptCartPole-v0", 1)
    c.set_train_function(DQN, 16, learning_starts=100, hidden_sizes=(16,))
    c.set_replay("uniform", 5_000)
    c.set_stop(max_env_steps=600)
    c.set_run(log_dir="runs/script-env")
    c.RuntimeGen(c.run(profile=False, runnable=True), "runtime.py")
'''


@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
def test_an_env_registered_in_the_composing_script_runs_in_the_generated_program(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    composed = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
    assert composed.returncode == 0, composed.stderr[-3000:]
    program = (tmp_path / "runtime.py").read_text()
    assert f"USER_SCRIPT = {str(tmp_path / 'train.py')!r}" in program  # the program registers the env as the script did
    assert "trainer='pearl_core.algorithms.dqn:DQN'" in program  # the library's trainer, imported by name
    ran = subprocess.run([sys.executable, "runtime.py", "--quiet"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads((tmp_path / "runs" / "script-env" / "result.json").read_text())["env_steps"] >= 600


def test_env_script_needs_a_script_only_for_ids_registered_in_this_session(monkeypatch, tmp_path):
    import gymnasium

    assert runtimegen.env_script("CartPole-v1") is None  # gymnasium registers it in every process
    assert runtimegen.env_script("some_module:Env-v0") is None  # the program imports the module itself
    assert runtimegen.env_script("ALE/Pong-v5") is None  # its family registers itself
    gymnasium.register("PearlSessionOnly-v0", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv")
    try:
        monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))  # an interactive session
        with pytest.raises(InvalidValueError) as err:
            runtimegen.env_script("PearlSessionOnly-v0")
        assert "my_envs:PearlSessionOnly-v0" in str(err.value) and "Fix" in str(err.value)
        script = tmp_path / "s.py"
        script.write_text("import gymnasium\n")
        main = types.ModuleType("__main__")
        main.__file__ = str(script)
        monkeypatch.setitem(sys.modules, "__main__", main)
        assert runtimegen.env_script("PearlSessionOnly-v0") == str(script)
    finally:
        gymnasium.registry.pop("PearlSessionOnly-v0", None)


def test_the_older_atari_ids_rl_zoo_uses_build_with_the_atari_preset():
    pytest.importorskip("ale_py", reason="Atari envs need ale-py (pearl-core[pixels])")
    from pearl_core.envs import default_wrappers, make_env
    from pearl_core.presets import find_preset

    env = make_env("PongNoFrameskip-v4", 0)
    try:
        assert env.observation_space.shape == (4, 84, 84) and default_wrappers("PongNoFrameskip-v4") == ("atari",)
    finally:
        env.close()
    assert find_preset("dqn", "PongNoFrameskip-v4").env_wrappers == ("atari",)


CALIBRATED_SCRIPT = '''\
import gymnasium
from pearl_core.algorithms import DQN

gymnasium.register("PearlCalibratedCartPole-v0", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
                   max_episode_steps=100)


class TinyDQN(DQN):
    pass
'''


@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
def test_calibration_runs_load_the_composing_script_for_its_trainer_and_env(tmp_path, monkeypatch):
    import dataclasses

    import gymnasium

    from pearl_core.algorithms import DQN
    from pearl_core.composer.calibrate import calibrate_host_variants, user_script_workload
    from pearl_core.composer.workload import workload_for_env

    script = tmp_path / "train.py"
    script.write_text(CALIBRATED_SCRIPT)
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", main)
    wl = workload_for_env("CartPole-v1", 16, trainer=DQN, trainer_kwargs={"hidden_sizes": [16]}, replay="uniform",
                          capacity=2_000)
    assert user_script_workload(wl) == (wl, None)  # nothing of the caller's is needed
    gymnasium.register("PearlCalibratedCartPole-v0",
                       entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv", max_episode_steps=100)
    try:
        mine = dataclasses.replace(wl, trainer="__main__:TinyDQN", env_id="PearlCalibratedCartPole-v0")
        renamed, path = user_script_workload(mine)
        assert path == str(script) and renamed.trainer == f"{runtimegen.USER_SCRIPT_MODULE}:TinyDQN"
        got = calibrate_host_variants(mine, [(2, 1)], window_s=3.0, rounds=1, max_updates=300)  # raised before
        assert got and all(m.seconds > 0 for m in got)  # the run happened
    finally:
        gymnasium.registry.pop("PearlCalibratedCartPole-v0", None)


def test_a_builtin_id_is_asked_of_a_child_once_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PEARL_CACHE_DIR", str(tmp_path))
    runtimegen._registered_on_import.cache_clear()
    assert runtimegen.env_script("CartPole-v1") is None
    assert "CartPole-v1" in (tmp_path / "registered-envs.json").read_text()
    runtimegen._registered_on_import.cache_clear()

    def no_child(*a, **k):
        raise AssertionError("a warm compose asks no child")

    monkeypatch.setattr(runtimegen.subprocess, "run", no_child)
    assert runtimegen.env_script("CartPole-v1") is None
    runtimegen._registered_on_import.cache_clear()
