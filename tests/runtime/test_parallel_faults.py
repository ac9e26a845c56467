"""Faults and shutdown of the parallel runtime: dead and raising actors, a failing or
killed learner, Ctrl-C / SIGTERM, and a host killed outright.

Waits are bounded by generous timeouts that only turn a hang into a failure; no
assertion depends on how fast anything happens.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pearl_core.errors import PearlError
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
from pearl_core.runtime.checkpoint import load_checkpoint
from pearl_core.runtime.parallel import ActorError, LearnerError, ParallelRuntime
from pearl_core.runtime.shm import list_segments
from conftest import HELPERS, child_pids

pytestmark = pytest.mark.usefixtures("no_leaks")

PLAN = RuntimePlan(setting=1, n_actors=2, envs_per_actor=1, insert_batch=8, queue_size=4)


def config(tmp_path, trainer, steps=400, **kw) -> RunConfig:
    return RunConfig(env_id="CartPole-v1", trainer=trainer, trainer_kwargs=kw, batch_size=16, learning_starts=32,
                     replay=ReplayConfig(capacity=2048), stop=StopCriteria(max_env_steps=steps),
                     log_dir=str(tmp_path / "run"))


def runtime(cfg, plan=PLAN, **kw) -> ParallelRuntime:
    return ParallelRuntime(cfg, plan, progress=False, plot=False, tensorboard=False, **kw)


# --------------------------------------------------------------------------- actors


def test_killed_actor_is_restarted_and_the_run_completes(tmp_path, caplog):
    marker = str(tmp_path / "killed-once")
    cfg = config(tmp_path, "runtime_support:KillOnce", kill_at=100, marker=marker)
    rt = runtime(cfg, RuntimePlan(setting=1, n_actors=1, envs_per_actor=2, insert_batch=8, queue_size=4))
    with caplog.at_level(logging.WARNING, logger="pearl_core.runtime.parallel"):
        res = rt.run()
    assert os.path.exists(marker)  # an actor did SIGKILL itself
    assert res.stop_reason == "max_env_steps" and res.env_steps == 400
    assert len(rt.faults) == 1
    assert "exited with code -9" in rt.faults[0][2]
    assert any("restarting it" in r.getMessage() for r in caplog.records)
    assert load_checkpoint(res.checkpoint_path).extra["actor_restarts"] == [1]


def test_raising_actor_is_restarted_up_to_the_limit_then_fails(tmp_path):
    cfg = config(tmp_path, "runtime_support:RaisingActor", raise_at=60)
    plan = RuntimePlan(setting=2, n_actors=1, envs_per_actor=2, insert_batch=8, queue_size=4)
    rt = runtime(cfg, plan, max_restarts=1)
    with pytest.raises(ActorError) as info:
        rt.run()
    err = info.value
    assert isinstance(err, PearlError)
    assert "actor exploded at env step" in str(err)
    assert "ValueError" in err.traceback_text and err.exitcode == 1
    assert "max_restarts=1" in str(err)
    assert len(rt.faults) == 2  # the first start and the restart both failed
    assert os.path.exists(tmp_path / "run" / "checkpoint.pt")


# --------------------------------------------------------------------------- learner


@pytest.mark.parametrize("setting", [1, 2])
def test_learner_exception_is_reraised_with_its_traceback_and_a_checkpoint(tmp_path, setting):
    cfg = config(tmp_path, "runtime_support:FailingLearner", fail_at=5)
    plan = RuntimePlan(setting=setting, n_actors=1, envs_per_actor=2, insert_batch=8, queue_size=4)
    with pytest.raises(LearnerError) as info:
        runtime(cfg, plan).run()
    err = info.value
    assert "boom in update 5" in str(err)
    assert "RuntimeError: boom in update 5" in err.traceback_text
    assert "update_policy" in err.traceback_text
    ck = load_checkpoint(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    assert ck.state.updates == 4  # the updates that finished before the failure


def test_killed_learner_stops_the_run(tmp_path):
    cfg = config(tmp_path, "runtime_support:KillLearner", kill_at=3)
    with pytest.raises(LearnerError) as info:
        runtime(cfg).run()
    assert info.value.exitcode == -signal.SIGKILL
    assert "exited with code -9" in str(info.value)
    assert os.path.exists(tmp_path / "run" / "checkpoint.pt")


# --------------------------------------------------------------------------- signals


SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {here!r})
    from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
    from pearl_core.runtime.parallel import ParallelRuntime

    if __name__ == "__main__":
        cfg = RunConfig(env_id="CartPole-v1", trainer="runtime_support:SlowLearner", batch_size=16,
                        learning_starts=32, replay=ReplayConfig(capacity=4096),
                        stop=StopCriteria(max_env_steps=10_000_000), log_dir={log_dir!r}, save_replay=True)
        plan = RuntimePlan(setting={setting}, n_actors=2, envs_per_actor=1, insert_batch=8, queue_size=4)
        res = ParallelRuntime(cfg, plan, progress=False, plot=False, tensorboard=False, metrics_every=16).run()
        print("RESULT", res.stop_reason, res.env_steps, res.updates, res.checkpoint_path, flush=True)
    """
)


