"""The parallel runtime end to end: both protocol settings, PER feedback, agreement
with the serial oracle, the replay-ratio throttle, and the request/reply RRQ.

Every test runs real processes on tiny budgets and checks that no child process
and no shared-memory segment outlives it. No assertion depends on wall-clock time.
"""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from pearl_core.errors import SpecError
import pearl_core
from pearl_core.replay import DataStorage, PrioritizedReplay, StorageSpec
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
from pearl_core.runtime.checkpoint import load_checkpoint
from pearl_core.runtime.parallel import ParallelRuntime
from pearl_core.runtime.roles import batch_fields
from pearl_core.runtime.rrq import InProcessRRQ, make_rrq
from pearl_core.runtime.step import LearnerStep
from pearl_core.runtime.procs import START_METHOD_ENV
from pearl_core.runtime.serial import SerialRuntime

pytestmark = pytest.mark.usefixtures("no_leaks")

FIELDS = ("obs", "action", "reward", "next_obs", "done")
LS, TE, RATIO = 64, 32, 0.5


def config(tmp_path, name="run", trainer="runtime_support:LinearQ", steps=512, **kw) -> RunConfig:
    kw.setdefault("replay", ReplayConfig(capacity=4096))
    kw.setdefault("save_replay", True)
    return RunConfig(env_id="CartPole-v1", trainer=trainer, batch_size=16, learning_starts=LS, train_every=TE,
                     replay_ratio=RATIO, stop=StopCriteria(max_env_steps=steps), log_dir=str(tmp_path / name), **kw)


def owed(steps: int) -> int:
    return math.floor((steps - LS) * RATIO)


def run_parallel(cfg, plan, **kw):
    rt = ParallelRuntime(cfg, plan, progress=False, plot=False, tensorboard=False, **kw)
    return rt, rt.run()


def run_serial(cfg, plan):
    return SerialRuntime(cfg, plan, progress=False, plot=False, tensorboard=False).run()


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# --------------------------------------------------------------------------- end to end


@pytest.mark.parametrize("setting", [1, 2])
def test_tiny_run_end_to_end(tmp_path, setting):
    cfg = config(tmp_path)
    plan = RuntimePlan(setting=setting, n_actors=2, envs_per_actor=2, insert_batch=16, queue_size=4)
    rt, res = run_parallel(cfg, plan)
    assert res.stop_reason == "max_env_steps"
    assert res.env_steps == 512  # exactly the budget: surplus rows are cut, partial slots flushed
    assert res.updates == owed(512)  # exactly what the inserted steps owe
    assert res.episodes > 0 and res.final_mean_return is not None
    assert res.learner_time_s > 0
    assert rt.faults == []
    ck = load_checkpoint(res.checkpoint_path)
    assert ck.state.env_steps == 512 and ck.state.updates == owed(512)
    assert ck.extra["runtime"] == "parallel" and ck.extra["setting"] == setting
    assert ck.replay["size"] == 512
    log_dir = tmp_path / "run"
    assert len(read_csv(log_dir / "episodes.csv")) == res.episodes
    assert read_csv(log_dir / "metrics.csv")
    if setting == 2:  # where the worker's time went, per phase, up to its last progress report
        from pearl_core.runtime.learner import PHASES

        ph = res.learner_phases_s
        assert tuple(ph) == PHASES and all(v >= 0 for v in ph.values())
        assert ph["train"] > 0 and ph["sample"] > 0 and ph["insert"] > 0
        assert ph["train"] <= res.learner_time_s  # the report is from before the worker's last updates
    else:
        assert res.learner_phases_s == {}


