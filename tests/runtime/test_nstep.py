"""n-step returns (``ReplayConfig.n_step``): the actors' aggregation, the schema's ``steps``, the trainers'
``gamma ** k`` targets, the native DQN step's discount array, configuration and runs.

* :class:`~pearl_core.runtime.acting.NStepAggregator` / :class:`~pearl_core.runtime.acting.Collector`
  against hand-computed sequences (terminated and truncated mid-window, several environments
  interleaved, a dropped step, the end-of-run flush, ``n = 1`` as the identity);
* every built-in trainer's target with ``k`` varying inside one batch, against a hand-computed one;
* the native ``dqn_mlp`` step with a per-sample discount array against the numpy engine;
* ``n = 1``: a run is bitwise the run of the scalar-``gamma`` code path;
* bad ``n_step`` values and trainers that do not declare ``supports_n_step`` are refused up front;
* the serial runtime trains DQN on CartPole and TD3 on Pendulum with ``n_step = 3`` (mechanism only).
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import pearl_core
from pearl_core.algorithms import DDPG, DQN, SAC, TD3
from pearl_core.algorithms import common
from pearl_core.composer.api import Composer
from pearl_core.errors import ComposerError, InvalidDTypeError, InvalidValueError, SpecError
from pearl_core.replay import Batch, StorageSpec
from pearl_core.replay.storage import DataStorage, discount_table, discounts
from pearl_core.runtime.acting import Collector, InsertBuffer, NStepAggregator
from pearl_core.runtime.checkpoint import load_checkpoint
from pearl_core.runtime.config import ReplayConfig, RunConfig, StopCriteria
from pearl_core.runtime.serial import SerialRuntime
from pearl_core.runtime.wiring import check_n_step
from pearl_core.trainer import Trainer, UpdateResult
from pearl_core.trainer_check import smoke_batch

from cpu_backend import needs_cpu_backend

G = 0.5  # a discount whose powers are exact in float32, so hand-computed returns compare exactly


# ------------------------------------------------------------------------------ scripted environments
class Scripted(gym.Env):
    """Episodes of scripted rewards; observation ``[100 * env + 10 * episode + t]``; ``end`` per episode:
    ``"terminated"`` or ``"truncated"`` after its last reward."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env: int, episodes: list[tuple[list[float], str]]):
        self.env, self.episodes, self.ep, self.t = env, episodes, -1, 0

    def _obs(self) -> np.ndarray:
        return np.array([100 * self.env + 10 * self.ep + self.t], np.float32)

    def reset(self, *, seed=None, options=None):
        self.ep, self.t = self.ep + 1, 0
        return self._obs(), {}

    def step(self, action):
        rewards, end = self.episodes[self.ep % len(self.episodes)]
        r = rewards[self.t]
        self.t += 1
        last = self.t == len(rewards)
        return self._obs(), r, last and end == "terminated", last and end == "truncated", {}


class Acting(Trainer):
    """Acts with zeros; ``gamma`` for the collector's sums."""

    input_shape = (1,)
    action_kind = "discrete"
    supports_n_step = True

    def __init__(self, observation_space=None, action_space=None, *, gamma: float = G):
        self.gamma = gamma

    def get_action(self, obs, explore):
        return np.zeros(len(obs), np.int64)

    def update_policy(self, batch, weights):
        return UpdateResult(np.zeros(len(batch)), {})

    def get_weights(self):
        return {}

    def set_weights(self, weights):
        pass


def collect(collector: Collector, steps: int) -> list[tuple]:
    """Rows ``(obs, reward, next_obs, done, k)`` of ``steps`` collector steps (and a flush), in emission order."""
    rows = []
    outs = [collector.step(Acting()) for _ in range(steps)]
    tail = collector.flush_pending()
    for out in outs + ([tail] if tail is not None else []):
        for o, r, s2, d, k in zip(out.obs[:, 0], out.reward, out.next_obs[:, 0], out.done, out.steps):
            rows.append((float(o), float(r), float(s2), bool(d), int(k)))
    return rows