def _start_run(tmp_path, setting: int) -> tuple[subprocess.Popen, list[int]]:
    """Start a long run in a subprocess; return it once it trains, with its workers' pids."""
    log_dir = str(tmp_path / "run")
    script = tmp_path / "run_forever.py"
    script.write_text(SCRIPT.format(here=HELPERS, log_dir=log_dir, setting=setting))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    metrics = os.path.join(log_dir, "metrics.csv")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # wait until it has logged a few metric rows (it is training)
        if proc.poll() is not None:
            pytest.fail(f"the run ended early: {proc.communicate()}")
        try:
            with open(metrics) as fh:
                if sum(1 for _ in fh) > 3:
                    break
        except FileNotFoundError:
            pass
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("the run never started training")
    workers = child_pids(proc.pid)
    assert len(workers) == 3  # two actors and the learner
    return proc, workers


def _gone(pids: list[int], timeout: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                        alive.append(pid)
            except FileNotFoundError:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
@pytest.mark.parametrize("sig,setting", [(signal.SIGINT, 1), (signal.SIGTERM, 2)])
def test_interrupt_stops_cleanly_with_a_final_checkpoint(tmp_path, sig, setting):
    proc, workers = _start_run(tmp_path, setting)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    line = [ln for ln in out.splitlines() if ln.startswith("RESULT")][0]
    _, reason, env_steps, updates, path = line.split()
    assert reason == "interrupted"
    ck = load_checkpoint(path)
    assert ck.state.env_steps == int(env_steps) > 0 and ck.state.updates == int(updates)
    assert ck.replay is not None and ck.replay["size"] == int(env_steps)
    assert _gone(workers) == []
    assert list_segments(proc.pid) == []


def test_workers_exit_when_the_host_is_killed(tmp_path):
    proc, workers = _start_run(tmp_path, 1)
    proc.kill()
    proc.communicate(timeout=60)
    assert _gone(workers) == []  # each worker notices its parent is gone and exits
    # The resource tracker of the dead host unlinks its segments.
    deadline = time.monotonic() + 30
    while list_segments(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list_segments(proc.pid) == []


NO_GUARD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {here!r})
    from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
    from pearl_core.runtime.parallel import ParallelRuntime

    cfg = RunConfig(env_id="CartPole-v1", trainer="runtime_support:LinearQ", batch_size=16,
                    learning_starts=32, replay=ReplayConfig(capacity=512), stop=StopCriteria(max_env_steps=200),
                    log_dir={log_dir!r})
    ParallelRuntime(cfg, RuntimePlan(setting=2, n_actors=1, envs_per_actor=1), progress=False, plot=False,
                    tensorboard=False).run()
    """
)


def test_a_script_without_the_main_guard_fails_with_the_fix(tmp_path):
    # Workers re-import the script; without the guard each would start a run of its own.
    script = tmp_path / "no_guard.py"
    script.write_text(NO_GUARD.format(here=HELPERS, log_dir=str(tmp_path / "run")))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    # the learner or the actor fails first, whichever it is says what to do
    assert ("LearnerError" in proc.stderr or "ActorError" in proc.stderr), proc.stderr[-2000:]
    assert 'under `if __name__ == "__main__":`' in proc.stderr
    assert "can only join a started process" not in proc.stderr  # the cleanup no longer hides the cause


# --------------------------------------------------------------------------- found by the soak


@pytest.mark.parametrize("setting", [1, 2])
@pytest.mark.parametrize("steps", [401, 405])
def test_a_budget_the_vector_steps_do_not_divide_is_reached(tmp_path, setting, steps):
    """Two envs per actor and an odd budget: actors used to wait for room for two rows that never came."""
    cfg = config(tmp_path, "runtime_support:LinearQ", steps=steps)
    plan = RuntimePlan(setting=setting, n_actors=2, envs_per_actor=2, insert_batch=8, queue_size=4)
    res = runtime(cfg, plan, stall_timeout_s=60).run()
    assert res.stop_reason == "max_env_steps" and res.env_steps == steps


@pytest.mark.parametrize("checkpoint_every", [100, None])
def test_a_killed_colocated_worker_loses_no_experience(tmp_path, checkpoint_every):
    """Setting 2 with save_replay: the replay dies with the worker; the host rebuilds it from the last
    checkpoint (or none) and its journal of every row forwarded since, so every counted row is saved."""
    from pearl_core.runtime.checkpoint import load_checkpoint

    cfg = dataclasses.replace(config(tmp_path, "runtime_support:KillLearner", steps=4_000, kill_at=60),
                              save_replay=True, checkpoint_every=checkpoint_every, learning_starts=300)
    with pytest.raises(LearnerError, match="exited with code -9"):
        runtime(cfg, RuntimePlan(setting=2, n_actors=1, insert_batch=8, queue_size=4)).run()
    ck = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert ck.replay is not None and ck.replay["size"] == ck.state.env_steps > 300  # past the last periodic one
    assert ck.state.env_steps % 100 != 0 or checkpoint_every is None
    # and the run resumes from it, with the rows it had
    cfg2 = dataclasses.replace(cfg, trainer_kwargs={"kill_at": 10**9},
                               stop=StopCriteria(max_env_steps=ck.state.env_steps + 200))
    res = runtime(cfg2, RuntimePlan(setting=2, n_actors=1, insert_batch=8, queue_size=4),
                  resume_from=tmp_path / "run" / "checkpoint.pt").run()
    ck2 = load_checkpoint(res.checkpoint_path)
    assert ck2.replay["size"] == ck2.state.env_steps == ck.state.env_steps + 200
    assert (ck2.replay["obs"][:ck.replay["size"]] == ck.replay["obs"]).all()
