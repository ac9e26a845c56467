"""The native DQN step (pearl_cpu._learner): found through the backend and kernel_lookup, checks its
input, and bad input changes nothing. Its math against torch: tests/test_mlp_engine.py."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from pearl_core.algorithms import DQN
from pearl_core.plugins import get_backend, kernel_lookup
from pearl_cpu.learner import dqn_mlp_kernel, find_sgemm


def _trainer():
    env = gym.make("CartPole-v1")
    torch.manual_seed(0)
    t = DQN(env.observation_space, env.action_space, hidden_sizes=(16, 8), engine="native", seed=0,
            learner_kernels=kernel_lookup("cpu"))
    env.close()
    return t


def _batch(B=8, seed=0):
    rng = np.random.default_rng(seed)
    return dict(obs=rng.standard_normal((B, 4)).astype(np.float32), actions=rng.integers(0, 2, B),
                rewards=np.ones(B, np.float32), next_obs=rng.standard_normal((B, 4)).astype(np.float32),
                done=rng.random(B) < 0.2, weights=np.ones(B, np.float32))


HP = dict(gamma=0.99, huber_delta=1.0, max_grad_norm=10.0, double_dqn=False, lr=1e-3, beta1=0.9, beta2=0.999,
          eps=1e-8)


def _kernel(t, B=8):
    eng = t._engine
    return eng._native_kernel(B)


def _state(t):
    st = [t.optimizer.state[p] for p in t._params]
    return ([p.detach().numpy().copy() for p in list(t.q_net.parameters()) + list(t.target_net.parameters())]
            + [s[k].numpy().copy() for s in st for k in ("exp_avg", "exp_avg_sq")] + [t._engine._steps.copy()])


def test_backend_provides_the_kernel_and_sgemm_is_found():
    assert get_backend("cpu").learner_kernel("dqn_mlp") is dqn_mlp_kernel
    assert get_backend("cpu").learner_kernel("no-such-step") is None
    # what trainers are handed: found by the device's kind, for any device of it
    assert kernel_lookup("cpu")("dqn_mlp") is kernel_lookup("cpu:0")("dqn_mlp") is dqn_mlp_kernel
    assert kernel_lookup("cpu")("no-such-step") is None
    address, ilp64 = find_sgemm()
    assert address > 0 and isinstance(ilp64, bool)


def test_a_step_changes_parameters_adam_state_and_counters():
    t = _trainer()
    k = _kernel(t)
    before = _state(t)
    td, loss, q_mean = k.step(**_batch(), **HP)
    after = _state(t)
    assert td.shape == (8,) and td.dtype == np.float32 and np.all(td >= 0)
    assert loss > 0 and np.isfinite(q_mean)
    n = len(list(t.q_net.parameters()))
    for x, y in zip(before[:n], after[:n]):
        assert not np.array_equal(x, y)  # every online parameter moved
    for x, y in zip(before[n:2 * n], after[n:2 * n]):
        np.testing.assert_array_equal(x, y)  # the target network did not
    np.testing.assert_array_equal(after[-1], before[-1] + 1)  # each Adam step counter counted one step


@pytest.mark.parametrize("field,value,match", [
    ("actions", np.array([0, 1, 2, 0, 1, 0, 1, 0]), r"actions\[2\] = 2 is outside \[0, 2\)"),
    ("actions", np.array([0, 1, -1, 0, 1, 0, 1, 0]), r"actions\[2\] = -1 is outside"),
    ("obs", np.zeros((8, 4), np.float64), "obs must be float32; found float64"),
    ("obs", np.zeros((8, 5), np.float32), r"obs has shape \(8, 5\); expected \(8, 4\)"),
    ("next_obs", np.zeros((7, 4), np.float32), r"next_obs has shape \(7, 4\); expected \(8, 4\)"),
    ("rewards", np.zeros(8, np.float64), "rewards must be float32"),
    ("done", np.zeros(8, np.int64), "done must be bool"),
    ("weights", np.zeros((8, 1), np.float32), r"weights has shape \(8, 1\); expected \(8,\)"),
    ("obs", np.zeros((4, 8), np.float32).T, "obs must be C-contiguous"),
])
def test_bad_input_raises_and_changes_nothing(field, value, match):
    t = _trainer()
    k = _kernel(t)
    k.step(**_batch(), **HP)
    before = _state(t)
    batch = _batch(seed=1)
    batch[field] = value
    with pytest.raises(ValueError, match=match):
        k.step(**batch, **HP)
    for x, y in zip(before, _state(t)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("hp,match", [({"gamma": 1.5}, r"gamma must be in \[0, 1\]"),
                                      ({"huber_delta": 0.0}, "huber_delta must be > 0")])
def test_bad_hyperparameters_raise(hp, match):
    t = _trainer()
    k = _kernel(t)
    before = _state(t)
    with pytest.raises(ValueError, match=match):
        k.step(**_batch(), **{**HP, **hp})
    for x, y in zip(before, _state(t)):
        np.testing.assert_array_equal(x, y)


def test_construction_checks_every_array():
    t = _trainer()
    eng = t._engine
    online, target = eng._views()
    m, v, _ = eng._adam_state()
    m, v = [x.numpy() for x in m], [x.numpy() for x in v]
    steps = eng._steps
    ok = dqn_mlp_kernel(online, target, m, v, steps, 8)
    assert (ok.batch, ok.in_features, ok.n_actions) == (8, 4, 2)
    with pytest.raises(ValueError, match=r"layer 1 target weight has shape \(8, 8\); expected \(8, 16\)"):
        bad = list(target)
        bad[1] = (np.zeros((8, 8), np.float32), target[1][1])
        dqn_mlp_kernel(online, bad, m, v, steps, 8)
    with pytest.raises(ValueError, match="layer 0 bias exp_avg must be float32; found float64"):
        dqn_mlp_kernel(online, target, [m[0], m[1].astype(np.float64)] + m[2:], v, steps, 8)
    with pytest.raises(ValueError, match=r"Adam step counters has shape \(3,\); expected \(6,\)"):
        dqn_mlp_kernel(online, target, m, v, np.zeros(3, np.float32), 8)
    with pytest.raises(ValueError, match="must be writeable"):
        ro = online[0][0].copy()
        ro.flags.writeable = False
        dqn_mlp_kernel([(ro, online[0][1])] + list(online[1:]), target, m, v, steps, 8)
    with pytest.raises(ValueError, match="online and target networks differ in depth"):
        dqn_mlp_kernel(online, target[:2], m, v, steps, 8)
    with pytest.raises(ValueError, match="batch size must be >= 1"):
        dqn_mlp_kernel(online, target, m, v, steps, 0)
