"""Checkpoints are untrusted input: validated on load (kinds of damage named), modules imported only when
trusted, environment options that change the spaces refused, paths that are not files said for what they are."""

from __future__ import annotations

import os
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from pearl_core.algorithms import DQN
from pearl_core.errors import SpecError
from pearl_core.runtime.checkpoint import DamagedCheckpointError, UntrustedCheckpointError, load_checkpoint, \
    save_checkpoint
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
from pearl_core.runtime.control import RunState, StopMonitor
from pearl_core.runtime.serial import SerialRuntime


class Sized(gym.Env):
    """An env whose observation size is a keyword argument."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, size: int = 3, note: str = ""):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (size,), np.float32)

    def reset(self, seed=None, options=None):
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action):
        return np.zeros(self.observation_space.shape, np.float32), 1.0, False, False, {}


@pytest.fixture(autouse=True, scope="module")
def sized_env():
    gym.register("PearlTestSized-v0", entry_point=Sized)
    yield
    gym.registry.pop("PearlTestSized-v0", None)


def config(tmp_path, **kw) -> RunConfig:
    base = dict(env_id="PearlTestSized-v0", trainer="pearl_core.algorithms:DQN", trainer_kwargs={"hidden_sizes": [8]},
                env_kwargs={"size": 3}, replay=ReplayConfig(capacity=64), batch_size=8, learning_starts=8,
                stop=StopCriteria(max_env_steps=32), log_dir=str(tmp_path / "run"))
    base.update(kw)
    return RunConfig(**base)


def write(tmp_path, cfg: RunConfig, edit=None, name="checkpoint.pt"):
    """A checkpoint of a DQN built for ``cfg``'s spaces; ``edit(payload)`` changes the saved payload first."""
    trainer = DQN(gym.spaces.Box(-1.0, 1.0, (cfg.env_kwargs.get("size", 3),), np.float32), gym.spaces.Discrete(2),
                  hidden_sizes=(8,), seed=0)
    path = tmp_path / "run" / name
    save_checkpoint(path, trainer=trainer, state=RunState(env_steps=16), monitor=StopMonitor(cfg.stop), config=cfg,
                    plan=RuntimePlan())
    if edit is not None:
        payload = torch.load(path, weights_only=True)
        edit(payload)
        torch.save(payload, path)
    return path


def damage(tmp_path, edit) -> DamagedCheckpointError:
    path = write(tmp_path, config(tmp_path), edit)
    with pytest.raises(DamagedCheckpointError) as info:
        SerialRuntime(config(tmp_path), resume_from=path, progress=False)
    return info.value


# ------------------------------------------------------------------ 1. validated on load, damage named
def test_nan_weights_are_refused_naming_the_tensor(tmp_path):
    def nan(p):
        p["trainer"]["q_net"]["0.weight"][0, 0] = float("nan")

    err = damage(tmp_path, nan)
    assert err.kind == "nonfinite"
    assert "q_net.0.weight (1 of 24 values)" in str(err) and "Fix: resume from an earlier checkpoint" in str(err)


def test_missing_parts_are_named(tmp_path):
    err = damage(tmp_path, lambda p: p.pop("monitor"))
    assert err.kind == "missing" and "it lacks ['monitor']" in str(err), str(err)


def test_wrong_shapes_and_dtypes_are_refused_before_the_run(tmp_path):
    def shrink(p):
        p["trainer"]["q_net"]["0.weight"] = torch.zeros(8, 2)

    err = damage(tmp_path, shrink)
    assert err.kind == "shape" and "q_net.0.weight: (8, 2) in the checkpoint, (8, 3) under the config" in str(err)

    def ints(p):
        p["trainer"]["q_net"]["0.bias"] = torch.zeros(8, dtype=torch.int64)

    err = damage(tmp_path, ints)
    assert err.kind == "shape" and "q_net.0.bias: (8,) int in the checkpoint, (8,) under the config" in str(err)

    def lose(p):
        del p["trainer"]["q_net"]["0.bias"]

    err = damage(tmp_path, lose)
    assert err.kind == "missing" and "q_net.0.bias: missing from the checkpoint" in str(err), str(err)


def test_other_format_versions_and_cut_files_are_named(tmp_path):
    err = damage(tmp_path, lambda p: p.update(version=99))
    assert err.kind == "format" and "format version 99" in str(err)
    path = write(tmp_path, config(tmp_path))
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(DamagedCheckpointError) as info:
        load_checkpoint(path)
    assert info.value.kind == "unreadable" and "damaged" in str(info.value)