def ret(rewards) -> float:
    return sum(G ** j * r for j, r in enumerate(rewards))


# ------------------------------------------------------------------------------ aggregation
def test_terminated_mid_window_bootstraps_nothing_and_truncated_bootstraps_from_the_final_observation():
    # env 0: one terminated episode of 5 steps, then a truncated one of 2 (n = 3)
    env = Scripted(0, [([1.0, 2.0, 3.0, 4.0, 5.0], "terminated"), ([10.0, 20.0], "truncated")])
    rows = collect(Collector([env], [0], n_step=3), 7)
    assert rows == [
        (0.0, ret([1, 2, 3]), 3.0, False, 3),  # full windows
        (1.0, ret([2, 3, 4]), 4.0, False, 3),
        (2.0, ret([3, 4, 5]), 5.0, True, 3),   # the episode terminates: every pending one leaves, done
        (3.0, ret([4, 5]), 5.0, True, 2),
        (4.0, ret([5]), 5.0, True, 1),
        (10.0, ret([10, 20]), 12.0, False, 2),  # truncated: not done, bootstraps from s_{t+k} = 12
        (11.0, ret([20]), 12.0, False, 1),
    ]


def test_several_envs_interleave_and_each_keeps_its_own_window():
    a = Scripted(0, [([1.0, 1.0, 1.0, 1.0], "truncated")])
    b = Scripted(1, [([2.0], "terminated"), ([3.0, 4.0, 5.0], "terminated")])
    col = Collector([a, b], [0, 1], n_step=2)
    outs = [col.step(Acting()) for _ in range(4)]
    got = [[(float(o), float(r), float(s2), bool(d), int(k)) for o, r, s2, d, k in
            zip(x.obs[:, 0], x.reward, x.next_obs[:, 0], x.done, x.steps)] for x in outs]
    assert got == [
        [(100.0, 2.0, 101.0, True, 1)],  # step 1: a's window is still open; b's one-step episode ends
        [(0.0, ret([1, 1]), 2.0, False, 2)],  # step 2: a's first window closes; b has one pending
        [(1.0, ret([1, 1]), 3.0, False, 2), (110.0, ret([3, 4]), 112.0, False, 2)],  # env order
        [(2.0, ret([1, 1]), 4.0, False, 2), (3.0, ret([1]), 4.0, False, 1),  # a truncates after 4
         (111.0, ret([4, 5]), 113.0, True, 2), (112.0, ret([5]), 113.0, True, 1)],
    ]
    assert [x.env_steps for x in outs] == [2, 2, 2, 2]
    assert col.flush_pending() is None  # nothing pending: every step left exactly once


def test_the_end_of_run_flush_emits_every_pending_step_once_truncated():
    env = Scripted(0, [([1.0] * 10, "terminated")])
    col = Collector([env], [0], n_step=4)
    emitted = sum(len(col.step(Acting()).reward) for _ in range(6))
    assert emitted == 3  # windows closed at steps 4, 5, 6
    tail = col.flush_pending()
    assert tail.obs[:, 0].tolist() == [3.0, 4.0, 5.0]
    assert tail.steps.tolist() == [3, 2, 1] and not tail.done.any()
    assert tail.next_obs[:, 0].tolist() == [6.0, 6.0, 6.0]
    np.testing.assert_array_equal(tail.reward, np.float32([ret([1, 1, 1]), ret([1, 1]), 1.0]))
    assert tail.env_steps == 0  # already counted when they were stepped
    assert col.flush_pending() is None


def test_n1_is_the_identity_with_steps_one():
    envs = [Scripted(i, [([1.0, 2.0, 3.0], "terminated"), ([4.0], "truncated")]) for i in range(3)]
    col = Collector(envs, [0, 1, 2])
    for _ in range(5):
        out = col.step(Acting())
        assert len(out.reward) == out.env_steps == 3
        assert out.steps.dtype == np.int32 and out.steps.tolist() == [1, 1, 1]
    assert col.flush_pending() is None