@pytest.mark.parametrize("setting", [1, 2])
def test_ddpg_actors_take_continuous_actions(tmp_path, setting):
    # The authors' prototype had DDPG actors take discrete actions; ours store the policy's
    # continuous, clipped actions (Pendulum: one torque in [-2, 2]).
    cfg = RunConfig(env_id="Pendulum-v1", trainer="pearl_core.algorithms:DDPG",
                    trainer_kwargs={"actor_hidden": [16], "critic_hidden": [16]},
                    replay=ReplayConfig(kind="prioritized", capacity=1_000), batch_size=16, learning_starts=LS,
                    train_every=TE, replay_ratio=RATIO, stop=StopCriteria(max_env_steps=256),
                    log_dir=str(tmp_path / "ddpg"), save_replay=True)
    plan = RuntimePlan(setting=setting, n_actors=1, envs_per_actor=2, insert_batch=16, queue_size=4)
    rt, res = run_parallel(cfg, plan)
    assert res.env_steps == 256 and res.updates == owed(256) and rt.faults == []
    actions = load_checkpoint(res.checkpoint_path).replay["action"]
    assert actions.shape == (256, 1) and actions.dtype.kind == "f"
    assert np.all(np.abs(actions) <= 2.0)
    assert np.unique(np.round(actions, 4)).size > 50  # a continuum, not a handful of discrete values


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_both_start_methods_run_and_report_their_start_up(tmp_path, monkeypatch, method):
    # The fork server is the default (pearl_core.runtime.procs); spawn stays supported.
    monkeypatch.setenv(START_METHOD_ENV, method)
    plan = RuntimePlan(setting=2, n_actors=1, envs_per_actor=2, insert_batch=16, queue_size=4)
    rt, res = run_parallel(config(tmp_path, steps=256), plan)
    assert res.env_steps == 256 and res.updates == owed(256) and rt.faults == []
    assert res.startup_s > 0  # the processes' start-up, outside the run clock


def test_a_bad_start_method_is_refused_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.setenv(START_METHOD_ENV, "fork")
    plan = RuntimePlan(setting=2, n_actors=1, envs_per_actor=1)
    with pytest.raises(SpecError, match=r"PEARL_START_METHOD='fork'.*expected one of \['forkserver', 'spawn'\]"):
        run_parallel(config(tmp_path), plan)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("setting,max_in_flight", [(1, 0), (1, 2), (2, 1)])
def test_priorities_follow_td_errors(tmp_path, setting, max_in_flight):
    cfg = config(tmp_path)
    plan = RuntimePlan(setting=setting, n_actors=1, envs_per_actor=2, insert_batch=16, queue_size=4,
                       max_in_flight=max_in_flight)
    _, res = run_parallel(cfg, plan)
    ck = load_checkpoint(res.checkpoint_path)
    prio = np.asarray(ck.replay["priorities"])
    assert prio.shape == (512,) and (prio > 0).all()
    # One sample call per learner update, all on the replay that keeps the priorities.
    assert int(ck.replay["sample_steps"]) == res.updates == owed(512)
    # Fresh rows enter at the running max; only learner feedback makes priorities differ.
    assert np.unique(prio).size > 50
    # The running max is at least 1, so sampled rows with small |TD| dropped below it.
    assert (prio < 1.0).sum() > 50


@pytest.mark.parametrize("setting", [1, 2])
def test_actors_receive_the_learners_weights(tmp_path, setting):
    marker = tmp_path / "seen"
    cfg = config(tmp_path, trainer="runtime_support:WeightEcho")
    cfg = RunConfig.from_dict({**cfg.to_dict(), "weight_sync_every": 5,
                               "trainer_kwargs": {"seen_at": 20, "marker": str(marker)}})
    plan = RuntimePlan(setting=setting, n_actors=1, envs_per_actor=2, insert_batch=8, queue_size=4)
    _, res = run_parallel(cfg, plan)
    assert res.updates == owed(512)
    # An actor acted with a copy whose update counter came from the learner (published every 5 updates).
    seen = float(marker.read_text().split()[0])
    assert seen >= 20 and seen % 5 == 0


# --------------------------------------------------------------------------- serial oracle


@pytest.mark.parametrize("setting", [1, 2])
def test_agrees_with_the_serial_oracle(tmp_path, setting):
    """One actor with a deterministic policy replays the serial run exactly: same rows, same counters."""
    plan = RuntimePlan(setting=setting, n_actors=1, envs_per_actor=2, insert_batch=16, queue_size=4)
    trainer = "runtime_support:FixedPolicy"
    ser = run_serial(config(tmp_path, "serial", trainer), plan)
    _, par = run_parallel(config(tmp_path, "parallel", trainer), plan)
    assert_replays_the_serial_run(ser, par, tmp_path, "parallel", ("return",))


