"""Data sanity (:mod:`pearl_core.runtime.sanity`, the collector and the insert buffer): non-finite data stops a
run after a checkpoint (naming env, actor and step) or is dropped and counted; NaN weights are never
published nor checkpointed; priorities whose total would overflow are refused.

Fault injection with tiny budgets (CartPole, a few hundred env steps): the misbehaving environments and
trainers are in ``tests/helpers/faulty_envs.py``. Each run that fails must raise a :class:`PearlError`
naming the component, after a checkpoint of what is sound, and leave no process or shared-memory segment
behind (``no_leaks``).
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from fault_runs import SETTINGS, checkpoint, config, finite_checkpoint, parallel, serial
from faulty_envs import env_id

from pearl_core.errors import (
    DataError,
    HostError,
    InvalidValueError,
    LearnerError,
)
from pearl_core.replay.prioritized import PrioritizedReplay
from pearl_core.replay.storage import DataStorage, StorageSpec
from pearl_core.runtime.acting import Collector
from pearl_core.runtime.config import ReplayConfig
from pearl_core.testing import ReferenceSumTree

pytestmark = pytest.mark.usefixtures("no_leaks")


# =========================================================================== data sanity
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