def test_a_dropped_step_truncates_its_window_at_the_last_good_observation():
    agg = NStepAggregator(3, 1)
    push = lambda t, r, ended=False: agg.push(G, [0], np.float32([[t]]), np.int64([0]), np.float32([r]),  # noqa: E731
                                              np.float32([[t + 1]]), np.bool_([False]), np.bool_([ended]))
    assert push(0, 1.0)[2] == [] and push(1, 2.0)[2] == []
    out = agg.push(G, [], np.zeros((0, 1), np.float32), np.zeros(0, np.int64), np.zeros(0, np.float32),
                   np.zeros((0, 1), np.float32), np.zeros(0, bool), np.zeros(0, bool), broken=[0])
    assert [float(o[0]) for o in out[0]] == [0.0, 1.0] and out[2] == [ret([1, 2]), 2.0]
    assert [float(s[0]) for s in out[3]] == [2.0, 2.0] and out[4] == [False, False] and out[5] == [2, 1]
    assert agg.pending() == 0


def test_aggregator_refuses_a_bad_n():
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(SpecError, match="n_step"):
            NStepAggregator(bad, 1)


def test_collector_needs_the_trainers_gamma_for_n_step():
    no_gamma = Acting()
    no_gamma.gamma = None
    col = Collector([Scripted(0, [([1.0], "terminated")])], [0], n_step=2)
    with pytest.raises(SpecError, match="gamma"):
        col.step(no_gamma)


# ------------------------------------------------------------------------------ schema and storage
def test_storage_keeps_steps_and_defaults_them_to_one():
    spec = StorageSpec((1,), np.float32, (), np.int64)
    ds = DataStorage(spec, 8)
    z = np.zeros((3, 1), np.float32)
    ds.add(z, np.zeros(3, np.int64), np.zeros(3), z, np.zeros(3, bool))
    ds.add(z, np.zeros(3, np.int64), np.zeros(3), z, np.zeros(3, bool), np.array([1, 2, 3]))
    assert ds.gather(np.arange(6)).steps.tolist() == [1, 1, 1, 1, 2, 3]
    assert ds.field("steps").dtype == np.int32
    with pytest.raises(InvalidValueError, match="steps"):
        ds.add(z, np.zeros(3, np.int64), np.zeros(3), z, np.zeros(3, bool), np.array([1, 0, 1]))
    with pytest.raises(InvalidDTypeError, match="steps"):
        ds.add(z, np.zeros(3, np.int64), np.zeros(3), z, np.zeros(3, bool), np.ones(3))
    assert ds.size == 6  # the refused adds changed nothing
    assert Batch(z, np.zeros(3), np.zeros(3, np.float32), z, np.zeros(3, bool)).steps.tolist() == [1, 1, 1]


def test_insert_buffer_stages_steps():
    spec = StorageSpec((1,), np.float32, (), np.int64)
    ds = DataStorage(spec, 8)

    class R:
        storage = ds

        def add(self, *rows):
            return ds.add(*rows)

    buf = InsertBuffer(spec, 4)
    z = np.zeros((3, 1), np.float32)
    buf.push(R(), z, np.zeros(3, np.int64), np.zeros(3, np.float32), z, np.zeros(3, bool), np.int32([3, 2, 1]))
    buf.push(R(), z, np.zeros(3, np.int64), np.zeros(3, np.float32), z, np.zeros(3, bool))
    buf.flush(R())
    assert ds.field("steps")[:6].tolist() == [3, 2, 1, 1, 1, 1]


def test_discount_table_is_exact_at_one_step():
    for g in (0.99, 0.98, 0.5, 1.0, 0.0):
        t = discount_table(g, 4)
        assert t[0] == 1.0 and t[1] == np.float32(g)
        np.testing.assert_allclose(t, np.float32([g ** k for k in range(5)]), rtol=1e-6)
    np.testing.assert_array_equal(discounts(np.array([1, 3, 2]), 0.5), np.float32([0.5, 0.125, 0.25]))
    assert discounts(None, 0.5) is None


