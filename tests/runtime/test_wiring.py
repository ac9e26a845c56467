"""Runtime wiring: trainer loading and building, environments, replay, update schedule, acting, evaluation.

Includes the test that prioritized replay is live end to end: learner updates
change the priorities in the replay manager's tree, and sampling follows them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pearl_core
from pearl_core.algorithms import DQN
from pearl_core.errors import SpecError, TrainerError
from pearl_core.replay import PrioritizedReplay, StorageSpec, UniformReplay
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
from pearl_core.envs import make_env
from pearl_core.plugins import kernel_lookup
from pearl_core.runtime.acting import Collector, Evaluator, InsertBuffer, actor_env_seeds
from pearl_core.runtime.step import LearnerStep, UpdateSchedule, learner_updates_due
from pearl_core.runtime.wiring import (
    build_replay,
    build_trainer,
    load_trainer_class,
    replay_beta_steps,
    replay_state,
    runtime_hparams,
)

from cpu_backend import needs_cpu_backend


#: CartPole-v1's storage layout (what StorageSpec.from_spaces gives; no environment is built at import).
SPEC = StorageSpec(obs_shape=(4,), obs_dtype=np.float32, action_shape=(), action_dtype=np.int64)


def config(**kw) -> RunConfig:
    base = dict(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", trainer_kwargs={"hidden_sizes": [16]})
    base.update(kw)
    return RunConfig(**base)


# ------------------------------------------------------------------------- trainer class
def test_load_trainer_class():
    assert load_trainer_class("pearl_core.algorithms:DQN") is DQN
    assert load_trainer_class("pearl_core.algorithms.dqn:DQN") is DQN


@pytest.mark.parametrize(
    "path, match",
    [
        ("pearl_core.algorithms.DQN", "malformed; expected 'package.module:ClassName'"),
        ("pearl_core.algorithms:", "malformed"),
        ("a:b:c", "malformed"),
        ("pearl_core.nope:DQN", "module 'pearl_core.nope' could not be imported"),
        ("pearl_core.algorithms:DQM", r"has no attribute 'DQM'. Did you mean \['DQN'"),
        ("pearl_core.algorithms.dqn:__all__", "names a list, not a class"),
    ],
)
def test_load_trainer_class_errors(path, match):
    with pytest.raises(SpecError, match=match):
        load_trainer_class(path)


def test_runtime_hparams_fill_only_what_the_constructor_accepts_and_the_user_left_out():
    cfg = config(seed=5, stop=StopCriteria(max_env_steps=777))
    assert runtime_hparams(DQN, cfg) == {"total_env_steps": 777, "seed": 5, "learner_kernels": kernel_lookup("cpu")}
    assert runtime_hparams(DQN, cfg, seed=9)["seed"] == 9
    assert runtime_hparams(DQN, config(trainer_kwargs={"seed": 1, "learner_kernels": None},
                                       stop=StopCriteria(eval_return=1.0))) == {}

    class NoSeed:
        def __init__(self, observation_space, action_space, lr=1.0):
            pass

    assert runtime_hparams(NoSeed, cfg) == {}
    # the learner's device: passed where the constructor takes it, never over the user's own choice
    assert runtime_hparams(DQN, cfg, device="cuda:0")["device"] == "cuda:0"
    assert "device" not in runtime_hparams(NoSeed, cfg, device="cuda:0")
    assert "device" not in runtime_hparams(DQN, config(trainer_kwargs={"device": "cpu"}), device="cuda:0")
    # native learner kernels come from the backend of the plan's learner device, never a fixed name
    assert runtime_hparams(DQN, cfg, device="cuda:0")["learner_kernels"] == kernel_lookup("cuda:0")


def test_the_cartpole_layout_is_what_from_spaces_gives(cartpole):
    assert StorageSpec.from_spaces(cartpole.observation_space, cartpole.action_space) == SPEC


def test_build_trainer_checks_seeds_and_injects(cartpole):
    env = cartpole
    a = build_trainer(config(seed=3), env.observation_space, env.action_space)
    b = build_trainer(config(seed=3), env.observation_space, env.action_space, check=False)
    assert isinstance(a, DQN) and a.total_env_steps == 100_000
    for k, v in a.get_weights().items():  # same seed -> same initial networks, checked or not
        np.testing.assert_array_equal(v, b.get_weights()[k])
    with pytest.raises(TrainerError, match="constructing the trainer failed"):
        build_trainer(config(trainer_kwargs={"hidden": [3]}), env.observation_space, env.action_space)
    pend = make_env("Pendulum-v1")
    with pytest.raises(TrainerError, match="'discrete' trainer but the environment's action space is Box"):
        build_trainer(config(env_id="Pendulum-v1"), pend.observation_space, pend.action_space)


# --------------------------------------------------------------------------- environment
def test_make_env_seeds_spaces():
    a, b = make_env("CartPole-v1", 4), make_env("CartPole-v1", 4)
    assert [a.action_space.sample() for _ in range(20)] == [b.action_space.sample() for _ in range(20)]


@pytest.mark.filterwarnings("ignore:.*out of date:DeprecationWarning")
@pytest.mark.parametrize("env_id, close", [("CartPol-v1", "CartPole-v1"), ("Pendulum-v0", "Pendulum-v1")])
def test_make_env_unknown_id_lists_close_matches(env_id, close):
    with pytest.raises(SpecError, match="is not a registered gymnasium environment id") as info:
        make_env(env_id)
    assert close in str(info.value)


def test_actor_env_seeds():
    assert actor_env_seeds(config(seed=10), 3) == [10, 11, 12]
    assert actor_env_seeds(config(seed=10), 2, first=4) == [14, 15]


# -------------------------------------------------------------------------------- replay
def test_build_uniform_replay():
    r = build_replay(config(replay=ReplayConfig(kind="uniform", capacity=50)), RuntimePlan(), SPEC)
    assert isinstance(r, UniformReplay) and r.capacity == 50


@needs_cpu_backend
def test_build_prioritized_replay_on_the_plans_backend():
    cfg = config(replay=ReplayConfig(capacity=64, fanout=4, alpha=0.7), replay_ratio=0.25,
                 stop=StopCriteria(max_env_steps=4000))
    r = build_replay(cfg, RuntimePlan(rm_backend="cpu", rm_threads=2), SPEC)
    assert isinstance(r, PrioritizedReplay) and r.alpha == 0.7
    assert type(r.tree.inner).__module__.startswith("pearl_cpu")  # the backend's tree (guarded), not the reference
    assert r.tree.fanout == 4 and r.tree.capacity == 64
    assert r.beta_steps == replay_beta_steps(cfg) == 1000
    assert replay_beta_steps(config(stop=StopCriteria(eval_return=1.0))) == 100_000
    assert replay_beta_steps(config(replay=ReplayConfig(beta_steps=7))) == 7


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(pearl_core.BackendUnavailableError):
        build_replay(config(), RuntimePlan(rm_backend="nonexistent"), SPEC)


def fill(replay, n, start=0):
    ids = np.arange(start, start + n)
    obs = np.repeat(ids[:, None], 4, 1).astype(np.float32)
    replay.add(obs, ids % 2, ids.astype(np.float32), obs + 0.5, ids % 3 == 0)


@needs_cpu_backend
@pytest.mark.parametrize("n, kind", [(30, "prioritized"), (100, "prioritized"), (64, "uniform")])
def test_replay_state_round_trip(n, kind):
    cfg = config(replay=ReplayConfig(kind=kind, capacity=64, beta_steps=10))
    r = build_replay(cfg, RuntimePlan(), SPEC)
    fill(r, n)
    if kind == "prioritized":
        for _ in range(4):
            s = r.sample(8)
            r.update_priorities(s.indices, np.arange(8.0))
    st = replay_state(r)
    r2 = build_replay(cfg, RuntimePlan(), SPEC, state=st)
    assert (r2.size, r2.storage.cursor) == (r.size, r.storage.cursor)
    for name in ("obs", "action", "reward", "next_obs", "done"):
        np.testing.assert_array_equal(r2.storage.field(name), r.storage.field(name))
    if kind == "prioritized":
        idx = np.arange(r.size)
        np.testing.assert_allclose(r2.priorities(idx), r.priorities(idx))
        assert r2.beta == pytest.approx(r.beta) and r2.max_priority == pytest.approx(r.max_priority)
    with pytest.raises(SpecError, match="capacity"):
        build_replay(config(replay=ReplayConfig(kind=kind, capacity=16)), RuntimePlan(), SPEC, state=st)


# --------------------------------------------------------------------------- update rule
def test_schedule_matches_sb3_train_freq_and_gradient_steps():
    cfg = config(learning_starts=1000, train_every=256, replay_ratio=0.5)
    s = UpdateSchedule.from_config(cfg)
    # SB3 trains after each rollout of 256 steps once num_timesteps > learning_starts: 1024, 1280, ...
    assert [s.target(t) for t in (0, 1000, 1023, 1024, 1279, 1280, 2048)] == [0, 0, 0, 128, 128, 256, 640]
    assert learner_updates_due(1024, 0, cfg) == 128 and learner_updates_due(1100, 128, cfg) == 0
    # learning_starts on a burst boundary: the burst at the boundary itself is not due (SB3's '>')
    s2 = UpdateSchedule(0.5, 256, 1024)
    assert s2.target(1024) == 0 and s2.target(1280) == 128


def test_schedule_fractional_ratio_adds_up_and_continuous_mode():
    s = UpdateSchedule(replay_ratio=0.3, train_every=5, learning_starts=0)
    sizes = np.diff([s.target(t) for t in range(0, 5 * 101, 5)])
    assert set(sizes) <= {1, 2} and s.target(500) == 150
    c = UpdateSchedule(replay_ratio=0.25, learning_starts=100, continuous=True)
    assert [c.target(t) for t in (100, 101, 103, 104, 500)] == [0, 0, 0, 1, 100]
    assert learner_updates_due(104, 0, config(learning_starts=100, replay_ratio=0.25), continuous=True) == 1


def test_schedule_base_restarts_learning_starts():
    s = UpdateSchedule(0.5, 256, 1000, base_env_steps=5000, base_updates=2000)
    assert s.target(5500) == 2000 and s.target(5000 + 1024) == 2128
    assert s.due(5000 + 1024, 2000) == 128


# -------------------------------------------------------------------------------- acting
class Const:
    """A policy that always pushes right (CartPole falls over in ~10 steps)."""

    calls = 0

    def get_action(self, obs, explore):
        Const.calls += 1
        return np.ones(len(obs), np.int64)


def test_collector_reports_episodes_and_only_termination_is_done():
    envs = [make_env("CartPole-v1", 0, kwargs={"max_episode_steps": 5}), make_env("CartPole-v1", 1)]
    col = Collector(envs, [0, 1])
    seen = []
    for _ in range(12):
        out = col.step(Const())
        assert out.obs.shape == (2, 4) and out.next_obs.shape == (2, 4) and out.reward.dtype == np.float32
        seen += out.episodes
        for ep in out.episodes:
            # the stored next_obs is the true last observation, not the next episode's reset
            assert not np.array_equal(out.next_obs[ep.env_index], col._obs[ep.env_index])
        if any(e.env_index == 0 for e in out.episodes):
            assert not out.done[0]  # truncated at 5 steps: bootstrap, not terminal
    short = [e for e in seen if e.env_index == 0]
    assert short and all(e.length == 5 and not e.terminated for e in short)
    long = [e for e in seen if e.env_index == 1]
    assert long and long[0].terminated and long[0].episode_return == long[0].length


def test_collector_is_reproducible_from_seeds():
    def run():
        col = Collector([make_env("CartPole-v1", s) for s in (3, 4)], [3, 4])
        return np.stack([col.step(Const()).next_obs for _ in range(30)])

    np.testing.assert_array_equal(run(), run())


def test_insert_buffer_batches_in_order():
    r = build_replay(config(replay=ReplayConfig(kind="uniform", capacity=100)), RuntimePlan(), SPEC)
    buf = InsertBuffer(SPEC, 4)
    ids = np.arange(10)
    obs = np.repeat(ids[:, None], 4, 1).astype(np.float32)
    buf.push(r, obs[:3], ids[:3], ids[:3].astype(np.float32), obs[:3], ids[:3] < 0)
    assert r.size == 0 and len(buf) == 3
    buf.push(r, obs[3:9], ids[3:9], ids[3:9].astype(np.float32), obs[3:9], ids[3:9] < 0)
    assert r.size == 8 and len(buf) == 1
    assert buf.flush(r) == 1 and r.size == 9
    np.testing.assert_array_equal(r.storage.field("action")[:9], ids[:9])


def test_evaluator_batches_inference_and_is_seeded():
    Const.calls = 0
    ev = Evaluator("CartPole-v1", n_episodes=6, seed=100, n_envs=3)
    res = ev.evaluate(Const())
    assert len(res.returns) == 6 and len(ev.envs) == 3
    assert Const.calls < sum(res.lengths)  # one get_action per step for all running envs
    again = Evaluator("CartPole-v1", n_episodes=6, seed=100, n_envs=3).evaluate(Const())
    assert again.returns == res.returns
    assert res.mean_return == pytest.approx(np.mean(res.returns))
    cfg_ev = Evaluator.for_config(config(seed=1, stop=StopCriteria(eval_return=1, eval_episodes=4)))
    assert cfg_ev.n_episodes == 4


# ------------------------------------------------------------ prioritized replay is live
@needs_cpu_backend
def test_prioritized_replay_is_live_learner_updates_move_the_tree_and_sampling_follows(cartpole):
    torch.manual_seed(0)
    cfg = config(replay=ReplayConfig(capacity=40, fanout=4, alpha=1.0, eps=1e-3, beta=0.4, beta_steps=1000),
                 trainer_kwargs={"hidden_sizes": [32]}, seed=0)
    replay = build_replay(cfg, RuntimePlan(rm_backend="cpu"), SPEC)
    trainer = build_trainer(cfg, cartpole.observation_space, cartpole.action_space)
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((40, 4)).astype(np.float32)
    # rewards span two orders of magnitude, so the TD errors (and priorities) do as well
    replay.add(obs, rng.integers(0, 2, 40), np.geomspace(0.05, 20, 40).astype(np.float32),
               rng.standard_normal((40, 4)).astype(np.float32), np.ones(40, bool))
    idx = np.arange(40)
    before = replay.priorities(idx)
    np.testing.assert_array_equal(before, 1.0)  # every new transition enters at the running max
    for _ in range(3):
        sampled = replay.sample(16)
        res = trainer.update_policy(sampled.batch, sampled.weights)
        replay.update_priorities(sampled.indices, res.td_errors)
        # the tree holds (|delta| + eps) ** alpha of exactly these samples (alpha = 1)
        last = {int(i): float(t) for i, t in zip(sampled.indices, res.td_errors)}
        np.testing.assert_allclose(replay.priorities(np.array(list(last))),
                                   np.array(list(last.values())) + 1e-3, rtol=1e-6)
    step = LearnerStep(trainer, replay, 32)
    for _ in range(20):
        step.step()
    assert step.updates == 20
    after = replay.priorities(idx)
    assert (after != 1.0).sum() >= 30 and after.max() / after.min() > 10  # priorities moved, and far apart

    # sampling follows the tree: empirical frequencies vs p_i / sum p over many stratified draws
    draws = np.concatenate([replay.sample(64).indices for _ in range(400)])
    freq = np.bincount(draws, minlength=40) / draws.size
    p = after / after.sum()
    assert np.abs(freq - p).sum() / 2 < 0.03  # total-variation distance
    hi, lo = np.argsort(p)[-5:], np.argsort(p)[:5]
    assert freq[hi].sum() > 5 * freq[lo].sum()
    # and the importance weights undo the skew: w_i proportional to (N p_i) ** -beta
    beta = replay.beta
    s = replay.sample(64)
    expected = (40 * after[s.indices] / after.sum()) ** -beta
    np.testing.assert_allclose(s.weights, expected / expected.max(), rtol=1e-4)


# --------------------------------------------------------------------------- built-in trainers' short names
@pytest.mark.parametrize("name,cls", [("DQN", "DQN"), ("dqn", "DQN"), ("Sac", "SAC"), ("td3", "TD3"), ("DDPG", "DDPG")])
def test_a_builtin_trainers_short_name_works_wherever_its_import_path_does(name, cls):
    import pearl_core.algorithms as algorithms

    assert load_trainer_class(name) is getattr(algorithms, cls)
    config = RunConfig(env_id="CartPole-v1", trainer=name, replay=ReplayConfig("uniform", capacity=100),
                       stop=StopCriteria(max_env_steps=10))
    assert config.trainer == f"pearl_core.algorithms:{cls}"  # stored (and written to programs) as the full path
    assert RunConfig.from_dict(config.to_dict()).trainer == config.trainer


def test_an_unknown_short_name_is_refused_naming_the_built_ins():
    for call in (lambda: load_trainer_class("PPO"),
                 lambda: RunConfig(env_id="CartPole-v1", trainer="PPO", replay=ReplayConfig("uniform", capacity=100),
                                   stop=StopCriteria(max_env_steps=10))):
        with pytest.raises(SpecError, match="DDPG, DQN, SAC, TD3"):
            call()