# ------------------------------------------------------------------ 1. modules imported only when trusted
EVIL = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n"


@pytest.mark.parametrize("where", ["trainer", "env_id", "env_wrappers"])
def test_resuming_never_imports_a_module_the_checkpoint_names_unless_trusted(tmp_path, monkeypatch, where):
    marker = tmp_path / "imported"
    (tmp_path / "pearl_evil_mod.py").write_text(EVIL.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pearl_evil_mod", raising=False)
    named = {"trainer": {"trainer": "pearl_evil_mod:Trainer"}, "env_id": {"env_id": "pearl_evil_mod:Env-v0"},
             "env_wrappers": {"env_wrappers": ["pearl_evil_mod:wrap"]}}[where]
    path = write(tmp_path, config(tmp_path, **named))
    with pytest.raises(UntrustedCheckpointError) as info:
        SerialRuntime.from_checkpoint(path, progress=False).run()
    msg = str(info.value)
    assert "['pearl_evil_mod']" in msg and "trust_modules=True" in msg and "Nothing was imported" in msg
    assert not marker.exists()
    with pytest.raises(SpecError):  # trusted: imported (it is no trainer, env or wrapper, so refused after)
        SerialRuntime.from_checkpoint(path, progress=False, trust_modules=True).run()
    assert marker.exists()


def test_pearls_own_modules_and_a_given_config_need_no_trust(tmp_path):
    cfg = config(tmp_path)
    path = write(tmp_path, cfg)
    assert SerialRuntime.from_checkpoint(path, progress=False).checkpoint is not None
    assert SerialRuntime.from_checkpoint(path, cfg, progress=False).config.trainer == cfg.trainer


# ------------------------------------------------------------------ 2. env options that change the spaces
def test_env_kwargs_that_change_the_spaces_are_refused_on_resume(tmp_path):
    path = write(tmp_path, config(tmp_path))
    with pytest.raises(SpecError) as info:
        SerialRuntime(config(tmp_path, env_kwargs={"size": 5}), resume_from=path, progress=False)
    msg = str(info.value)
    assert "observation space: Box(shape=(3,), dtype=float32) in the checkpoint, Box(shape=(5,), dtype=float32) " \
           "under the config" in msg, msg
    assert "env_kwargs {'size': 3}" in msg and "env_kwargs {'size': 5}" in msg and "Fix: resume with the " in msg
    # options that keep the spaces are fine
    SerialRuntime(config(tmp_path, env_kwargs={"size": 3, "note": "x"}), resume_from=path, progress=False)


# ------------------------------------------------------------------ 3. a path that is not a file
def test_a_directory_fifo_or_device_is_named_for_what_it_is(tmp_path):
    write(tmp_path, config(tmp_path))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    cases = {tmp_path / "run": "is a directory", fifo: "is a named pipe (FIFO)", "/dev/null": "is a character device"}
    for path, what in cases.items():
        with pytest.raises(SpecError) as info:
            load_checkpoint(path)
        msg = str(info.value)
        assert what in msg and "does not exist" not in msg, msg
    assert "Fix: pass " + repr(str(tmp_path / "run" / "checkpoint.pt")) in str(
        pytest.raises(SpecError, load_checkpoint, tmp_path / "run").value)


def test_pearl_train_resume_imports_a_checkpoints_modules_only_with_trust_checkpoint(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from pearl_core.cli import app

    marker = tmp_path / "imported"
    (tmp_path / "pearl_evil_cli.py").write_text(EVIL.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pearl_evil_cli", raising=False)
    write(tmp_path, config(tmp_path, trainer="pearl_evil_cli:Trainer"))
    res = CliRunner().invoke(app, ["train", "--resume", str(tmp_path / "run"), "--max-env-steps", "64", "--quiet"])
    assert res.exit_code == 2 and "--trust-checkpoint" in res.output and "pearl_evil_cli" in res.output, res.output
    assert not marker.exists()
    res = CliRunner().invoke(app, ["train", "--resume", str(tmp_path / "run"), "--max-env-steps", "64", "--quiet",
                                   "--trust-checkpoint"])
    assert res.exit_code != 0 and marker.exists(), res.output  # imported (then refused: it defines no trainer)
