"""Run control: stop criteria, progress display, logs, learning curve, atomic checkpoints."""

from __future__ import annotations

import io
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

from pearl_core.algorithms import DQN
from pearl_core.errors import SpecError
from pearl_core.runtime.config import RunConfig, RuntimePlan, StopCriteria
from pearl_core.runtime.control import (
    ProgressDisplay,
    RunLogger,
    RunResult,
    RunState,
    StopDecision,
    StopMonitor,
    plot_learning_curve,
)
from pearl_core.runtime.checkpoint import load_checkpoint, save_checkpoint

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


# ---------------------------------------------------------------------------- stop monitor
def test_mean_return_needs_a_full_window():
    m = StopMonitor(StopCriteria(mean_return=10.0, window=3))
    for r in (50.0, 50.0):
        m.record_episode(r)
        assert m.check(0, 0, 0.0) is None
    m.record_episode(-5.0)
    d = m.check(0, 0, 0.0)
    assert d == StopDecision("mean_return", d.detail, True) and "last 3 episodes 31.67 >= 10.0" in d.detail
    m.record_episode(-100.0)  # window slides: (50, -5, -100)
    assert m.check(0, 0, 0.0) is None


def test_eval_return_fires_only_after_an_evaluation_that_reaches_it():
    m = StopMonitor(StopCriteria(eval_return=475.0, eval_every=5000, eval_episodes=20))
    assert m.evaluates and not m.eval_due(4999) and m.eval_due(5000)
    m.record_eval(5000, 300.0)
    assert m.check(5000, 0, 0.0) is None and not m.eval_due(9999) and m.eval_due(10_000)
    m.record_eval(10_112, 480.0)  # an evaluation that ran a bit late keeps the grid
    assert m.eval_due(15_000) and not m.eval_due(14_999)
    d = m.check(10_112, 0, 0.0)
    assert d.criterion == "eval_return" and d.solved and "10112 env steps averaged 480.00" in d.detail
    assert not StopMonitor(StopCriteria(max_env_steps=10)).eval_due(10**6)


@pytest.mark.parametrize(
    "stop, args, criterion",
    [
        (StopCriteria(max_env_steps=100), (100, 0, 0.0), "max_env_steps"),
        (StopCriteria(max_updates=5), (0, 5, 0.0), "max_updates"),
        (StopCriteria(max_wall_time_s=1.5), (0, 0, 1.5), "max_wall_time_s"),
    ],
)
def test_budgets(stop, args, criterion):
    m = StopMonitor(stop)
    d = m.check(*args)
    assert d.criterion == criterion and not d.solved
    below = tuple(a - 1 if a else a for a in args)
    assert m.check(*below) is None


def test_return_criteria_win_over_budgets_on_the_same_step():
    m = StopMonitor(StopCriteria(mean_return=1.0, window=1, max_env_steps=10))
    m.record_episode(2.0)
    assert m.check(10, 0, 0.0).criterion == "mean_return"


def test_monitor_state_round_trip():
    m = StopMonitor(StopCriteria(mean_return=100.0, window=2, eval_return=1.0, eval_every=10))
    m.record_episode(1.0)
    m.record_episode(2.0)
    m.record_eval(10, 0.5)
    m2 = StopMonitor(m.stop)
    m2.load_state_dict(m.state_dict())
    assert m2.recent_mean() == 1.5 and not m2.eval_due(19) and m2.eval_due(20)
    assert StopMonitor(m.stop).recent_mean() is None
    with pytest.raises(SpecError):
        StopMonitor({"max_env_steps": 1})


# -------------------------------------------------------------------------------- display
def test_plain_display_prints_periodic_lines():
    out = io.StringIO()
    d = ProgressDisplay(1000, stream=out, every_s=0.0)
    assert not d.tty
    st = RunState(env_steps=500, updates=100, episodes=7, eval_history=[(500, 42.0, 1.0)])
    d.update(st, 1.0, 21.5)
    st.env_steps, st.updates = 1000, 300
    d.update(st, 2.0, 23.0)
    d.close()
    lines = out.getvalue().strip().splitlines()
    assert len(lines) == 2
    assert "env steps 1000/1000" in lines[1] and "return 23.0" in lines[1] and "eval 42.0" in lines[1]
    assert "steps/s" in lines[1] and "upd/s" in lines[1]


def test_plain_display_throttles_and_can_be_disabled():
    out = io.StringIO()
    d = ProgressDisplay(None, stream=out, every_s=3600)
    for i in range(5):
        d.update(RunState(env_steps=i), 0.0, None)
    assert len(out.getvalue().splitlines()) == 1
    d.update(RunState(env_steps=9), 0.0, None, force=True)
    assert len(out.getvalue().splitlines()) == 2
    quiet = io.StringIO()
    ProgressDisplay(10, stream=quiet, enabled=False).update(RunState(), 0.0, None, force=True)
    assert quiet.getvalue() == ""


def test_rich_display_on_a_terminal():
    out = io.StringIO()
    d = ProgressDisplay(100, stream=out, tty=True)
    d.update(RunState(env_steps=50, updates=10), 1.0, 3.0)
    d.close()
    assert "env steps" in out.getvalue() and "50/100" in out.getvalue()


