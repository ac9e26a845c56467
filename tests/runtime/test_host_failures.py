"""Every failure ends like a worker failure (:mod:`pearl_core.runtime.host`): a failing evaluation, a raising
serial env, an error in the host or serial loop end the run with a named error and a checkpoint.
"""

from __future__ import annotations

import pytest
from fault_runs import SETTINGS, checkpoint, config, finite_checkpoint, parallel, serial
from faulty_envs import env_id

from pearl_core.errors import (
    ActorError,
    EvaluationError,
    HostError,
)
from pearl_core.runtime.config import StopCriteria

pytestmark = pytest.mark.usefixtures("no_leaks")


# =========================================================================== failures end like worker failures


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


@pytest.mark.parametrize("setting", SETTINGS)
def test_a_learner_killed_after_the_runs_last_state_is_named_in_the_log(tmp_path, setting, monkeypatch, caplog):
    """A kill that lands while the final checkpoint is written (the soak's segment 52, 2026-12-05): the run's
    work is in that checkpoint, so it ends normally, and the log names the dead learner (not silence)."""
    import os
    import signal

    from pearl_core.runtime.host import Host

    orig = Host.stop_workers

    def kill_first(self):
        proc = self.learner_proc
        if proc is not None and proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(10)
        return orig(self)

    monkeypatch.setattr(Host, "stop_workers", kill_first)
    with caplog.at_level("WARNING", logger="pearl_core.runtime.parallel"):
        result = parallel(config(tmp_path), setting).run()
    assert result.stop_reason == "max_env_steps"
    assert "the learner (pid" in caplog.text and "exited with code -9 before the run stopped its workers" in caplog.text
    assert checkpoint(tmp_path).state.env_steps == result.env_steps


@pytest.mark.parametrize("setting", SETTINGS)
def test_a_failed_host_waits_a_bounded_time_for_work_in_flight(tmp_path, setting, monkeypatch):
    """A host that fails while applying a reply has taken that reply off the LDQ without applying it, so its count
    of batches in flight never drops to zero: its failure path gave them the whole reply deadline (120 s) before
    asking the learner for its state, under load 2 runs in 10 of the test above. It now gives them
    FAIL_QUIESCE_S."""
    import time

    from pearl_core.runtime import roles
    from pearl_core.runtime.host import Host
    from pearl_core.runtime.hostfaults import FAIL_QUIESCE_S

    cls = roles.ThroughHost if setting == 1 else roles.Colocated
    monkeypatch.setattr(cls, "on_reply", _raise_on_call(3)(cls.on_reply))
    waits = []
    orig = Host._quiesce

    def record(self, deadline=None):
        waits.append(None if deadline is None else deadline - time.monotonic())
        return orig(self, deadline)

    monkeypatch.setattr(Host, "_quiesce", record)
    with pytest.raises(HostError):
        parallel(config(tmp_path), setting).run()
    assert waits and all(w is not None and w <= FAIL_QUIESCE_S + 0.5 for w in waits), waits
    assert finite_checkpoint(tmp_path).state.env_steps > 0
