"""The stall watchdog (:mod:`pearl_core.runtime.watchdog`): a frozen actor, learner or evaluation is reported as
stalled, the last published weights saved; Ctrl-C with a frozen learner ends within seconds with a checkpoint.

Waits are bounded by generous timeouts that only turn a hang into a failure; no assertion depends on speed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import HELPERS, child_pids
from fault_runs import SETTINGS, config, finite_checkpoint, parallel
from faulty_envs import env_id

from pearl_core.errors import (
    EvaluationError,
    SpecError,
    StallError,
)
from pearl_core.runtime.checkpoint import load_checkpoint
from pearl_core.runtime.config import RunConfig, StopCriteria
from pearl_core.runtime.parallel import ParallelRuntime
from pearl_core.runtime.sanity import nonfinite_in
from pearl_core.runtime.shm import list_segments

pytestmark = pytest.mark.usefixtures("no_leaks")


# =========================================================================== stall watchdog


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