def assert_replays_the_serial_run(ser, other, tmp_path, other_dir: str, episode_cols: tuple[str, ...]) -> None:
    """``other`` (a run logged in ``tmp_path / other_dir``) stored exactly the serial run's 512 rows, with the
    same counters and the same episodes (the ``episodes.csv`` columns ``episode_cols``)."""
    for name in ("env_steps", "updates", "episodes", "final_mean_return", "stop_reason"):
        assert getattr(other, name) == getattr(ser, name), name
    a, b = load_checkpoint(ser.checkpoint_path).replay, load_checkpoint(other.checkpoint_path).replay
    assert a["size"] == b["size"] == 512 and a["cursor"] == b["cursor"]
    for f in FIELDS:
        np.testing.assert_array_equal(a[f], b[f], err_msg=f)
    assert a["sample_steps"] == b["sample_steps"]
    eps_s = [tuple(r[c] for c in episode_cols) for r in read_csv(tmp_path / "serial" / "episodes.csv")]
    eps_o = [tuple(r[c] for c in episode_cols) for r in read_csv(tmp_path / other_dir / "episodes.csv")]
    assert eps_s == eps_o


def test_two_actors_store_only_serial_trajectories(tmp_path):
    """Actor i steps the serial runtime's environment i: every stored row is one of the serial rows."""
    trainer = "runtime_support:FixedPolicy"
    plan = RuntimePlan(setting=2, n_actors=2, envs_per_actor=1, insert_batch=8, queue_size=4)
    _, par = run_parallel(config(tmp_path, "parallel", trainer, steps=300), plan)
    # The serial runtime steps both environments together: 600 steps cover 300 of each,
    # more than either actor can have taken.
    ser = run_serial(config(tmp_path, "serial", trainer, steps=600), plan)
    a, b = load_checkpoint(ser.checkpoint_path).replay, load_checkpoint(par.checkpoint_path).replay
    assert b["size"] == 300

    def rows(r):
        flat = np.concatenate([r["obs"], r["action"][:, None], r["reward"][:, None], r["next_obs"],
                               r["done"][:, None]], axis=1).astype(np.float64)
        return {row.tobytes() for row in flat}

    assert rows(b) <= rows(a)


# --------------------------------------------------------------------------- replay ratio


@pytest.mark.parametrize("setting", [1, 2])
def test_replay_ratio_is_kept_throughout(tmp_path, setting):
    slack = 40
    cfg = config(tmp_path, steps=1024)
    plan = RuntimePlan(setting=setting, n_actors=2, envs_per_actor=2, insert_batch=8, queue_size=4)
    _, res = run_parallel(cfg, plan, actor_slack=slack, metrics_every=32)
    rows = read_csv(tmp_path / "run" / "metrics.csv")
    assert len(rows) >= 10
    for r in rows:
        e, u = int(r["env_steps"]), int(r["updates"])
        assert u <= max(0, owed(e))  # the learner never runs ahead of the data
        # ... and the actors never run further ahead of the learner than the slack.
        assert e <= LS + math.ceil(u / RATIO) + slack + plan.n_actors * plan.envs_per_actor
    assert res.updates == owed(1024)


def test_low_replay_ratio_with_a_tiny_slack_does_not_stall(tmp_path):
    # One update per 50 env steps, but actors may only run 8 steps ahead: the runtime widens the
    # slack to reach each next update instead of waiting forever.
    cfg = RunConfig.from_dict({**config(tmp_path).to_dict(), "replay_ratio": 0.02})
    plan = RuntimePlan(setting=2, n_actors=1, envs_per_actor=2, insert_batch=8, queue_size=4)
    _, res = run_parallel(cfg, plan, actor_slack=8)
    assert res.env_steps == 512 and res.updates == math.floor((512 - LS) * 0.02)


# --------------------------------------------------------------------------- RRQ


