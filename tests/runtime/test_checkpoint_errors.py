"""Checkpoint errors (:mod:`pearl_core.runtime.checkpoint`): a damaged file, other network shapes, a full disk;
the previous checkpoint is kept and the run resumes from it.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from run_kinds import KINDS, IDS, config, make, snapshot

import pearl_core.runtime.checkpoint as checkpoint_mod
from pearl_core.errors import PearlError, SpecError
from pearl_core.runtime.checkpoint import CheckpointWriteError, load_checkpoint, load_trainer_state, save_checkpoint
from pearl_core.runtime.config import RunConfig
from pearl_core.runtime.control import RunState, StopMonitor
from pearl_core.runtime.runlock import LOCK_NAME
from pearl_core.runtime.serial import SerialRuntime

pytestmark = pytest.mark.usefixtures("no_leaks")


# ================================================================ checkpoint errors
def _dqn(log_dir, hidden, steps=64) -> RunConfig:
    return config(log_dir, steps=steps, trainer="pearl_core.algorithms:DQN",
                  trainer_kwargs={"hidden_sizes": hidden, "eps_decay_steps": 100})


def test_damaged_checkpoint_says_damaged_and_never_recommends_weights_only_false(tmp_path):
    d = tmp_path / "run"
    first = make("serial", config(d, steps=64)).run()
    good = Path(first.checkpoint_path).read_bytes()
    cases = {"truncated.pt": good[: len(good) // 2], "junk.pt": b"not a checkpoint", "empty.pt": b""}
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        for call in (lambda: load_checkpoint(p), lambda: SerialRuntime(config(d), resume_from=p)):
            with pytest.raises(SpecError) as info:
                call()
            msg = str(info.value)
            assert "weights_only" not in msg, msg
            assert "damaged" in msg and "not a PEARL checkpoint" in msg and "earlier checkpoint" in msg, msg


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_resume_with_other_hidden_sizes_names_both_shapes(tmp_path, kind):
    d = tmp_path / "run"
    first = make("serial", _dqn(d, [8])).run()
    before = snapshot(d)
    with pytest.raises(SpecError) as info:
        make(kind, _dqn(d, [16], steps=128), resume_from=first.checkpoint_path).run()
    msg = str(info.value)
    assert "(8, 4) in the checkpoint, (16, 4) under the config" in msg, msg
    assert "'hidden_sizes': [8]" in msg and "'hidden_sizes': [16]" in msg and "Fix: resume with the checkpoint's" in msg
    assert "size mismatch" not in msg
    assert snapshot(d) == before


def test_load_trainer_state_reports_a_mismatch_as_spec_error(tmp_path):
    from pearl_core.envs import env_spaces
    from pearl_core.runtime.wiring import build_trainer

    first = make("serial", _dqn(tmp_path / "run", [8])).run()
    ck = load_checkpoint(first.checkpoint_path)
    other = build_trainer(_dqn(tmp_path, [4]), *env_spaces("CartPole-v1"), check=False)
    with pytest.raises(SpecError, match=r"q_net.0.weight: \(8, 4\) in the checkpoint, \(4, 4\)"):
        load_trainer_state(other, ck)


class _FullDisk:
    """A file whose writes fail with ENOSPC after ``room`` bytes, like a disk that fills up."""

    def __init__(self, fh, room=512):
        self.fh, self.room = fh, room

    def write(self, b):
        self.room -= len(b)
        if self.room < 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.fh.write(b)

    def __getattr__(self, name):
        return getattr(self.fh, name)


def _fill_disk_after(monkeypatch, good_saves: int) -> list:
    calls = []
    real = checkpoint_mod.atomic_write

    def spy(path, data, **kw):
        calls.append(path)
        if len(calls) > good_saves:
            return real(path, lambda fh: data(_FullDisk(fh)), **kw)
        return real(path, data, **kw)

    monkeypatch.setattr(checkpoint_mod, "atomic_write", spy)
    return calls


def test_full_disk_unit_save_checkpoint(tmp_path, monkeypatch):
    d = tmp_path / "run"
    make("serial", config(d, steps=32)).run()
    path = d / "checkpoint.pt"
    good = path.read_bytes()
    _fill_disk_after(monkeypatch, 0)
    ck = load_checkpoint(path)
    with pytest.raises(CheckpointWriteError) as info:
        save_checkpoint(path, trainer=_Weights(ck.trainer_state), state=RunState(env_steps=99),
                        monitor=StopMonitor(ck.config.stop), config=ck.config, plan=ck.plan)
    msg = str(info.value)
    assert isinstance(info.value, PearlError) and isinstance(info.value, OSError)
    assert f"could not write checkpoint {str(path)!r}: disk full?" in msg and "previous checkpoint" in msg
    assert "inline_container" in msg  # torch's own words are kept for the record
    assert path.read_bytes() == good
    assert not [n for n in os.listdir(d) if n.endswith(".tmp")]


class _Weights:
    def __init__(self, state):
        self._state = state

    def state_dict(self):
        return self._state


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_full_disk_while_checkpointing_fails_the_run_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch,
                                                                                       kind):
    d = tmp_path / "run"
    calls = _fill_disk_after(monkeypatch, 1)
    with pytest.raises(PearlError, match="could not write checkpoint") as info:
        make(kind, config(d, steps=400, checkpoint_every=64)).run()
    # the parallel host may wrap it (HostError naming what it was doing); the cause is kept
    err = info.value if isinstance(info.value, CheckpointWriteError) else info.value.__cause__
    assert isinstance(err, CheckpointWriteError) and "Fix: free space" in str(err)
    assert len(calls) >= 2
    monkeypatch.undo()
    ck = load_checkpoint(d / "checkpoint.pt")  # the first checkpoint, intact
    assert 64 <= ck.state.env_steps < 400
    assert not [n for n in os.listdir(d) if n.endswith(".tmp")]
    assert not (d / LOCK_NAME).exists()
    # ... and the run resumes from it
    res = make(kind, config(d, steps=ck.state.env_steps + 32), resume_from=d / "checkpoint.pt").run()
    assert res.env_steps == ck.state.env_steps + 32
