"""A third-party LAQ/LDQ transport that loses a message, in real parallel runs (issue 43).

Before, in setting 2 the lost Forward's transitions never reached the replay and the run ended 0 silently; in
setting 1 a lost reply froze the run until the stall watchdog blamed the learner. Now the core's sequence
numbers and counts (pearl_core.runtime.queues.SequencedQueue) end the run with a TransportError naming the
transport, after a checkpoint, within seconds.
"""

from __future__ import annotations

import time

import pytest

from pearl_core.errors import TransportError
from pearl_core.placement import backend_for_device
from pearl_core.runtime.checkpoint import load_checkpoint
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
from pearl_core.runtime.parallel import ParallelRuntime
from pearl_core.testing.transports import FaultyTransport

from cpu_backend import needs_cpu_backend
from fault_runs import SETTINGS, checkpoint, config, drop_of_kind, parallel

pytestmark = [needs_cpu_backend, pytest.mark.usefixtures("no_leaks")]


def _faulty(monkeypatch, role: str, drop: int) -> None:
    """The CPU backend's transport for ``role`` becomes a FaultyTransport losing put number ``drop``."""
    _, backend = backend_for_device("cpu", "learner transport")

    def make_transport(self, r, maxsize, ctx):
        return FaultyTransport(maxsize, ctx, drop=drop) if r == role else None

    monkeypatch.setattr(type(backend), "make_transport", make_transport)


def _run(tmp_path, setting: int):
    cfg = RunConfig(env_id="CartPole-v1", trainer="runtime_support:LinearQ", batch_size=16, learning_starts=64,
                    replay=ReplayConfig(capacity=4096), replay_ratio=0.5,
                    stop=StopCriteria(max_env_steps=100_000), log_dir=str(tmp_path / "run"))
    plan = RuntimePlan(setting=setting, n_actors=1, envs_per_actor=2, insert_batch=16, queue_size=4)
    rt = ParallelRuntime(cfg, plan, progress=False, plot=False, tensorboard=False, stall_timeout_s=60)
    t = time.monotonic()
    with pytest.raises(TransportError) as err:
        rt.run()
    return rt, err.value, time.monotonic() - t, tmp_path / "run" / "checkpoint.pt"


def test_setting_2_a_lost_forward_ends_the_run_with_a_transport_error_and_a_checkpoint(tmp_path, monkeypatch):
    _faulty(monkeypatch, "laq", drop=6)  # a Forward: 16 transitions that would never reach the replay
    rt, err, took, ck = _run(tmp_path, 2)
    assert "the LAQ transport" in str(err) and "FaultyTransport" in str(err) and "backend 'cpu'" in str(err)
    assert "message 6 was lost" in str(err) and err.queue == "LAQ"
    assert took < 30  # not a hang
    assert any(who == "transport" for _, who, _ in rt.faults)
    assert load_checkpoint(ck).state.env_steps > 0


def test_setting_1_a_lost_reply_ends_the_run_with_a_transport_error_and_a_checkpoint(tmp_path, monkeypatch):
    _faulty(monkeypatch, "ldq", drop=3)  # a Trained reply, after LearnerReady: the host would wait for it forever
    rt, err, took, ck = _run(tmp_path, 1)
    assert "the LDQ transport" in str(err) and "FaultyTransport" in str(err)
    assert "message 3 was lost" in str(err) or "(from message 3 on) never arrived" in str(err)
    assert err.queue == "LDQ" and err.expected == 3
    assert took < 30  # the grace period (3 s), not the 60 s stall timeout
    state = load_checkpoint(ck).state
    assert state.env_steps > 0 and state.updates >= 2  # the learner's own state, asked after the fault


# -- a message lost in the run's last seconds: the end-of-run check (SequencedQueue.settle) -----------------


def _ends_with_transport_error(tmp_path, setting):
    rt = parallel(config(tmp_path, trainer="runtime_support:LinearQ", save_replay=True), setting)
    with pytest.raises(TransportError) as err:
        rt.run()
    ck = checkpoint(tmp_path)  # the final checkpoint, kept as it was written before the check
    assert ck.state.env_steps == 400 and ck.replay is not None and ck.replay["size"] == 400  # nothing lost
    assert any(who == "transport" for _, who, _ in rt.faults)
    return err.value


@pytest.mark.slow  # a few seconds: the lost message is waited for (grace_s) before it counts as lost
@pytest.mark.parametrize("setting", SETTINGS)
def test_a_lost_final_stop_is_a_transport_error_after_the_final_checkpoint(tmp_path, monkeypatch, setting):
    # The host's last message: the learner stops on the stop flag anyway, and before, nothing compared the
    # count sent with the count received at the end, so the run ended 0 (the soak's segment 52).
    drop_of_kind(monkeypatch, grace_s=1.0, laq="Stop")
    err = _ends_with_transport_error(tmp_path, setting)
    assert err.queue == "LAQ" and "the LAQ transport fault_runs.DropOfKind" in str(err) and "backend 'cpu'" in str(err)
    assert "message(s) sent (from message" in str(err) and "never arrived: when the run ended" in str(err)


@pytest.mark.slow
def test_a_lost_last_message_of_the_learner_is_a_transport_error_of_the_ldq(tmp_path, monkeypatch):
    # The LAQ loses the Stop and the LDQ the learner's report of it (its last message): the host's own check of
    # the LDQ, once the learner has exited, finds one message counted as sent that never arrived.
    drop_of_kind(monkeypatch, grace_s=1.0, laq="Stop", ldq="LearnerFailed")
    err = _ends_with_transport_error(tmp_path, 1)
    assert err.queue == "LDQ" and "the LDQ transport fault_runs.DropOfKind" in str(err)
    assert "1 message(s) sent" in str(err) and "never arrived: when the run ended" in str(err)
