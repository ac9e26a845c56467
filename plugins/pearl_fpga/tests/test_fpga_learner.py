"""The MLP learner pipeline against torch: forward, DQN loss, gradients and whole update steps.

Runs on the FPGA Emulation Device (CI installs ``pearl-fpga[emulator]``). Tolerances are
float32 ones: the kernels sum in a different order than torch's BLAS.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pearl_core.algorithms.common import mlp
from pearl_core.algorithms.dqn import DQN
from pearl_fpga.dqn import FpgaDQN
from pearl_fpga.learner import MLPPipeline, linear_relu_dims

TOL = dict(rtol=1e-4, atol=1e-5)


def pairs(net):
    return [(m.weight.detach().numpy(), m.bias.detach().numpy()) for m in net if isinstance(m, torch.nn.Linear)]


def make_batch(rng, n, obs_dim=4, n_act=2):
    return SimpleNamespace(
        obs=rng.normal(size=(n, obs_dim)).astype(np.float32),
        next_obs=rng.normal(size=(n, obs_dim)).astype(np.float32),
        action=rng.integers(0, n_act, size=n),
        reward=rng.normal(size=n).astype(np.float32) * 3,
        done=rng.random(n) < 0.2,
    )


@pytest.mark.parametrize("dp,uf", [(1, 1), (4, 2), (7, 4)])
def test_forward_matches_torch_for_4_64_64_2(dp, uf):
    torch.manual_seed(0)
    net = mlp(4, (64, 64), 2)
    assert linear_relu_dims(net) == [4, 64, 64, 2]
    pipe = MLPPipeline([4, 64, 64, 2], dp=dp, uf=uf)
    pipe.write_params(pipe.params, pairs(net))
    x = np.random.default_rng(1).normal(size=(33, 4)).astype(np.float32)
    np.testing.assert_allclose(pipe.forward(x), net(torch.from_numpy(x)).detach().numpy(), **TOL)


@pytest.mark.parametrize("huber_delta,double_dqn,dp,uf", [(1.0, False, 1, 1), (1.0, True, 8, 2), (0.0, False, 3, 4)])
def test_dqn_loss_td_and_gradients_match_torch(huber_delta, double_dqn, dp, uf):
    torch.manual_seed(1)
    net, target = mlp(4, (64, 64), 2), mlp(4, (64, 64), 2)
    rng = np.random.default_rng(2)
    b = make_batch(rng, 32)
    w = rng.uniform(0.2, 1.0, size=32).astype(np.float32)
    gamma = 0.99

    # torch, written as DQN.update_policy computes it
    obs, nxt = torch.from_numpy(b.obs), torch.from_numpy(b.next_obs)
    act, rew = torch.from_numpy(b.action), torch.from_numpy(b.reward)
    done = torch.from_numpy(b.done)
    with torch.no_grad():
        q_next_all = target(nxt)
        if double_dqn:
            q_next = q_next_all.gather(1, net(nxt).argmax(1, keepdim=True)).squeeze(1)
        else:
            q_next = q_next_all.max(1).values
        y = torch.where(done, rew, rew + gamma * q_next)
    q_all = net(obs)
    q = q_all.gather(1, act.unsqueeze(1)).squeeze(1)
    if huber_delta > 0:
        per = F.huber_loss(q, y, reduction="none", delta=huber_delta)
    else:
        per = F.mse_loss(q, y, reduction="none")
    loss = (per * torch.from_numpy(w)).mean()
    loss.backward()

    pipe = MLPPipeline([4, 64, 64, 2], dp=dp, uf=uf)
    pipe.write_params(pipe.params, pairs(net))
    tp = pipe.new_params(pairs(target))
    got_loss, td, q_dev, grads = pipe.dqn_loss_and_grads(
        b.obs, b.action, b.reward, b.next_obs, b.done.astype(np.float32), w,
        target_params=tp, gamma=gamma, huber_delta=huber_delta, double_dqn=double_dqn)
    np.testing.assert_allclose(q_dev, q_all.detach().numpy(), **TOL)
    np.testing.assert_allclose(td, (q - y).abs().detach().numpy(), **TOL)
    assert got_loss == pytest.approx(float(loss.detach()), rel=1e-4, abs=1e-6)
    linears = [m for m in net if isinstance(m, torch.nn.Linear)]
    for (gw, gb), m in zip(grads, linears):
        np.testing.assert_allclose(gw, m.weight.grad.numpy(), **TOL)
        np.testing.assert_allclose(gb, m.bias.grad.numpy(), **TOL)


def test_fpga_dqn_update_steps_match_torch_dqn():
    """Ten full steps (target copies, clipping active, Adam) from the same start stay within float tolerance."""
    obs_space = gym.spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
    act_space = gym.spaces.Discrete(2)
    kw = dict(hidden_sizes=(64, 64), target_update_every=3, max_grad_norm=0.22, lr=1e-3, seed=0)
    torch.manual_seed(3)
    ref = DQN(obs_space, act_space, **kw)
    dev = FpgaDQN(obs_space, act_space, dp=4, uf=2, **kw)
    dev.q_net.load_state_dict(ref.q_net.state_dict())
    dev.target_net.load_state_dict(ref.target_net.state_dict())
    dev._push()
    rng = np.random.default_rng(4)
    coefs = []
    for _ in range(10):
        b = make_batch(rng, 32)
        w = rng.uniform(0.2, 1.0, size=32).astype(np.float32)
        r_ref, r_dev = ref.update_policy(b, w), dev.update_policy(copy.deepcopy(b), w)
        np.testing.assert_allclose(r_dev.td_errors, r_ref.td_errors, rtol=1e-3, atol=1e-4)
        assert r_dev.metrics["loss"] == pytest.approx(r_ref.metrics["loss"], rel=1e-3, abs=1e-5)
        coefs.append(dev.pipeline.rt.read(dev.pipeline.coef, np.empty(2, np.float32))[0])
    assert min(coefs) < 1.0 < max(coefs) + 1e-6  # clipping both active and idle (norms here ~0.19-0.30)
    for (a, b_), (c, d) in zip(pairs(dev.q_net), pairs(ref.q_net)):
        np.testing.assert_allclose(a, c, rtol=1e-3, atol=1e-5)
        np.testing.assert_allclose(b_, d, rtol=1e-3, atol=1e-5)
    assert dev.updates == ref.updates == 10
    # A checkpoint carries the device's Adam moments; restoring it continues identically.
    state = dev.state_dict()
    twin = FpgaDQN(obs_space, act_space, dp=1, uf=1, **kw)
    twin.load_state_dict(state)
    b = make_batch(rng, 16)
    w = np.ones(16, np.float32)
    np.testing.assert_allclose(twin.update_policy(b, w).td_errors, dev.update_policy(b, w).td_errors, **TOL)
    # A deep copy (the parallel runtime's evaluator) has its own device buffers.
    clone = copy.deepcopy(dev)
    before = dev.pipeline.read_flat(dev.pipeline.params).copy()
    np.testing.assert_array_equal(clone.pipeline.read_flat(clone.pipeline.params), before)
    clone.update_policy(b, w)
    np.testing.assert_array_equal(dev.pipeline.read_flat(dev.pipeline.params), before)
    assert not np.array_equal(clone.pipeline.read_flat(clone.pipeline.params), before)


def test_non_mlp_networks_are_rejected_with_the_reason():
    from pearl_core.errors import SpecError

    with pytest.raises(SpecError, match="Linear.*ReLU"):
        linear_relu_dims(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)))
