"""The numpy DQN engine computes what the torch path computes, step for step."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from pearl_core.algorithms import DQN
from pearl_core.errors import SpecError
from pearl_core.replay.storage import Batch


def _pair(**kw):
    env = gym.make("CartPole-v1")
    torch.manual_seed(3)
    a = DQN(env.observation_space, env.action_space, engine="torch", seed=0, **kw)
    torch.manual_seed(3)
    b = DQN(env.observation_space, env.action_space, engine="numpy", seed=0, **kw)
    env.close()
    return a, b


def _batches(n, B=32, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        obs = rng.standard_normal((B, 4)).astype(np.float32)
        out.append((Batch(obs, rng.integers(0, 2, B), rng.standard_normal(B).astype(np.float32),
                          rng.standard_normal((B, 4)).astype(np.float32), rng.random(B) < 0.1),
                    rng.uniform(0.2, 1.0, B).astype(np.float32)))
    return out


def _params(t):
    return [p.detach().numpy().copy() for p in list(t.q_net.parameters()) + list(t.target_net.parameters())]


@pytest.mark.parametrize("kw", [
    {},                                                                  # SB3's CartPole settings
    {"double_dqn": True, "hidden_sizes": (32, 16), "lr": 1e-2},
    {"max_grad_norm": None, "huber_delta": 0.5, "target_update_every": 3},
    {"max_grad_norm": 0.05, "tau": 0.3, "target_update_every": 2},     # clipping active, Polyak targets
])
@pytest.mark.parametrize("fused_adam", [True, False], ids=["torch-fused-adam", "numpy-adam"])
def test_numpy_engine_matches_torch_over_many_steps(kw, fused_adam, monkeypatch):
    if not fused_adam:
        from pearl_core.algorithms import mlp_engine

        monkeypatch.setattr(mlp_engine, "_FUSED_ADAM", None)
    a, b = _pair(**kw)
    assert a.engine == "torch" and b.engine == "numpy"
    for batch, w in _batches(12):
        ra, rb = a.update_policy(batch, w), b.update_policy(batch, w)
        np.testing.assert_allclose(rb.td_errors, ra.td_errors, rtol=2e-4, atol=2e-5)
        assert rb.metrics["loss"] == pytest.approx(ra.metrics["loss"], rel=2e-4, abs=1e-6)
        assert rb.metrics["q_mean"] == pytest.approx(ra.metrics["q_mean"], rel=2e-4, abs=1e-6)
        for pa, pb in zip(_params(a), _params(b)):
            np.testing.assert_allclose(pb, pa, rtol=1e-4, atol=2e-6)
    assert a.updates == b.updates == 12


def test_numpy_engine_checkpoints_resume_exactly():
    a, b = _pair(hidden_sizes=(16, 16))
    batches = _batches(6)
    for batch, w in batches[:3]:
        b.update_policy(batch, w)
    state = copy.deepcopy(b.state_dict())
    assert float(state["optimizer"]["state"][0]["step"]) == 3.0  # Adam's moments live in torch's layout
    c = copy.deepcopy(b)
    resumed = _pair(hidden_sizes=(16, 16))[1]
    resumed.load_state_dict(state)
    for batch, w in batches[3:]:
        r1, r2 = c.update_policy(batch, w), resumed.update_policy(batch, w)
        np.testing.assert_array_equal(r1.td_errors, r2.td_errors)
    for p1, p2 in zip(_params(c), _params(resumed)):
        np.testing.assert_array_equal(p1, p2)


def test_engine_choice_and_errors():
    env = gym.make("CartPole-v1")
    assert DQN(env.observation_space, env.action_space).engine == "numpy"  # auto on the CPU
    with pytest.raises(SpecError, match="engine = 'jax'"):
        DQN(env.observation_space, env.action_space, engine="jax")
    env.close()
