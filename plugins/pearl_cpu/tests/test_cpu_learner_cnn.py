"""The native DQN step with a convolutional front (``"dqn_cnn"``, csrc/dqn_mlp.cpp): the small image
encoder (MinAtar's network) trained as one native call per update, step for step what the torch path
computes; two threads bitwise what one computes; bad input raises and changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from pearl_core.algorithms import DQN
from pearl_core.algorithms.mlp_engine import ConvDQNEngine
from pearl_core.plugins import get_backend, kernel_lookup
from pearl_core.replay.storage import Batch
from pearl_core.sdk import AdamHyper, ConvShape, DQNKernel, DQNStepArgs
from pearl_core.testing import DQNConvKernelConformance
from pearl_cpu.learner import dqn_cnn_kernel

MINATAR = spaces.Box(0, 1, (4, 10, 10), np.uint8)    # 0/1 grids: no input scale
FRAMES = spaces.Box(0, 255, (2, 12, 9), np.uint8)    # small uint8 frames: scaled by 1/255, not square
ACTIONS = spaces.Discrete(3)


def _pair(space=MINATAR, **kw):
    """(torch, native) trainers from the same initial weights."""
    out = []
    for engine, kernels in (("torch", None), ("native", kernel_lookup("cpu"))):
        torch.manual_seed(0)
        out.append(DQN(space, ACTIONS, engine=engine, learner_kernels=kernels, seed=0, lr=1e-3, **kw))
    return out


def _batch(space, B, seed, steps=None):
    rng = np.random.default_rng(seed)
    high = int(space.high.max())
    obs = rng.integers(0, high + 1, (B, *space.shape), dtype=np.uint8)
    nxt = rng.integers(0, high + 1, (B, *space.shape), dtype=np.uint8)
    k = None if steps is None else rng.integers(1, steps + 1, B).astype(np.int32)
    b = Batch(obs, rng.integers(0, ACTIONS.n, B), rng.standard_normal(B).astype(np.float32), nxt, rng.random(B) < 0.2,
              steps=k)
    return b, rng.uniform(0.2, 1.0, B).astype(np.float32)


def _params(t):
    return [p.detach().numpy().copy() for p in list(t.q_net.parameters()) + list(t.target_net.parameters())]


def test_the_backend_provides_it_and_dqn_takes_it_for_the_small_encoder():
    assert get_backend("cpu").learner_kernel("dqn_cnn") is dqn_cnn_kernel
    assert kernel_lookup("cpu")("dqn_cnn") is dqn_cnn_kernel
    ref, nat = _pair()
    assert ref.engine == "torch" and ref._engine is None
    assert nat.engine == "native" and isinstance(nat._engine, ConvDQNEngine)
    assert nat._engine.conv == (4, 10, 10, 3, 1)
    assert nat.threads_yield  # the native step's help-first helper
    # without a kernel the CNN keeps the torch path, as before
    assert DQN(MINATAR, ACTIONS, learner_kernels=lambda name: None).engine == "torch"


@pytest.mark.parametrize("space,kw,steps", [
    (MINATAR, {}, None),
    (MINATAR, {"double_dqn": True, "max_grad_norm": 0.05}, None),   # clipping active
    (FRAMES, {"hidden_sizes": (32, 16)}, None),                     # scaled input, two hidden layers
    (MINATAR, {"target_update_every": 3}, 3),                       # n-step discounts, target copies
])
def test_native_steps_match_the_torch_path(space, kw, steps):
    ref, nat = _pair(space, **kw)
    for seed in range(8):
        batch, w = _batch(space, 32, seed, steps)
        r1 = ref.update_policy(batch, w)
        r2 = nat.update_policy(batch, w)
        np.testing.assert_allclose(r2.td_errors, r1.td_errors, rtol=1e-4, atol=1e-5)
        assert r2.metrics["loss"] == pytest.approx(r1.metrics["loss"], rel=1e-4, abs=1e-6)
        assert r2.metrics["q_mean"] == pytest.approx(r1.metrics["q_mean"], rel=1e-4, abs=1e-6)
    for a, b in zip(_params(ref), _params(nat)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    assert ref.updates == nat.updates == 8
    # acting reads the same network
    obs = _batch(space, 5, 99)[0].obs
    np.testing.assert_array_equal(nat.get_action(obs, explore=False), ref.get_action(obs, explore=False))


def test_copies_and_pickles_train_on_their_own_arrays():
    # The parallel runtime deep-copies the trainer (its evaluator) and pickles it to workers.
    import copy
    import pickle

    _, nat = _pair()
    batch, w = _batch(MINATAR, 32, 0)
    nat.update_policy(batch, w)
    for twin in (copy.deepcopy(nat), pickle.loads(pickle.dumps(nat))):
        assert twin.engine == "native" and isinstance(twin._engine, ConvDQNEngine) and twin._engine.t is twin
        before, mine = _params(twin), _params(nat)
        np.testing.assert_array_equal(twin.get_action(batch.obs, explore=False),
                                      nat.get_action(batch.obs, explore=False))
        twin.update_policy(*_batch(MINATAR, 32, 1))
        assert not np.array_equal(_params(twin)[0], before[0])  # the copy trained ...
        for a, b in zip(mine, _params(nat)):
            np.testing.assert_array_equal(a, b)  # ... and the original's arrays were not touched


def test_two_threads_compute_bitwise_what_one_thread_computes():
    one, two = _pair(double_dqn=True, max_grad_norm=0.05)[1], _pair(double_dqn=True, max_grad_norm=0.05)[1]
    one.use_threads(1)
    two.use_threads(2)
    for seed in range(5):
        batch, w = _batch(MINATAR, 32, seed)
        r1, r2 = one.update_policy(batch, w), two.update_policy(batch, w)
        np.testing.assert_array_equal(r1.td_errors, r2.td_errors)
        assert r1.metrics == r2.metrics
    assert one._engine._kernel[1].threads == 1 and two._engine._kernel[1].threads == 2
    for a, b in zip(_params(one), _params(two)):
        np.testing.assert_array_equal(a, b)


def test_bad_input_raises_and_changes_nothing():
    _, nat = _pair()
    batch, w = _batch(MINATAR, 32, 0)
    nat.update_policy(batch, w)
    kern = nat._engine._kernel[1]
    assert kern.conv == [4, 10, 10, 3, 1] and kern.in_features == 400
    before = _params(nat)
    good = dict(obs=np.zeros((32, 400), np.float32), actions=np.zeros(32, np.int64), rewards=np.zeros(32, np.float32),
                next_obs=np.zeros((32, 400), np.float32), done=np.zeros(32, bool), weights=np.ones(32, np.float32))
    assert isinstance(kern, DQNKernel)  # pearl_core.kernels' protocol
    hp = dict(gamma=0.99, huber_delta=1.0, max_grad_norm=10.0, double_dqn=False, adam=AdamHyper(1e-3, 0.9, 0.999, 1e-8))
    for field, value, match in (("obs", np.zeros((32, 4, 10, 10), np.float32), r"obs has shape \(32, 4, 10, 10\)"),
                                ("next_obs", np.zeros((32, 399), np.float32), r"expected \(32, 400\)"),
                                ("actions", np.full(32, 3), r"actions\[0\] = 3 is outside \[0, 3\)")):
        with pytest.raises(ValueError, match=match):
            kern.step(DQNStepArgs(**dict(good, **{field: value}), **hp))
    for a, b in zip(before, _params(nat)):
        np.testing.assert_array_equal(a, b)


def test_construction_checks_the_convolution():
    _, nat = _pair()
    eng = nat._engine
    online, target = eng._views()
    m = [np.zeros_like(a) for pair in online for a in pair]
    steps = np.zeros(len(m), np.float32)
    with pytest.raises(ValueError, match="conv must be"):
        dqn_cnn_kernel((4, 10, 10), online, target, m, m, steps, 32)
    with pytest.raises(ValueError, match="not a valid unpadded convolution"):
        dqn_cnn_kernel(ConvShape(4, 2, 10, 3, 1), online, target, m, m, steps, 32)
    with pytest.raises(ValueError, match=r"weight must be \(out_channels, channels \* kernel \* kernel\)"):
        dqn_cnn_kernel((3, 10, 10, 3, 1), online, target, m, m, steps, 32)
    with pytest.raises(ValueError, match="layer 1 takes 1024 inputs; the previous layer gives 1296"):
        dqn_cnn_kernel((4, 11, 11, 3, 1), online, target, m, m, steps, 32)


class TestCpuConvKernelConformance(DQNConvKernelConformance):
    """The testing kit's "dqn_cnn" suite (what a third-party backend runs) on this backend's kernel."""

    def kernel_factory(self):
        return dqn_cnn_kernel