# ------------------------------------------------------------------------------ trainer targets
OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
DISC = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32))
STEPS = np.array([1, 2, 3, 4] * 4, np.int32)
W = np.ones(16, np.float32)


def nstep_batch(action_space) -> Batch:
    b = smoke_batch(OBS, action_space, n=16)
    return Batch(b.obs, b.action, b.reward, b.next_obs, b.done, STEPS.copy())


def target(b: Batch, gamma: float, q_next: torch.Tensor) -> torch.Tensor:
    """``r + gamma ** k * (1 - done) * q_next``, computed in float64 from the batch."""
    disc = torch.from_numpy(gamma ** b.steps.astype(np.float64))
    return torch.from_numpy(b.reward).double() + disc * torch.from_numpy(~b.done).double() * q_next.double()


def dqn_expected(t: DQN, b: Batch) -> np.ndarray:
    with torch.no_grad():
        nxt, x = torch.from_numpy(b.next_obs), torch.from_numpy(b.obs)
        y = target(b, t.gamma, t.q_net(nxt).max(1).values)  # tau = 1: the target net is synced first
        q = t.q_net(x).gather(1, torch.from_numpy(b.action).long()[:, None])[:, 0].double()
    return (q - y).abs().numpy()


def dqn(engine: str, **kw) -> DQN:
    torch.manual_seed(0)
    return DQN(OBS, DISC, hidden_sizes=(32, 32), gamma=0.9, tau=1.0, engine=engine, seed=0, **kw)


@pytest.mark.parametrize("engine", ["torch", "numpy"])
def test_dqn_target_uses_gamma_to_the_k(engine):
    t, b = dqn(engine), nstep_batch(DISC)
    assert b.done.any() and not b.done.all()
    expected = dqn_expected(t, b)
    np.testing.assert_allclose(t.update_policy(b, W).td_errors, expected, rtol=1e-4, atol=1e-5)
    one = dqn(engine)
    assert not np.allclose(one.update_policy(Batch(b.obs, b.action, b.reward, b.next_obs, b.done), W).td_errors,
                           expected, rtol=1e-3)  # the one-step target differs: k matters


def test_ddpg_target_uses_gamma_to_the_k():
    torch.manual_seed(0)
    t = DDPG(OBS, BOX, actor_hidden=(32, 32), critic_hidden=(32, 32), gamma=0.9, seed=0)
    b = nstep_batch(BOX)
    with torch.no_grad():
        nxt, x = torch.from_numpy(b.next_obs), torch.from_numpy(b.obs)
        y = target(b, 0.9, t.critic_target(torch.cat([nxt, t.actor_target(nxt)], 1))[:, 0])
        q = t.critic(torch.cat([x, t.box.normalise(b.action, 16)], 1))[:, 0].double()
    np.testing.assert_allclose(t.update_policy(b, W).td_errors, (q - y).abs().numpy(), rtol=1e-4, atol=1e-5)


