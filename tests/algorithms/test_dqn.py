"""DQN (plain, double, dueling) and DDPG: shapes, per-sample TD errors, importance weights, exploration, targets,
state."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from pearl_core.algorithms import DDPG, DQN, default_trainer, hidden_kwargs
from pearl_core.errors import SpecError
from pearl_core.trainer_check import smoke_batch

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
DISC = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32))


def dqn(**kw):
    torch.manual_seed(0)
    return DQN(OBS, DISC, hidden_sizes=(32, 32), seed=0, **kw)


def ddpg(**kw):
    torch.manual_seed(0)
    return DDPG(OBS, BOX, actor_hidden=(32, 32), critic_hidden=(32, 32), seed=0, **kw)


def with_sgd(trainer, attr):
    """A copy whose optimizer is plain SGD(lr=1) without clipping: the parameter change is -grad."""
    t = copy.deepcopy(trainer)
    net = t.q_net if attr == "optimizer" else t.critic
    setattr(t, attr, torch.optim.SGD(net.parameters(), lr=1.0))
    t.max_grad_norm = None
    return t, net


def delta(trainer, attr, batch, weights):
    t, net = with_sgd(trainer, attr)
    before = torch.cat([p.detach().flatten().clone() for p in net.parameters()])
    t.update_policy(batch, weights)
    after = torch.cat([p.detach().flatten() for p in net.parameters()])
    return (after - before).numpy().astype(np.float64)


# ------------------------------------------------------------------------------------- DQN
def test_dqn_actions_shape_dtype_and_range():
    t = dqn()
    obs = np.random.default_rng(0).standard_normal((7, 4)).astype(np.float32)
    for explore in (True, False):
        a = t.get_action(obs, explore)
        assert a.shape == (7,) and a.dtype == np.int64 and ((a >= 0) & (a < 3)).all()
    shifted = DQN(OBS, gym.spaces.Discrete(3, start=5), hidden_sizes=(8,))
    shifted.env_steps = 10**9
    a = shifted.get_action(obs, True)
    assert ((a >= 5) & (a < 8)).all()


def test_dqn_td_errors_are_per_sample_and_match_the_bellman_target():
    t = dqn(gamma=0.9)
    b = smoke_batch(OBS, DISC, n=16)
    with torch.no_grad():
        q = t.q_net(torch.from_numpy(b.obs)).gather(1, torch.from_numpy(b.action)[:, None]).squeeze(1)
        q_next = t.target_net(torch.from_numpy(b.next_obs)).max(1).values
        y = torch.from_numpy(b.reward) + 0.9 * q_next * torch.from_numpy(~b.done).float()
    res = t.update_policy(b, np.ones(16, np.float32))
    assert res.td_errors.shape == (16,)
    np.testing.assert_allclose(res.td_errors, (q - y).abs().numpy(), rtol=1e-5, atol=1e-6)
    assert len(np.unique(res.td_errors)) == 16  # never one loss copied B times
    assert {"loss", "q_mean"} <= set(res.metrics)


def test_double_dqn_picks_the_action_with_the_online_net():
    t = dqn(double_dqn=True, gamma=0.5)
    with torch.no_grad():  # make the two networks disagree
        for p in t.target_net.parameters():
            p.add_(torch.randn_like(p))
    b = smoke_batch(OBS, DISC, n=16)
    with torch.no_grad():
        obs, nxt = torch.from_numpy(b.obs), torch.from_numpy(b.next_obs)
        q = t.q_net(obs).gather(1, torch.from_numpy(b.action)[:, None]).squeeze(1)
        a_star = t.q_net(nxt).argmax(1, keepdim=True)
        y = (torch.from_numpy(b.reward)
             + 0.5 * t.target_net(nxt).gather(1, a_star).squeeze(1) * torch.from_numpy(~b.done))
    t.target_update_every = 10**6  # the first update must not overwrite the perturbed target
    t.updates = 1
    res = t.update_policy(b, np.ones(16, np.float32))
    np.testing.assert_allclose(res.td_errors, (q - y).abs().numpy(), rtol=1e-5, atol=1e-6)


def test_dqn_importance_weights_scale_each_samples_gradient():
    t = dqn()
    b = smoke_batch(OBS, DISC, n=8)
    ones = delta(t, "optimizer", b, np.ones(8, np.float32))
    w = np.linspace(0.1, 1.0, 8).astype(np.float32)
    weighted = delta(t, "optimizer", b, w)
    assert not np.allclose(ones, weighted)
    # the update is linear in the weights: sum of the one-hot updates, each scaled by its weight
    parts = sum(w[i] * delta(t, "optimizer", b, np.eye(8, dtype=np.float32)[i]) for i in range(8))
    np.testing.assert_allclose(weighted, parts, rtol=1e-4, atol=1e-6)
    # zero weight: that sample contributes nothing
    np.testing.assert_allclose(delta(t, "optimizer", b, np.zeros(8, np.float32)), 0.0, atol=0)


def test_dqn_epsilon_schedule_is_linear_in_env_steps():
    t = dqn(eps_start=1.0, eps_final=0.1, eps_fraction=0.5, total_env_steps=1000)
    assert t.eps_decay_steps == 500
    for steps, eps in ((0, 1.0), (250, 0.55), (500, 0.1), (10_000, 0.1)):
        t.env_steps = steps
        assert t.epsilon == pytest.approx(eps)
    assert dqn(eps_decay_steps=77).eps_decay_steps == 77


def test_dqn_exploration_follows_epsilon():
    t = dqn(eps_final=0.0, eps_decay_steps=10)
    obs = np.zeros((2000, 4), np.float32)
    greedy = t.get_action(obs, False)
    assert (greedy == greedy[0]).all()
    t.env_steps = 0  # eps = 1: uniform actions
    counts = np.bincount(t.get_action(obs, True), minlength=3)
    assert counts.min() > 550
    t.env_steps = 10  # eps = 0: greedy
    np.testing.assert_array_equal(t.get_action(obs, True), greedy)


def test_dqn_hard_target_update_every_n_updates_and_polyak():
    t = dqn(target_update_every=3)
    b = smoke_batch(OBS, DISC, n=8)
    w = np.ones(8, np.float32)
    for _ in range(3):
        t.update_policy(b, w)
    snapshot = copy.deepcopy(t.q_net.state_dict())
    assert any(not torch.equal(snapshot[k], v) for k, v in t.target_net.state_dict().items())
    t.update_policy(b, w)  # update 3 copies first, then steps
    for k, v in t.target_net.state_dict().items():
        assert torch.equal(v, snapshot[k])
    soft = dqn(target_update_every=1, tau=0.5)
    target0 = [p.detach().clone() for p in soft.target_net.parameters()]
    soft.update_policy(b, w)  # the Polyak step before it averages two equal nets
    online1 = [p.detach().clone() for p in soft.q_net.parameters()]
    soft.update_policy(b, w)  # target <- 0.5 target + 0.5 online, then the gradient step
    for tgt, a, o in zip(soft.target_net.parameters(), target0, online1):
        torch.testing.assert_close(tgt, 0.5 * a + 0.5 * o)


def test_dqn_weights_and_state_round_trip():
    a, b = dqn(), DQN(OBS, DISC, hidden_sizes=(32, 32))
    b.set_weights(a.get_weights())
    obs = np.random.default_rng(1).standard_normal((9, 4)).astype(np.float32)
    np.testing.assert_array_equal(a.get_action(obs, False), b.get_action(obs, False))
    a.update_policy(smoke_batch(OBS, DISC), np.ones(8, np.float32))
    a.env_steps = 42
    c = DQN(OBS, DISC, hidden_sizes=(32, 32))
    c.load_state_dict(a.state_dict())
    assert (c.updates, c.env_steps) == (1, 42)
    assert c._rng.random() == copy.deepcopy(a._rng).random()
    with pytest.raises(SpecError, match="shape"):
        DQN(OBS, DISC, hidden_sizes=(16,)).set_weights(a.get_weights())


def test_dqn_rejects_bad_spaces_and_hparams():
    with pytest.raises(SpecError, match="Discrete action space"):
        DQN(OBS, BOX)
    with pytest.raises(SpecError, match="gamma"):
        DQN(OBS, DISC, gamma=1.5)
    with pytest.raises(SpecError, match="hidden_sizes"):
        DQN(OBS, DISC, hidden_sizes=(0,))


# ------------------------------------------------------------------------------------ DDPG
def test_ddpg_actions_are_continuous_float32_and_inside_asymmetric_bounds():
    t = ddpg(noise_std=5.0)  # huge noise: clipping must keep every action inside the Box
    obs = np.random.default_rng(0).uniform(-1, 1, (500, 4)).astype(np.float32)
    for explore in (True, False):
        a = t.get_action(obs, explore)
        assert a.shape == (500, 2) and a.dtype == np.float32
        assert (a >= BOX.low).all() and (a <= BOX.high).all()
    noisy = ddpg(noise_std=0.2).get_action(obs, True)
    assert len(np.unique(noisy[:, 0])) > 400  # continuous, not a handful of discrete values
    assert not np.allclose(noisy, np.round(noisy))


def test_ddpg_noise_is_scaled_to_the_bounds():
    t = ddpg(noise_std=0.1)
    obs = np.zeros((20_000, 4), np.float32)
    greedy = t.get_action(obs[:1], False)[0]
    noisy = t.get_action(obs, True)
    inside = (noisy > BOX.low + 0.05) & (noisy < BOX.high - 0.05)
    std = np.array([noisy[inside[:, i], i].std() for i in range(2)])
    half = (BOX.high - BOX.low) / 2
    # dimension 0 has half-range 2, dimension 1 has 0.25: the noise follows (clipping trims the tails a bit)
    assert std[0] == pytest.approx(0.1 * half[0], rel=0.15)
    assert std[1] < 0.1 * half[1] * 1.15
    assert np.abs(noisy.mean(0) - greedy).max() < 0.05


def test_ddpg_noise_decay():
    t = ddpg(noise_std=0.4, noise_final=0.1, noise_decay_steps=100)
    t.env_steps = 50
    assert t.current_noise_std == pytest.approx(0.25)
    t.env_steps = 1000
    assert t.current_noise_std == pytest.approx(0.1)


def test_ddpg_td_errors_are_per_sample_critic_errors():
    t = ddpg(gamma=0.9)
    b = smoke_batch(OBS, BOX, n=16)
    mid, half = (BOX.high + BOX.low) / 2, (BOX.high - BOX.low) / 2
    with torch.no_grad():
        obs, nxt = torch.from_numpy(b.obs), torch.from_numpy(b.next_obs)
        a = torch.from_numpy((b.action - mid) / half)
        q = t.critic(torch.cat([obs, a], 1)).squeeze(1)
        q_next = t.critic_target(torch.cat([nxt, t.actor_target(nxt)], 1)).squeeze(1)
        y = torch.from_numpy(b.reward) + 0.9 * q_next * torch.from_numpy(~b.done)
    res = t.update_policy(b, np.ones(16, np.float32))
    assert res.td_errors.shape == (16,) and len(np.unique(res.td_errors)) == 16
    np.testing.assert_allclose(res.td_errors, (q - y).abs().numpy(), rtol=1e-4, atol=1e-5)
    assert {"critic_loss", "actor_loss"} <= set(res.metrics)


def test_ddpg_importance_weights_change_the_critic_gradient():
    t = ddpg()
    b = smoke_batch(OBS, BOX, n=8)
    w = np.linspace(0.1, 1.0, 8).astype(np.float32)
    weighted = delta(t, "critic_optimizer", b, w)
    assert not np.allclose(delta(t, "critic_optimizer", b, np.ones(8, np.float32)), weighted)
    parts = sum(w[i] * delta(t, "critic_optimizer", b, np.eye(8, dtype=np.float32)[i]) for i in range(8))
    np.testing.assert_allclose(weighted, parts, rtol=1e-4, atol=1e-6)


def test_ddpg_targets_follow_polyak_and_actor_learns():
    t = ddpg(tau=0.5)
    b = smoke_batch(OBS, BOX, n=8)
    actor0 = [p.detach().clone() for p in t.actor.parameters()]
    t.update_policy(b, np.ones(8, np.float32))
    for tgt, a0, a1 in zip(t.actor_target.parameters(), actor0, t.actor.parameters()):
        torch.testing.assert_close(tgt, 0.5 * a0 + 0.5 * a1.detach())
    assert any(not torch.equal(a0, a1) for a0, a1 in zip(actor0, t.actor.parameters()))


def test_ddpg_rejects_unbounded_or_discrete_actions():
    with pytest.raises(SpecError, match="finite action bounds"):
        DDPG(OBS, gym.spaces.Box(-np.inf, np.inf, (1,), np.float32))
    with pytest.raises(SpecError, match="Box action space"):
        DDPG(OBS, DISC)


def test_ddpg_state_round_trip():
    a = ddpg()
    a.update_policy(smoke_batch(OBS, BOX), np.ones(8, np.float32))
    c = DDPG(OBS, BOX, actor_hidden=(32, 32), critic_hidden=(32, 32))
    c.load_state_dict(a.state_dict())
    obs = np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_array_equal(a.get_action(obs, False), c.get_action(obs, False))
    np.testing.assert_array_equal(a.get_action(obs, True), c.get_action(obs, True))  # same noise stream
    assert c.updates == 1


def test_default_trainer_and_its_hidden_size_keywords():
    assert default_trainer(DISC) is DQN and default_trainer(BOX) is DDPG
    assert hidden_kwargs(DQN, (8, 8)) == {"hidden_sizes": (8, 8)}
    assert hidden_kwargs(DDPG, [8]) == {"actor_hidden": [8], "critic_hidden": [8]}

    class Wide(DDPG):
        pass

    assert set(hidden_kwargs(Wide, (4,))) == {"actor_hidden", "critic_hidden"}
    assert DQN(OBS, DISC, **hidden_kwargs(DQN, (8,))).hidden_sizes == (8,)


# ----------------------------------------------------------------------------- dueling DQN
def test_dueling_q_is_value_plus_centred_advantage_and_trains_with_torch():
    from pearl_core.algorithms.dqn import DuelingQNet

    torch.manual_seed(0)
    t = DQN(OBS, DISC, hidden_sizes=(16, 8), dueling=True, seed=0)
    assert isinstance(t.q_net, DuelingQNet) and isinstance(t.target_net, DuelingQNet)
    assert t.engine == "torch"
    x = torch.from_numpy(np.random.default_rng(0).uniform(-1, 1, (5, 4)).astype(np.float32))
    h = t.q_net.trunk(x)
    a = t.q_net.advantage(h)
    expect = t.q_net.value(h) + a - a.mean(dim=1, keepdim=True)
    torch.testing.assert_close(t.q_net(x), expect)
    # the advantages average to zero per state, so mean_a Q(s, a) is V(s)
    torch.testing.assert_close(t.q_net(x).mean(dim=1), t.q_net.value(h).squeeze(1))
    with pytest.raises(SpecError, match="needs a ReLU MLP on the CPU \\(found dueling heads\\)"):
        DQN(OBS, DISC, dueling=True, engine="numpy")
    from pearl_core.trainer_check import check_trainer

    assert check_trainer(DQN, OBS, DISC, dueling=True, hidden_sizes=(16, 8)).dueling


def test_dueling_double_dqn_td_errors_match_the_bellman_target_and_weights_round_trip():
    torch.manual_seed(1)
    t = DQN(OBS, DISC, hidden_sizes=(16, 16), dueling=True, double_dqn=True, gamma=0.9, seed=0)
    with torch.no_grad():  # make the two networks disagree
        for p in t.target_net.parameters():
            p.add_(torch.randn_like(p))
    b = smoke_batch(OBS, DISC, n=8, seed=3)
    with torch.no_grad():
        nxt = torch.from_numpy(b.next_obs)
        a_star = t.q_net(nxt).argmax(dim=1, keepdim=True)
        q_next = t.target_net(nxt).gather(1, a_star).squeeze(1).numpy()
        y = b.reward + 0.9 * q_next * ~b.done
        q = t.q_net(torch.from_numpy(b.obs)).gather(1, torch.from_numpy(b.action)[:, None]).squeeze(1)
    t.target_update_every = 10**6  # the first update must not overwrite the perturbed target
    t.updates = 1
    res = t.update_policy(b, np.ones(8, np.float32))
    np.testing.assert_allclose(res.td_errors, np.abs(q.numpy() - y), rtol=1e-5, atol=1e-6)
    other = DQN(OBS, DISC, hidden_sizes=(16, 16), dueling=True, seed=5)
    other.set_weights(t.get_weights())
    obs = np.random.default_rng(2).uniform(-1, 1, (6, 4)).astype(np.float32)
    np.testing.assert_array_equal(other.get_action(obs, explore=False), t.get_action(obs, explore=False))
    with pytest.raises(SpecError, match="missing"):
        DQN(OBS, DISC, hidden_sizes=(16, 16)).set_weights(t.get_weights())  # a plain net's keys differ


def test_dueling_workload_counts_both_heads():
    from pearl_core.composer import workload_for_env

    wl = workload_for_env("CartPole-v1", 32, hidden_sizes=(64, 64), trainer_kwargs={"dueling": True})
    names = [ly.name for ly in wl.layers if ly.group == "q_net"]
    assert names == ["q_net.trunk.0", "q_net.trunk.2", "q_net.value", "q_net.advantage"]
    macs = 4 * 64 + 64 * 64 + 64 * 1 + 64 * 2
    assert wl.train_flops == 32 * (2 * 2 * macs + 4 * macs)