# ----------------------------------------------------------------------------------- logs
def test_logger_fresh_run_replaces_and_resume_keeps_rows_up_to_the_checkpoint(tmp_path):
    log = RunLogger(tmp_path, tensorboard=False)
    log.episode(10, 0.5, 1, 12.0, 10)
    log.episode(50, 0.9, 2, 13.0, 10)  # logged after the checkpoint at 20, then the run died
    log.evaluation(20, 1.0, [1.0, 3.0])
    st = RunState(env_steps=20, updates=4, episodes=1, last_metrics={"loss": 0.5})
    log.metrics(st, 1.0, 12.0, 100.0, 20.0)
    log.close()
    log = RunLogger(tmp_path, tensorboard=False, resume_at=20)
    log.episode(30, 2.0, 2, 15.0, 20)
    log.close()
    eps = (tmp_path / "episodes.csv").read_text().splitlines()
    assert eps[0] == "env_steps,wall_s,episode,return,length"
    assert [e.split(",")[0] for e in eps[1:]] == ["10", "30"]
    assert (tmp_path / "evals.csv").read_text().splitlines()[1].split(",")[2] == "2"
    metrics = (tmp_path / "metrics.csv").read_text().splitlines()
    assert metrics[0].startswith("env_steps,updates") and "0.5" in metrics[1]
    RunLogger(tmp_path, tensorboard=False).close()  # a fresh run in the same directory starts clean
    assert (tmp_path / "episodes.csv").read_text().splitlines() == [eps[0]]


def test_logger_writes_tensorboard_events_when_installed(tmp_path):
    pytest.importorskip("tensorboard")
    log = RunLogger(tmp_path)
    assert log.tb is not None
    log.episode(10, 0.5, 1, 12.0, 10)
    log.close()
    assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "tensorboard").iterdir())


def test_learning_curve_png(tmp_path):
    log = RunLogger(tmp_path, tensorboard=False)
    for i in range(30):
        log.episode(10 * i, 0.1 * i, i, float(i), 10)
    log.evaluation(150, 1.0, [20.0, 22.0])
    log.close()
    png = plot_learning_curve(tmp_path, threshold=25.0)
    assert png == tmp_path / "learning_curve.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert plot_learning_curve(empty).read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------------------- checkpoints
def make_trainer():
    torch.manual_seed(0)
    return DQN(OBS, gym.spaces.Discrete(2), hidden_sizes=(8,), seed=0)


CFG = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", trainer_kwargs={"hidden_sizes": [8]})


def test_checkpoint_round_trip(tmp_path):
    t = make_trainer()
    t.env_steps, t.updates = 123, 7
    st = RunState(env_steps=123, updates=7, episodes=3, wall_time_s=1.5, eval_history=[(100, 9.5, 1.0)])
    mon = StopMonitor(CFG.stop)
    mon.record_episode(4.0)
    replay = {"size": 2, "cursor": 2, "capacity": 10, "obs": np.ones((2, 4), np.float32),
              "priorities": np.array([1.0, 2.0])}
    path = save_checkpoint(tmp_path / "ck.pt", trainer=t, state=st, monitor=mon, config=CFG,
                           plan=RuntimePlan(rm_threads=2), replay=replay, extra={"note": "x"})
    ck = load_checkpoint(path)
    assert ck.state == st and ck.config == CFG and ck.plan.rm_threads == 2 and ck.extra == {"note": "x"}
    assert ck.monitor["returns"] == [4.0]
    np.testing.assert_array_equal(ck.replay["obs"], replay["obs"])
    assert isinstance(ck.replay["priorities"], np.ndarray)
    t2 = DQN(OBS, gym.spaces.Discrete(2), hidden_sizes=(8,))
    t2.load_state_dict(ck.trainer_state)
    assert (t2.env_steps, t2.updates) == (123, 7)
    for k, v in t.get_weights().items():
        np.testing.assert_array_equal(t2.get_weights()[k], v)


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "ck.pt"
    t = make_trainer()
    save_checkpoint(path, trainer=t, state=RunState(env_steps=1), monitor=StopMonitor(CFG.stop), config=CFG,
                    plan=RuntimePlan())
    good = path.read_bytes()

    def crash(obj, fh, *a, **k):
        fh.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, trainer=t, state=RunState(env_steps=2), monitor=StopMonitor(CFG.stop), config=CFG,
                        plan=RuntimePlan())
    assert path.read_bytes() == good  # the previous checkpoint is intact
    assert os.listdir(tmp_path) == ["ck.pt"]  # and no temporary file is left behind
    monkeypatch.undo()
    assert load_checkpoint(path).state.env_steps == 1


def test_load_checkpoint_errors(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(SpecError, match="could not be read"):
        load_checkpoint(junk)
    other = tmp_path / "other.pt"
    torch.save({"weights": 1}, other)
    with pytest.raises(SpecError, match="not a PEARL checkpoint"):
        load_checkpoint(other)


def test_run_result_rates():
    st = RunState(env_steps=1000, updates=500, wall_time_s=10.0, solved_at_env_steps=900, solved_at_wall_s=9.0)
    r = RunResult.from_state(st, StopDecision("eval_return", "x", True), batch_size=64, final_mean_return=3.0,
                             log_dir="d", checkpoint_path=None)
    assert (r.env_steps_per_s, r.updates_per_s, r.samples_per_s) == (100.0, 50.0, 3200.0)
    assert r.solved and r.stop_reason == "eval_return"