def twin_td(t, b: Batch, y: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        sa = torch.cat([torch.from_numpy(b.obs), t.box.normalise(b.action, len(b))], 1)
        q1, q2 = t.critic1(sa)[:, 0].double(), t.critic2(sa)[:, 0].double()
    return (0.5 * ((q1 - y).abs() + (q2 - y).abs())).numpy()


def test_td3_target_uses_gamma_to_the_k():
    torch.manual_seed(0)
    t = TD3(OBS, BOX, actor_hidden=(32, 32), critic_hidden=(32, 32), gamma=0.9, target_noise=0.0, seed=0)
    b = nstep_batch(BOX)
    with torch.no_grad():
        nxt = torch.from_numpy(b.next_obs)
        sa = torch.cat([nxt, t.actor_target(nxt)], 1)
        y = target(b, 0.9, torch.minimum(t.critic1_target(sa), t.critic2_target(sa))[:, 0])
    expected = twin_td(t, b, y)  # the critics before the update
    np.testing.assert_allclose(t.update_policy(b, W).td_errors, expected, rtol=1e-4, atol=1e-5)


def test_sac_target_uses_gamma_to_the_k():
    torch.manual_seed(0)
    t = SAC(OBS, BOX, actor_hidden=(32, 32), critic_hidden=(32, 32), gamma=0.9, ent_coef=0.3, seed=0)
    b = nstep_batch(BOX)
    ref = copy.deepcopy(t)  # the same generator state: the draws the update makes
    with torch.no_grad():
        nxt = torch.from_numpy(b.next_obs)
        a, logp = ref.sample(nxt)
        sa = torch.cat([nxt, a], 1)
        soft = torch.minimum(ref.critic1_target(sa), ref.critic2_target(sa))[:, 0] - 0.3 * logp
        y = target(b, 0.9, soft)
    np.testing.assert_allclose(t.update_policy(b, W).td_errors, twin_td(ref, b, y), rtol=1e-4, atol=1e-5)


def test_bootstrap_discount_keeps_the_scalar_for_one_step_batches_and_handles_tensors():
    b = smoke_batch(OBS, BOX, n=8)
    assert common.bootstrap_discount(b, 0.99, torch.device("cpu")) == 0.99  # steps all ones
    ns = Batch(b.obs, b.action, b.reward, b.next_obs, b.done, np.int32([1, 2, 3, 1, 1, 1, 1, 5]))
    d = common.bootstrap_discount(ns, 0.99, torch.device("cpu"))
    np.testing.assert_allclose(d.numpy(), np.float32([0.99 ** k for k in ns.steps]), rtol=1e-6)
    tensor = Batch(*(torch.from_numpy(np.asarray(getattr(ns, f))) for f in ("obs", "action", "reward",
                                                                             "next_obs", "done", "steps")))
    dt = common.bootstrap_discount(tensor, 0.99, torch.device("cpu"))
    assert dt[0].item() == np.float32(0.99)  # exactly float32(gamma) at one step
    np.testing.assert_allclose(dt.numpy(), d.numpy(), rtol=1e-6)


# ------------------------------------------------------------------------------ native DQN step
@needs_cpu_backend
@pytest.mark.parametrize("double_dqn", [False, True])
def test_native_dqn_step_with_a_discount_array_equals_the_numpy_engine(double_dqn):
    kernels = pearl_core.plugins.kernel_lookup("cpu")
    native = dqn("native", learner_kernels=kernels, double_dqn=double_dqn)
    numpy_ = dqn("numpy", double_dqn=double_dqn)
    for i in range(3):
        b = nstep_batch(DISC)
        got, want = native.update_policy(b, W), numpy_.update_policy(b, W)
        np.testing.assert_allclose(got.td_errors, want.td_errors, rtol=1e-5, atol=1e-6, err_msg=f"update {i}")
    for p, q in zip(native.q_net.parameters(), numpy_.q_net.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


@needs_cpu_backend
def test_the_native_step_record_carries_the_discount_of_n_step_batches_only():
    real = pearl_core.plugins.kernel_lookup("cpu")("dqn_mlp")
    seen = []

    class Spy:  # a kernel that records what each step record carried
        def __init__(self, kern):
            self.kern, self.batch = kern, kern.batch

        def step(self, args):
            seen.append(None if args.discount is None else args.discount.copy())
            return self.kern.step(args)

    spy = dqn("native", learner_kernels=lambda name: (lambda *a: Spy(real(*a))) if name == "dqn_mlp" else None)
    ref = dqn("numpy")
    one, ns = smoke_batch(OBS, DISC, n=16), nstep_batch(DISC)
    for b in (one, ns, one):
        np.testing.assert_allclose(spy.update_policy(b, W).td_errors, ref.update_policy(b, W).td_errors,
                                   rtol=1e-5, atol=1e-6)
    assert seen[0] is None and seen[2] is None  # one-step batches: the scalar gamma
    np.testing.assert_allclose(seen[1], np.float32(0.9) ** ns.steps.astype(np.float32), rtol=1e-6)
    for p, q in zip(spy.q_net.parameters(), ref.q_net.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


@needs_cpu_backend
def test_native_dqn_step_refuses_a_bad_discount_array():
    from pearl_core.sdk import AdamHyper, DQNStepArgs

    t = dqn("native", learner_kernels=pearl_core.plugins.kernel_lookup("cpu"))
    kern = t._engine._native_kernel(16)
    b = nstep_batch(DISC)
    args = DQNStepArgs(b.obs, b.action.astype(np.int64), b.reward, b.next_obs, b.done, W, 0.9, 1.0, 10.0, False,
                       AdamHyper(1e-3, 0.9, 0.999, 1e-8))
    with pytest.raises(Exception, match="discount"):
        kern.step(dataclasses.replace(args, discount=np.full(16, 1.5, np.float32)))
    with pytest.raises(Exception, match="discount"):
        kern.step(dataclasses.replace(args, discount=np.ones(15, np.float32)))


# ------------------------------------------------------------------------------ n = 1 is unchanged
def _scalar_gamma_only(monkeypatch):
    """The trainers' code path before n-step returns: the scalar gamma, whatever the batch holds."""
    monkeypatch.setattr(common, "host_discounts", lambda batch, gamma: None)
    for mod in ("dqn", "ddpg", "td3", "sac"):
        monkeypatch.setattr(f"pearl_core.algorithms.{mod}.bootstrap_discount", lambda batch, gamma, device: gamma)
    monkeypatch.setattr("pearl_core.algorithms.dqn.host_discounts", lambda batch, gamma: None)


@pytest.mark.parametrize("trainer,env", [("DQN", "CartPole-v1"), ("TD3", "Pendulum-v1")])
def test_n1_runs_are_bitwise_the_scalar_gamma_runs(tmp_path, monkeypatch, trainer, env):
    def run(where):
        cfg = RunConfig(env_id=env, trainer=f"pearl_core.algorithms:{trainer}", learning_starts=64, batch_size=32,
                        train_every=16, replay=ReplayConfig(capacity=2_000), save_replay=True,
                        trainer_kwargs={"actor_hidden": [32, 32], "critic_hidden": [32, 32]} if trainer == "TD3"
                        else {"hidden_sizes": [32, 32]},
                        stop=StopCriteria(max_env_steps=300), log_dir=str(tmp_path / where))
        SerialRuntime(cfg, plot=False).run()
        return load_checkpoint(tmp_path / where / "checkpoint.pt")

    new = run("new")
    with monkeypatch.context() as m:
        _scalar_gamma_only(m)
        old = run("old")
    assert (new.replay["steps"] == 1).all()
    for name in ("obs", "action", "reward", "next_obs", "done"):
        np.testing.assert_array_equal(new.replay[name], old.replay[name])
    for key, value in old.trainer_state.items():
        if isinstance(value, dict):  # networks and optimizers: every tensor bitwise
            for k, v in value.items():
                if isinstance(v, torch.Tensor):
                    assert torch.equal(new.trainer_state[key][k], v), f"{key}.{k}"


# ------------------------------------------------------------------------------ configuration
@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "3", 1001])
def test_bad_n_step_values_are_refused(bad):
    with pytest.raises(SpecError, match="n_step"):
        ReplayConfig(n_step=bad)


def test_n_step_round_trips_and_defaults_to_one():
    assert ReplayConfig().n_step == 1
    cfg = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", replay=ReplayConfig(n_step=3))
    assert RunConfig.from_json(cfg.to_json()).replay.n_step == 3
    old = cfg.replay.to_dict()
    del old["n_step"]  # a config written before n-step returns
    assert ReplayConfig.from_dict(old).n_step == 1


class OneStepOnly(Acting):
    supports_n_step = False


def test_a_trainer_without_supports_n_step_is_refused_before_the_run(tmp_path):
    check_n_step(OneStepOnly, 1)  # one-step runs need nothing
    with pytest.raises(SpecError, match="supports_n_step = True") as err:
        check_n_step(OneStepOnly, 3)
    assert "n_step = 3" in str(err.value) and "Fix:" in str(err.value)
    for cls in (DQN, DDPG, TD3, SAC):
        check_n_step(cls, 5)
    cfg = RunConfig(env_id="CartPole-v1", trainer="test_nstep:OneStepOnly", replay=ReplayConfig(n_step=2),
                    stop=StopCriteria(max_env_steps=10), log_dir=str(tmp_path / "run"))
    with pytest.raises(SpecError, match="supports_n_step"):
        SerialRuntime(cfg, plot=False).run()
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_composer_carries_n_step_and_refuses_it_for_a_one_step_trainer():
    c = Composer().set_actors("CartPole-v1", n_actors=1)
    c.set_train_function(DQN, batch_size=32, hidden_sizes=(32, 32))
    c.set_replay("uniform", capacity=1_000, n_step=3)
    assert c.run_config().replay.n_step == 3
    with pytest.raises(ComposerError, match="n_step"):
        c.set_replay("uniform", capacity=1_000, n_step=0)
    with pytest.raises(ComposerError, match="supports_n_step"):
        Composer().set_actors("CartPole-v1", n_actors=1).set_replay(n_step=2).set_train_function(OneStepOnly)


# ------------------------------------------------------------------------------ runs
def test_serial_dqn_on_cartpole_with_3_step_returns(tmp_path):
    cfg = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", trainer_kwargs={"hidden_sizes": [32]},
                    replay=ReplayConfig(capacity=5_000, n_step=3), learning_starts=100, batch_size=32,
                    train_every=16, stop=StopCriteria(max_env_steps=400), save_replay=True,
                    log_dir=str(tmp_path / "run"))
    res = SerialRuntime(cfg, plot=False).run()
    assert res.env_steps == 400 and res.updates > 0
    replay = load_checkpoint(tmp_path / "run" / "checkpoint.pt").replay
    assert replay["size"] == 400  # every step stored exactly once: the pending ones were flushed at the end
    steps, done = replay["steps"], replay["done"]
    assert set(steps.tolist()) == {1, 2, 3} and (steps == 3).mean() > 0.5
    assert done[steps == 3].any()  # a terminating window of 3 holds the terminal step
    assert (done.sum() * 3 >= (steps < 3).sum() - 2)  # short windows end episodes (or the run)


