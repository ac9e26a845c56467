"""The serial runtime end to end on tiny budgets: mechanism, logs, checkpoints, resume, errors.

Learning quality is measured by benchmarks/learning_serial.py, not here.
"""

from __future__ import annotations

import csv
import dataclasses

import numpy as np
import pytest

import pearl_core
from pearl_core.errors import SpecError, TrainerError
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
from pearl_core.runtime.checkpoint import load_checkpoint
from pearl_core.runtime.serial import RunResult, SerialRuntime
from pearl_core.runtime.step import UpdateSchedule

from cpu_backend import needs_cpu_backend


pytestmark = needs_cpu_backend

TINY_DQN = {"hidden_sizes": [16], "eps_decay_steps": 300, "target_update_every": 20}


def dqn_config(tmp_path, **kw) -> RunConfig:
    base = dict(
        env_id="CartPole-v1",
        trainer="pearl_core.algorithms:DQN",
        trainer_kwargs=TINY_DQN,
        replay=ReplayConfig(capacity=2_000, fanout=8),
        batch_size=16,
        learning_starts=100,
        replay_ratio=0.25,
        train_every=40,
        stop=StopCriteria(eval_return=1e9, eval_every=200, eval_episodes=2, max_env_steps=600),
        log_dir=str(tmp_path / "run"),
        seed=0,
    )
    base.update(kw)
    return RunConfig(**base)


def run(cfg, plan=None, **kw) -> RunResult:
    return SerialRuntime(cfg, plan, progress=False, tensorboard=False, **kw).run()


def rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_tiny_run_end_to_end_writes_logs_curve_and_checkpoint(tmp_path):
    cfg = dqn_config(tmp_path)
    res = run(cfg)
    assert res.stop_reason == "max_env_steps" and res.env_steps == 600 and not res.solved
    assert res.updates == UpdateSchedule.from_config(cfg).target(600) == 130
    assert [e[0] for e in res.eval_history] == [200, 400, 600]
    assert res.episodes > 0 and res.final_mean_return is not None
    assert res.env_steps_per_s > 0 and res.updates_per_s > 0
    assert res.samples_per_s == pytest.approx(16 * res.updates_per_s)
    assert res.learner_time_s > 0 and res.eval_time_s > 0
    d = tmp_path / "run"
    for name in ("episodes.csv", "evals.csv", "metrics.csv", "learning_curve.png", "checkpoint.pt", "config.json",
                 "plan.json"):
        assert (d / name).is_file(), name
    assert RunConfig.from_json((d / "config.json").read_text()) == cfg
    eps = rows(d / "episodes.csv")
    assert len(eps) == res.episodes and sum(int(e["length"]) for e in eps) <= 600
    assert [int(r["env_steps"]) for r in rows(d / "evals.csv")] == [200, 400, 600]
    assert int(rows(d / "metrics.csv")[-1]["updates"]) == 130
    ck = load_checkpoint(res.checkpoint_path)
    assert (ck.state.env_steps, ck.state.updates) == (600, 130) and ck.replay is None
    assert ck.trainer_state["updates"] == 130


def test_prioritized_priorities_are_fed_back_during_a_run(tmp_path):
    cfg = dqn_config(tmp_path, save_replay=True)
    res = run(cfg)
    ck = load_checkpoint(res.checkpoint_path)
    prio = ck.replay["priorities"]
    assert prio.shape == (600,) and ck.replay["sample_steps"] == res.updates
    # transitions the learner has seen carry (|delta| + eps) ** alpha, not the constant insert priority
    assert len(np.unique(np.round(prio, 6))) > 100


def test_same_seed_same_run(tmp_path):
    a = run(dqn_config(tmp_path / "a"))
    b = run(dqn_config(tmp_path / "b"))
    assert [e[:2] for e in a.eval_history] == [e[:2] for e in b.eval_history]
    assert (a.episodes, a.updates, a.final_mean_return) == (b.episodes, b.updates, b.final_mean_return)


def test_resume_continues_counters_logs_and_replay(tmp_path):
    first = run(dqn_config(tmp_path, save_replay=True, stop=StopCriteria(eval_return=1e9, eval_every=200,
                                                                        eval_episodes=2, max_env_steps=400)))
    assert (first.env_steps, first.updates) == (400, 80)
    longer = dqn_config(tmp_path, save_replay=True)  # same run, budget extended to 600
    res = SerialRuntime.from_checkpoint(first.checkpoint_path, config=longer, progress=False, tensorboard=False).run()
    assert res.env_steps == 600 and res.updates == 130  # the schedule carries on where it stopped
    assert res.episodes > first.episodes and res.wall_time_s > first.wall_time_s
    assert [e[0] for e in res.eval_history] == [200, 400, 600]  # history kept, next eval on the grid
    evals = rows(tmp_path / "run" / "evals.csv")
    assert [int(r["env_steps"]) for r in evals] == [200, 400, 600]  # logs appended, one header
    ck = load_checkpoint(res.checkpoint_path)
    assert ck.replay["size"] == 600 and ck.state.updates == 130


def test_resume_without_saved_replay_refills_before_training(tmp_path):
    first = run(dqn_config(tmp_path, stop=StopCriteria(max_env_steps=400)))
    res = SerialRuntime.from_checkpoint(first.checkpoint_path, config=dqn_config(tmp_path), progress=False,
                                        tensorboard=False).run()
    # learning_starts (100) restarts at 400: bursts at 520 and 560 and 600 -> 3 * 10 updates
    assert res.env_steps == 600 and res.updates == first.updates + 30


