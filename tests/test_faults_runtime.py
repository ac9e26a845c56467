"""Nothing lost, nothing silent: data sanity, every failure ending like a worker failure, the stall watchdog.

Fault injection with tiny budgets (CartPole, a few hundred env steps): the misbehaving
environments and trainers are in ``faulty_envs.py``. Each run that fails must raise a
:class:`PearlError` naming the component, after a checkpoint of what is sound, and
leave no process or shared-memory segment behind (``no_leaks``). Waits are bounded by
generous timeouts that only turn a hang into a failure; no assertion depends on speed.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import faulty_envs
from conftest import HELPERS, child_pids
from faulty_envs import env_id
from pearl_core.errors import (
    ActorError,
    DataError,
    EvaluationError,
    HostError,
    InvalidValueError,
    LearnerError,
    PearlError,
    SpecError,
    StallError,
)
from pearl_core.replay.prioritized import PrioritizedReplay
from pearl_core.replay.storage import DataStorage, StorageSpec
from pearl_core.runtime.acting import Collector
from pearl_core.runtime.checkpoint import load_checkpoint
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
from pearl_core.runtime.parallel import ParallelRuntime
from pearl_core.runtime.sanity import nonfinite_in
from pearl_core.runtime.serial import SerialRuntime
from pearl_core.runtime.shm import list_segments
from pearl_core.testing import ReferenceSumTree

pytestmark = pytest.mark.usefixtures("no_leaks")

SETTINGS = [1, 2]


def config(tmp_path, env="CartPole-v1", trainer="faulty_envs:LinearQ", steps=400, stop=None, replay=None, **kw):
    return RunConfig(env_id=env, trainer=trainer, batch_size=16, learning_starts=32, train_every=16,
                     replay=replay or ReplayConfig(capacity=2048), stop=stop or StopCriteria(max_env_steps=steps),
                     log_dir=str(tmp_path / "run"), **kw)


def plan(setting: int, n_envs: int = 1) -> RuntimePlan:
    return RuntimePlan(setting=setting, n_actors=1, envs_per_actor=n_envs, insert_batch=8, queue_size=4)


def parallel(cfg, setting, **kw) -> ParallelRuntime:
    return ParallelRuntime(cfg, plan(setting), progress=False, plot=False, tensorboard=False, **kw)


def serial(cfg) -> SerialRuntime:
    return SerialRuntime(cfg, progress=False, plot=False, tensorboard=False)


def checkpoint(tmp_path):
    path = tmp_path / "run" / "checkpoint.pt"
    assert path.exists(), "no checkpoint was written before the error"
    return load_checkpoint(path, weights_only=False)


def finite_checkpoint(tmp_path):
    ck = checkpoint(tmp_path)
    assert nonfinite_in(ck.trainer_state) is None, "a NaN/inf was checkpointed"
    return ck


# =========================================================================== 1. data sanity
# --------------------------------------------------------------------------- the collector


class _Stub:
    """A trainer stand-in for the collector: fixed actions."""

    def __init__(self, action):
        self.action = action
        self.env_steps = 100

    def get_action(self, obs, explore):
        return np.stack([self.action] * len(obs))


def _collector(name, n=2, **kw):
    from pearl_core.envs import make_env

    return Collector([make_env(env_id(name), s) for s in range(n)], list(range(n)), **kw)


@pytest.mark.parametrize("name, field", [("NaNObs-v0", "observation returned by env.step[2] = nan"),
                                         ("NaNReward-v0", "reward returned by env.step = nan")])
def test_collector_stops_on_nonfinite_data_naming_env_actor_and_step(name, field):
    col = _collector(name, where="actor 3")
    try:
        with pytest.raises(DataError) as info:
            for _ in range(100):
                col.step(_Stub(np.int64(0)))
    finally:
        col.close()
    msg = str(info.value)
    assert f"actor 3: environment 'PearlFaulty/{name}' (env 0 of 2)" in msg
    assert field in msg and "at env step 100 of the run" in msg
    assert "on_nonfinite='drop'" in msg  # the fix
    assert info.value.env_id == env_id(name) and info.value.component == "actor 3"


def test_collector_drops_counts_and_keeps_the_returns_finite():
    col = _collector("SomeNaN-v0", on_nonfinite="drop")
    rows, eps = 0, []
    try:
        for _ in range(200):
            out = col.step(_Stub(np.int64(0)))
            rows += len(out.reward)
            assert np.isfinite(out.reward).all() and np.isfinite(out.obs).all()
            eps += out.episodes
    finally:
        col.close()
    assert col.dropped == 2 * 4  # steps 20, 70, 120, 170 of each of the two environments
    assert rows == 2 * 200 - col.dropped
    assert "reward returned by env.step = nan" in col.last_drop
    assert eps and all(math.isfinite(e.episode_return) for e in eps)


def test_collector_drop_mode_refuses_an_environment_that_is_always_bad():
    col = _collector("AlwaysNaN-v0", n=1, on_nonfinite="drop")
    try:
        with pytest.raises(DataError, match="gave 1000 transitions in a row holding NaN/inf"):
            for _ in range(2000):
                col.step(_Stub(np.int64(0)))
    finally:
        col.close()


def test_collector_rejects_a_nonfinite_action():
    from pearl_core.envs import make_env

    col = Collector([make_env("Pendulum-v1", 0)], [0], where="actor 1")
    try:
        with pytest.raises(DataError, match=r"actor 1: environment 'Pendulum-v1' \(env 0 of 1\) was given a "
                                            r"non-finite action \(from trainer.get_action\)\[0\] = nan"):
            col.step(_Stub(np.array([np.nan], np.float32)))
    finally:
        col.close()


# --------------------------------------------------------------------------- runs: stop


@pytest.mark.parametrize("name", ["NaNObs-v0", "NaNReward-v0"])
def test_serial_nonfinite_data_stops_after_a_checkpoint_with_every_good_row(tmp_path, name):
    cfg = config(tmp_path, env_id(name), save_replay=True)
    with pytest.raises(DataError, match=rf"the serial runtime: environment 'PearlFaulty/{name}'.*at env step 39"):
        serial(cfg).run()
    ck = finite_checkpoint(tmp_path)
    assert ck.state.env_steps == 39  # the 39 good transitions before the bad step
    assert ck.replay["size"] == 39  # nothing lost: every good row is in the replay


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("name", ["NaNObs-v0", "NaNReward-v0"])
def test_parallel_nonfinite_data_is_reported_as_bad_data_from_the_env(tmp_path, setting, name):
    # Setting 1 used to fail on the host's replay, setting 2 as "the learner failed".
    cfg = config(tmp_path, env_id(name), save_replay=True)
    rt = parallel(cfg, setting)
    with pytest.raises(DataError) as info:
        rt.run()
    err = info.value
    assert not isinstance(err, LearnerError)
    assert f"actor 0: environment 'PearlFaulty/{name}' (env 0 of 1)" in str(err) and "at env step 39" in str(err)
    assert err.component == "actor 0"
    ck = finite_checkpoint(tmp_path)
    assert ck.state.env_steps == 39 and ck.replay["size"] == 39  # the good rows shipped before the error
    assert any("actor 0" == who for _, who, _ in rt.faults)


# --------------------------------------------------------------------------- runs: drop


def test_serial_drop_counts_logs_and_finishes(tmp_path, caplog):
    cfg = config(tmp_path, env_id("SomeNaN-v0"), on_nonfinite="drop", save_replay=True)
    rt = serial(cfg)
    with caplog.at_level(logging.WARNING, logger="pearl_core.runtime.data"):
        res = rt.run()
    assert res.stop_reason == "max_env_steps" and res.env_steps == 400
    # steps 20, 70, ..., 420 of the one environment: 400 kept steps take 408 env steps
    assert rt.dropped_nonfinite == 8 and res.dropped_nonfinite == 8
    ck = finite_checkpoint(tmp_path)
    assert ck.extra["dropped_nonfinite"] == 8 and ck.replay["size"] == 400
    assert np.isfinite(ck.replay["reward"]).all() and np.isfinite(ck.replay["obs"]).all()
    lines = [r.getMessage() for r in caplog.records if r.name == "pearl_core.runtime.data"]
    assert any("reward returned by env.step = nan" in m for m in lines)
    assert any("8 transition(s) with non-finite values in all" in m for m in lines)


@pytest.mark.parametrize("setting", SETTINGS)
def test_parallel_drop_counts_logs_and_finishes(tmp_path, setting, caplog):
    cfg = config(tmp_path, env_id("SomeNaN-v0"), on_nonfinite="drop")
    rt = parallel(cfg, setting)
    with caplog.at_level(logging.WARNING, logger="pearl_core.runtime.data"):
        res = rt.run()
    assert res.stop_reason == "max_env_steps" and res.env_steps == 400
    assert rt.dropped_nonfinite >= 7  # 7 or 8: the actor may run a step or two past what the host takes
    assert res.dropped_nonfinite == rt.dropped_nonfinite
    assert checkpoint(tmp_path).extra["dropped_nonfinite"] == rt.dropped_nonfinite
    lines = [r.getMessage() for r in caplog.records if r.name == "pearl_core.runtime.data"]
    assert any("actor 0: environment 'PearlFaulty/SomeNaN-v0'" in m for m in lines)
    assert any(f"{rt.dropped_nonfinite} transition(s) with non-finite values in all" in m for m in lines)


# --------------------------------------------------------------------------- NaN weights


@pytest.mark.parametrize("setting", SETTINGS)
def test_parallel_nan_weights_are_never_published_nor_checkpointed(tmp_path, setting):
    cfg = config(tmp_path, trainer="faulty_envs:NaNAfter", trainer_kwargs={"nan_at": 10}, weight_sync_every=5)
    with pytest.raises(LearnerError) as info:
        parallel(cfg, setting).run()
    msg = str(info.value)
    assert "DataError: learner: after update 10, trainer.get_weights()['weight']" in msg
    assert "not published to the actors nor checkpointed" in msg
    ck = finite_checkpoint(tmp_path)  # the weights last published (update 5)
    assert ck.state.updates >= 5


def test_serial_nan_weights_end_the_run_naming_the_update_and_keep_the_last_good_weights(tmp_path):
    cfg = config(tmp_path, trainer="faulty_envs:NaNAfter", trainer_kwargs={"nan_at": 10})
    with pytest.raises(LearnerError, match=r"after update (10|11)"):
        serial(cfg).run()
    finite_checkpoint(tmp_path)


# --------------------------------------------------------------------------- priorities


def test_priorities_whose_total_would_overflow_are_rejected_and_the_tree_stays_usable():
    spec = StorageSpec(obs_shape=(2,), obs_dtype=np.float32, action_shape=(), action_dtype=np.int64)
    rm = PrioritizedReplay(DataStorage(spec, 8), ReferenceSumTree(8, 2), alpha=1.0, rng=0)
    rows = (np.zeros((4, 2), np.float32), np.zeros(4, np.int64), np.ones(4, np.float32), np.zeros((4, 2), np.float32),
            np.zeros(4, np.bool_))
    rm.add(*rows)
    rm.update_priorities([0, 1], [3.0, 4.0])
    before = rm.tree.total()
    with pytest.raises(InvalidValueError, match=r"td_errors\[0\] = 1e\+308 gives priority .* above the limit"):
        rm.update_priorities([2, 3], [1e308, 1e308])
    assert rm.tree.total() == before and rm.max_priority == 4.0 + 1e-6  # nothing changed
    rm.add(*rows)  # new rows still enter at the running max
    sampled = rm.sample(4)
    assert np.isfinite(rm.tree.total()) and (sampled.weights > 0).all()
    rm.update_priorities([0], [rm.priority_limit * 0.5])  # below the limit: accepted
    assert np.isfinite(rm.tree.total())


@pytest.mark.parametrize("setting", [0, 1, 2])  # 0: the serial runtime
def test_overflowing_priorities_end_a_run_with_a_clear_error(tmp_path, setting):
    cfg = config(tmp_path, trainer="faulty_envs:HugeTD", replay=ReplayConfig(capacity=2048, alpha=1.0))
    expected = HostError if setting == 1 else LearnerError  # setting 1 applies priorities in the host
    with pytest.raises(expected) as info:
        (serial(cfg) if setting == 0 else parallel(cfg, setting)).run()
    msg = str(info.value)
    assert "above the limit" in msg and "keeps the tree's total finite" in msg
    if setting == 1:
        assert "applying the priorities of trained batch" in msg and info.value.component == "host"
    finite_checkpoint(tmp_path)


# =========================================================================== 2. failures end like worker failures


EVAL_STOP = StopCriteria(eval_return=1e9, eval_every=100, eval_episodes=2, max_env_steps=400)


@pytest.mark.parametrize("setting", [0, 1, 2])
def test_an_evaluation_that_fails_ends_the_run_with_a_checkpoint(tmp_path, setting):
    cfg = config(tmp_path, env_id("RaiseInEval-v0"), stop=EVAL_STOP)
    with pytest.raises(EvaluationError) as info:
        (serial(cfg) if setting == 0 else parallel(cfg, setting)).run()
    err = info.value
    assert "greedy evaluation" in str(err) and "RuntimeError: FaultyCartPole: step 5 failed on purpose" in str(err)
    assert "in env.step of evaluation environment" in str(err)
    assert err.component == "evaluation" and "FaultyCartPole" in err.traceback_text
    ck = finite_checkpoint(tmp_path)
    assert ck.state.env_steps >= 100


def test_a_serial_env_that_raises_ends_the_run_as_an_actor_failure(tmp_path):
    cfg = config(tmp_path, env_id("RaiseInStep-v0"), save_replay=True)
    with pytest.raises(ActorError, match="the serial runtime's actor failed at env step 39") as info:
        serial(cfg).run()
    assert "RuntimeError: FaultyCartPole: step 40" in str(info.value) and "step" in info.value.traceback_text
    assert checkpoint(tmp_path).replay["size"] == 39


class _Boom(RuntimeError):
    pass


def _raise_on_call(k):
    calls = {"n": 0}

    def patched(orig):
        def wrapper(*a, **kw):
            calls["n"] += 1
            if calls["n"] == k:
                raise _Boom(f"injected host failure (call {k})")
            return orig(*a, **kw)
        return wrapper
    return patched


@pytest.mark.parametrize("setting", SETTINGS)
def test_an_error_in_the_host_loop_ends_the_run_with_a_host_error_and_a_checkpoint(tmp_path, setting, monkeypatch):
    from pearl_core.runtime import roles

    cls = roles.ThroughHost if setting == 1 else roles.Colocated
    monkeypatch.setattr(cls, "on_reply", _raise_on_call(3)(cls.on_reply))
    rt = parallel(config(tmp_path), setting)
    with pytest.raises(HostError) as info:
        rt.run()
    err = info.value
    assert err.component == "host" and isinstance(err.__cause__, _Boom)
    assert f"the host of the parallel run (setting {setting}) failed while " in str(err)
    assert "_Boom: injected host failure" in str(err) and "wrapper" in err.traceback_text
    ck = finite_checkpoint(tmp_path)
    assert ck.state.env_steps > 0
    assert any(who == "host" for _, who, _ in rt.faults)


def test_an_error_in_the_serial_loop_ends_the_run_with_a_host_error_and_a_checkpoint(tmp_path, monkeypatch):
    from pearl_core.runtime.session import RunSession

    monkeypatch.setattr(RunSession, "tick", _raise_on_call(100)(RunSession.tick))
    with pytest.raises(HostError, match="the serial runtime failed while logging") as info:
        serial(config(tmp_path)).run()
    assert isinstance(info.value.__cause__, _Boom)
    assert checkpoint(tmp_path).state.env_steps == 100


# =========================================================================== 3. stall watchdog


@pytest.mark.parametrize("setting", SETTINGS)
def test_an_actor_frozen_in_env_step_is_reported_as_stalled(tmp_path, setting):
    cfg = config(tmp_path, env_id("BlockInStep-v0"))
    rt = parallel(cfg, setting, stall_timeout_s=2.0)
    t = time.monotonic()
    with pytest.raises(StallError) as info:
        rt.run()
    assert time.monotonic() - t < 60
    err = info.value
    assert err.role == "actor 0" and err.pid and err.doing == "in env.step of environment 0"
    assert f"the actor 0 (pid {err.pid}) made no progress for" in str(err)
    assert "it was last in env.step of environment 0" in str(err) and "stall_timeout_s" in str(err)
    ck = finite_checkpoint(tmp_path)  # the learner's state: it was sound
    assert 0 < ck.state.env_steps <= 39  # the rows the actor shipped before it froze


@pytest.mark.parametrize("setting", SETTINGS)
def test_a_frozen_learner_is_reported_as_stalled_and_the_last_published_weights_are_saved(tmp_path, setting):
    cfg = config(tmp_path, trainer="faulty_envs:FreezeLearner", trainer_kwargs={"freeze_at": 3})
    rt = parallel(cfg, setting, stall_timeout_s=3.0)
    t = time.monotonic()
    with pytest.raises(StallError) as info:
        rt.run()
    assert time.monotonic() - t < 60
    err = info.value
    assert err.role == "learner" and err.doing == "in trainer.update_policy (update 3)"
    assert "the checkpoint holds the weights last published to the actors" in str(err)
    finite_checkpoint(tmp_path)


def test_a_frozen_evaluation_is_reported(tmp_path):
    cfg = config(tmp_path, env_id("BlockInEval-v0"), stop=StopCriteria(eval_return=1e9, eval_every=100,
                                                                          eval_episodes=1, max_env_steps=100_000))
    with pytest.raises(EvaluationError, match=r"made no progress for \d+ s \(stall_timeout_s=2\); it was last in "
                                              r"env.step of evaluation environment 0"):
        parallel(cfg, 1, stall_timeout_s=2.0).run()
    finite_checkpoint(tmp_path)


def test_stall_timeout_is_checked():
    cfg = RunConfig(env_id="CartPole-v1", trainer="faulty_envs:LinearQ")
    for bad in (0, -1.0, float("nan"), "10", True):
        with pytest.raises(SpecError, match="stall_timeout_s"):
            ParallelRuntime(cfg, stall_timeout_s=bad)
    assert ParallelRuntime(cfg, stall_timeout_s=None).stall_timeout_s is None
    assert ParallelRuntime(cfg).stall_timeout_s == 120.0


# --------------------------------------------------------------------------- Ctrl-C with a frozen learner


FROZEN = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {here!r})
    from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
    from pearl_core.runtime.parallel import ParallelRuntime

    if __name__ == "__main__":
        cfg = RunConfig(env_id="CartPole-v1", trainer="faulty_envs:FreezeLearner",
                        trainer_kwargs={{"freeze_at": 3, "marker": {marker!r}}}, batch_size=16, learning_starts=32,
                        replay=ReplayConfig(capacity=4096), stop=StopCriteria(max_env_steps=10_000_000),
                        log_dir={log_dir!r})
        plan = RuntimePlan(setting={setting}, n_actors=2, envs_per_actor=1, insert_batch=8, queue_size=4)
        ParallelRuntime(cfg, plan, progress=False, plot=False, tensorboard=False).run()
    """
)