def test_updates_owed_before_any_window_closes_wait_for_rows(tmp_path):
    cfg = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", trainer_kwargs={"hidden_sizes": [16]},
                    replay=ReplayConfig(capacity=1_000, n_step=5), learning_starts=0, batch_size=8, train_every=1,
                    replay_ratio=1.0, stop=StopCriteria(max_env_steps=40), log_dir=str(tmp_path / "run"))
    res = SerialRuntime(cfg, plot=False).run()
    assert res.env_steps == 40 and res.updates == 40  # the first 4 steps' updates ran once rows existed


def test_old_checkpoints_replay_state_without_steps_restores_one_step_rows():
    from pearl_core.runtime.config import RuntimePlan
    from pearl_core.runtime.wiring import build_replay, replay_state

    cfg = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", replay=ReplayConfig(capacity=8))
    spec = StorageSpec((4,), np.float32, (), np.int64)
    src = build_replay(cfg, RuntimePlan(), spec)
    z = np.zeros((5, 4), np.float32)
    src.add(z, np.zeros(5, np.int64), np.arange(5.0), z, np.zeros(5, bool), np.int32([3, 3, 3, 2, 1]))
    state = replay_state(src)
    assert state["steps"].tolist() == [3, 3, 3, 2, 1]
    del state["steps"]  # a checkpoint written before n-step returns
    restored = build_replay(cfg, RuntimePlan(), spec, state=state)
    assert restored.size == 5 and restored.storage.field("steps")[:5].tolist() == [1] * 5
    np.testing.assert_array_equal(restored.storage.field("reward")[:5], np.arange(5.0))