def test_resume_rejects_a_different_run(tmp_path):
    first = run(dqn_config(tmp_path, stop=StopCriteria(max_env_steps=100)))
    with pytest.raises(SpecError, match="cannot resume: the checkpoint's env_id"):
        SerialRuntime(dqn_config(tmp_path, env_id="Acrobot-v1"), resume_from=first.checkpoint_path)


def test_periodic_checkpoints(tmp_path, monkeypatch):
    cfg = dqn_config(tmp_path, checkpoint_every=250, stop=StopCriteria(max_env_steps=300))
    seen = []
    from pearl_core.runtime import session

    real = session.save_checkpoint

    def spy(path, **kw):
        seen.append(kw["state"].env_steps)
        return real(path, **kw)

    monkeypatch.setattr(session, "save_checkpoint", spy)  # the run session writes every checkpoint
    run(cfg)
    assert seen == [250, 300]


def test_mean_return_stop_is_reported_as_solved(tmp_path):
    cfg = dqn_config(tmp_path, stop=StopCriteria(mean_return=5.0, window=3, max_env_steps=5_000))
    res = run(cfg)
    assert res.stop_reason == "mean_return" and res.solved
    assert res.episodes == 3 and res.solved_at_env_steps == res.env_steps
    assert res.solved_at_wall_s is not None and "last 3 episodes" in res.stop_detail


def test_max_updates_stop_and_several_envs(tmp_path):
    cfg = dqn_config(tmp_path, stop=StopCriteria(max_updates=25, max_env_steps=10_000))
    res = run(cfg, RuntimePlan(n_actors=2, envs_per_actor=2, insert_batch=7))
    assert res.stop_reason == "max_updates" and res.updates == 25
    assert res.env_steps % 4 == 0


def test_ddpg_tiny_run_on_pendulum(tmp_path):
    cfg = RunConfig(env_id="Pendulum-v1", trainer="pearl_core.algorithms:DDPG",
                    trainer_kwargs={"actor_hidden": [16], "critic_hidden": [16]},
                    replay=ReplayConfig(kind="uniform", capacity=1_000), batch_size=16, learning_starts=100,
                    replay_ratio=0.5, train_every=50, stop=StopCriteria(max_env_steps=400),
                    log_dir=str(tmp_path / "ddpg"))
    res = run(cfg)
    assert res.env_steps == 400 and res.episodes == 2 and res.updates == 150


def test_progress_lines_when_not_a_tty(tmp_path, capsys):
    SerialRuntime(dqn_config(tmp_path, stop=StopCriteria(max_env_steps=200)), tensorboard=False,
                  display_every_s=0.0).run()
    out = capsys.readouterr().out
    assert "env steps 200/200" in out and "steps/s" in out


@pytest.mark.parametrize(
    "change, error, match",
    [
        ({"env_id": "CartPol-v1"}, SpecError, "Close matches: \\['CartPole-v1'"),
        ({"trainer": "pearl_core.algorithms:DQM"}, SpecError, "Did you mean \\['DQN'"),
        ({"env_id": "Pendulum-v1"}, TrainerError, "'discrete' trainer but the environment's action space is Box"),
        ({"trainer_kwargs": {"hidden_sizes": [16], "gama": 0.9}}, TrainerError, "gama"),
    ],
)
def test_bad_configs_fail_before_training(tmp_path, change, error, match):
    with pytest.raises(error, match=match):
        run(dqn_config(tmp_path, **change))
    assert not (tmp_path / "run").exists()  # rejected before anything was written


def test_bad_arguments(tmp_path):
    with pytest.raises(SpecError, match="needs a RunConfig"):
        SerialRuntime(dataclasses.asdict(dqn_config(tmp_path)))
    with pytest.raises(SpecError, match="needs a RuntimePlan"):
        SerialRuntime(dqn_config(tmp_path), {"rm_backend": "cpu"})
    with pytest.raises(SpecError, match="metrics_every"):
        SerialRuntime(dqn_config(tmp_path), metrics_every=0)
    with pytest.raises(SpecError, match="does not exist"):
        SerialRuntime(dqn_config(tmp_path), resume_from=tmp_path / "nope.pt")
    with pytest.raises(pearl_core.BackendUnavailableError):
        run(dqn_config(tmp_path), RuntimePlan(rm_backend="nonexistent"))


def test_random_steps_act_uniformly_at_random_then_the_policy_acts():
    """RunConfig.random_steps: the actors' first env steps take each env's own seeded random actions
    (SB3's warm-up); afterwards the trainer acts."""
    from pearl_core.algorithms import TD3
    from pearl_core.envs import make_env
    from pearl_core.runtime.acting import Collector

    envs = [make_env("Pendulum-v1", s) for s in (0, 1)]
    twins = [make_env("Pendulum-v1", s) for s in (0, 1)]
    col = Collector(envs, [0, 1], random_steps=6)
    t = TD3(envs[0].observation_space, envs[0].action_space, actor_hidden=(8,), critic_hidden=(8,), seed=0,
            noise_std=0.0)
    for step in range(5):
        t.env_steps = 2 * step  # the run's env-step count, as the runtimes keep it
        before = None if col._obs is None else col._obs.copy()
        got = col.step(t).action
        if t.env_steps < 6:  # the same draws the env's own (seeded) action space gives
            np.testing.assert_array_equal(got, np.stack([tw.action_space.sample() for tw in twins]))
        else:  # the (noise-free) policy acts
            np.testing.assert_allclose(got, t.get_action(before, explore=False), rtol=1e-6)
    with pytest.raises(SpecError, match="random_steps"):
        RunConfig(env_id="Pendulum-v1", trainer="pearl_core.algorithms:TD3", random_steps=-1)