def _alive(pids):
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                    out.append(pid)
        except FileNotFoundError:
            pass
    return out


@pytest.mark.slow
@pytest.mark.parametrize("setting", SETTINGS)
def test_sigint_with_a_frozen_learner_ends_within_seconds_with_a_checkpoint(tmp_path, setting):
    marker, log_dir = str(tmp_path / "frozen"), str(tmp_path / "run")
    script = tmp_path / "frozen.py"
    script.write_text(FROZEN.format(here=HELPERS, marker=marker, log_dir=log_dir, setting=setting))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not os.path.exists(marker):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the learner never froze"
            time.sleep(0.05)
        workers = child_pids(proc.pid)
        t = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=90)
        took = time.monotonic() - t
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert took < 60, f"Ctrl-C took {took:.0f} s"  # was 130-190 s, and no checkpoint
    assert proc.returncode != 0
    assert "StallError: the learner (pid" in err and "did not answer a state request" in err, err[-3000:]
    assert "after SIGINT" in err
    assert "in trainer.update_policy (update 3)" in err
    ck = load_checkpoint(os.path.join(log_dir, "checkpoint.pt"))
    assert ck.state.env_steps > 0 and nonfinite_in(ck.trainer_state) is None
    deadline = time.monotonic() + 30
    while _alive(workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive(workers) == [] and list_segments(proc.pid) == []


# --------------------------------------------------------------------------- a script from stdin


STDIN_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {here!r})
    from pearl_core.runtime.config import RunConfig, RuntimePlan, StopCriteria
    from pearl_core.runtime.parallel import ParallelRuntime

    cfg = RunConfig(env_id="CartPole-v1", trainer="faulty_envs:LinearQ", stop=StopCriteria(max_env_steps=200),
                    log_dir={log_dir!r})
    ParallelRuntime(cfg, RuntimePlan(setting=2), progress=False, plot=False, tensorboard=False).run()
    """
)


def test_a_script_from_stdin_is_refused_before_any_worker_starts(tmp_path):
    log_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-"], input=STDIN_SCRIPT.format(here=HELPERS, log_dir=str(log_dir)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "SpecError: the parallel runtime cannot start its workers: the main module's file is '<stdin>'" \
        in proc.stderr, proc.stderr[-2000:]
    assert "Fix: save the script to a file and run `python script.py`" in proc.stderr
    assert "killed by a signal" not in proc.stderr
    assert not log_dir.exists()  # refused before anything was written


def test_every_new_error_is_a_pearl_error():
    for cls in (DataError, HostError, EvaluationError, StallError):
        assert issubclass(cls, PearlError)
    assert issubclass(DataError, ValueError)
    assert faulty_envs.NAMESPACE == "PearlFaulty"


def test_insert_buffer_refuses_a_nonfinite_reward_and_keeps_what_it_staged():
    from pearl_core.runtime.acting import InsertBuffer

    spec = StorageSpec(obs_shape=(2,), obs_dtype=np.float32, action_shape=(), action_dtype=np.int64)
    rm = PrioritizedReplay(DataStorage(spec, 8), ReferenceSumTree(8, 2), rng=0)
    buf = InsertBuffer(spec, 4)

    def rows(*rewards):
        k = len(rewards)
        return (np.zeros((k, 2), np.float32), np.zeros(k, np.int64), np.array(rewards, np.float64),
                np.zeros((k, 2), np.float32), np.zeros(k, np.bool_))

    buf.push(rm, *rows(1.0, 2.0))
    with pytest.raises(DataError, match=r"reward\[1\] = 1e\+39 is not finite \(as float32\).*Nothing of this push"):
        buf.push(rm, *rows(3.0, 1e39))
    assert len(buf) == 2 and buf.flush(rm) == 2 and rm.size == 2  # the good rows reach the replay