def test_serial_td3_on_pendulum_with_3_step_returns(tmp_path):
    cfg = RunConfig(env_id="Pendulum-v1", trainer="pearl_core.algorithms:TD3",
                    trainer_kwargs={"actor_hidden": [32, 32], "critic_hidden": [32, 32]},
                    replay=ReplayConfig(kind="uniform", capacity=5_000, n_step=3), learning_starts=100, batch_size=32,
                    train_every=16, stop=StopCriteria(max_env_steps=420), save_replay=True,
                    log_dir=str(tmp_path / "run"))
    res = SerialRuntime(cfg, plot=False).run()
    assert res.env_steps == 420 and res.updates > 0
    replay = load_checkpoint(tmp_path / "run" / "checkpoint.pt").replay
    assert replay["size"] == 420 and not replay["done"].any()  # Pendulum only truncates
    # two 200-step episodes truncate with windows of 2 and 1; the run's end flushes 2 and 1 more
    assert sorted(replay["steps"].tolist()).count(3) == 420 - 6


# ------------------------------------------------------------------------------ parallel runtime
from runtime_support import FixedPolicy  # noqa: E402  (the tests' deterministic policy)


class FixedNStep(FixedPolicy):
    """Always action 0, n-step capable (its update ignores the data; the test is about the rows)."""

    supports_n_step = True
    gamma = 0.9