def test_in_process_rrq_is_a_direct_call_on_the_learner_steps_replay_side():
    spec = StorageSpec(obs_shape=(2,), obs_dtype=np.float32, action_shape=(), action_dtype=np.int64)
    replay = PrioritizedReplay(DataStorage(spec, 8), pearl_core.get_backend("cpu").make_sum_tree(8, 4),
                               alpha=1.0, eps=1e-6, rng=0)
    rrq = make_rrq(RuntimePlan(), LearnerStep(None, replay, 4))
    assert isinstance(rrq, InProcessRRQ) and rrq.size == 0 and rrq.updates == 0
    obs = np.arange(6, dtype=np.float32).reshape(3, 2)
    rows = {"obs": obs, "action": np.array([0, 1, 0]), "reward": np.ones(3, np.float32), "next_obs": obs + 1,
            "done": np.zeros(3, bool), "ep_return": np.zeros(3)}
    rrq.insert(rows, 2)  # the first two rows only
    assert rrq.size == 2
    slot = {name: np.zeros((4, *shape), dtype) for name, (shape, dtype) in batch_fields(spec).items()}
    indices = rrq.sample_into(slot)  # rows land straight in the slot, with their weights
    assert indices.shape == (4,) and set(indices.tolist()) <= {0, 1}
    np.testing.assert_array_equal(slot["obs"], obs[indices])
    np.testing.assert_array_equal(slot["next_obs"], obs[indices] + 1)
    assert slot["weights"].dtype == np.float32 and (slot["weights"] > 0).all()
    rrq.update(indices, np.full(4, 3.0))  # validated TD errors -> priorities, one update counted
    assert rrq.updates == 1
    np.testing.assert_allclose(replay.priorities(np.unique(indices)), 3.0 + 1e-6)  # (|td| + eps) ** 1


# --------------------------------------------------------------------------- stop criteria, resume


def test_greedy_evaluation_stops_the_run(tmp_path):
    # FixedPolicy always pushes left: CartPole falls after ~10 steps, so any target below that is met
    # at the first evaluation.
    cfg = config(tmp_path, trainer="runtime_support:FixedPolicy", steps=100_000)
    cfg = RunConfig.from_dict({**cfg.to_dict(), "stop": {"eval_return": 5.0, "eval_every": 128,
                                                         "eval_episodes": 3, "max_env_steps": 100_000}})
    plan = RuntimePlan(setting=2, n_actors=1, envs_per_actor=2, insert_batch=16, queue_size=4)
    _, res = run_parallel(cfg, plan)
    assert res.stop_reason == "eval_return" and res.solved
    assert len(res.eval_history) == 1 and res.eval_history[0][1] >= 5.0
    assert res.solved_at_env_steps == res.eval_history[0][0] >= 128
    assert len(read_csv(tmp_path / "run" / "evals.csv")) == 1


def test_mean_training_return_stops_the_run(tmp_path):
    cfg = config(tmp_path, trainer="runtime_support:FixedPolicy", steps=100_000)
    cfg = RunConfig.from_dict({**cfg.to_dict(), "stop": {"mean_return": 5.0, "window": 4, "max_env_steps": 100_000}})
    plan = RuntimePlan(setting=1, n_actors=1, envs_per_actor=1, insert_batch=8, queue_size=4)
    _, res = run_parallel(cfg, plan)
    assert res.stop_reason == "mean_return" and res.solved
    assert res.episodes >= 4 and res.final_mean_return >= 5.0


def test_resume_continues_counters_and_replay(tmp_path):
    plan1 = RuntimePlan(setting=1, n_actors=1, envs_per_actor=2, insert_batch=16, queue_size=4)
    _, first = run_parallel(config(tmp_path, steps=256), plan1)
    assert (first.env_steps, first.updates) == (256, owed(256))
    # Continue the same run with a larger budget, now co-located (setting 2).
    plan2 = RuntimePlan(setting=2, n_actors=1, envs_per_actor=2, insert_batch=16, queue_size=4)
    rt = ParallelRuntime.from_checkpoint(first.checkpoint_path, config=config(tmp_path, steps=512), plan=plan2,
                                         progress=False, plot=False, tensorboard=False)
    second = rt.run()
    assert (second.env_steps, second.updates) == (512, owed(512))
    assert second.episodes > first.episodes
    ck = load_checkpoint(second.checkpoint_path)
    # The restored replay counts this segment's sample calls (the β schedule continues from the saved ones).
    assert ck.replay["size"] == 512 and int(ck.replay["sample_steps"]) == owed(512) - owed(256)