@pytest.mark.parametrize("setting", [1, 2])
def test_parallel_actors_store_the_serial_runtimes_n_step_rows(tmp_path, setting):
    from pearl_core.runtime.config import RuntimePlan
    from pearl_core.runtime.parallel import ParallelRuntime

    def cfg(name, steps):
        return RunConfig(env_id="CartPole-v1", trainer="test_nstep:FixedNStep", batch_size=16, learning_starts=64,
                         train_every=32, replay=ReplayConfig(capacity=4096, n_step=3), save_replay=True,
                         stop=StopCriteria(max_env_steps=steps), log_dir=str(tmp_path / name))

    plan = RuntimePlan(setting=setting, n_actors=1, envs_per_actor=2, insert_batch=16, queue_size=4)
    par = ParallelRuntime(cfg("parallel", 512), plan, progress=False, plot=False, tensorboard=False).run()
    ser = SerialRuntime(cfg("serial", 700), plan, progress=False, plot=False, tensorboard=False).run()
    assert par.env_steps == 512  # the host counts the rows it stores
    a, b = load_checkpoint(ser.checkpoint_path).replay, load_checkpoint(par.checkpoint_path).replay
    assert b["size"] == 512 and set(b["steps"].tolist()) <= {1, 2, 3} and (b["steps"] == 3).any()

    def rows(r):
        flat = np.concatenate([r["obs"], r["action"][:, None], r["reward"][:, None], r["next_obs"],
                               r["done"][:, None], r["steps"][:, None]], axis=1).astype(np.float64)
        return [row.tobytes() for row in flat]

    serial_rows = set(rows(a))
    assert all(row in serial_rows for row in rows(b))  # the same n-step transitions, whoever collected them


# ------------------------------------------------------------------------------ pearl compose
def test_compose_cli_writes_n_step_into_the_program(tmp_path):
    import ast

    from typer.testing import CliRunner

    from pearl_core.cli import app

    machine = Path(__file__).resolve().parents[2] / "examples" / "hardware" / "this-machine.toml"
    out = tmp_path / "runtime.py"
    res = CliRunner().invoke(app, ["compose", "-H", str(machine), "--no-profile", "-b", "32", "--hidden", "32",
                                   "--n-step", "3", "-o", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text(encoding="utf-8")
    assert "        n_step=3,\n" in text and "3-step returns" in text
    ast.parse(text)
    bad = CliRunner().invoke(app, ["compose", "-H", str(machine), "--no-profile", "--n-step", "0",
                                   "-o", str(tmp_path / "bad.py")])
    assert bad.exit_code == 2 and "n_step" in bad.output and not (tmp_path / "bad.py").exists()
