"""The numpy and native DQN engines compute what the torch path computes, step for step."""

from __future__ import annotations

import copy
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch

from pearl_core.algorithms import DQN
from pearl_core.errors import KernelUnavailableError, SpecError
from pearl_core.plugins import kernel_lookup
from pearl_core.replay.storage import Batch


#: what the runtime gives a trainer whose learner runs on the CPU
CPU_KERNELS = kernel_lookup("cpu")


def _pair(engine="numpy", **kw):
    env = gym.make("CartPole-v1")
    torch.manual_seed(3)
    a = DQN(env.observation_space, env.action_space, engine="torch", seed=0, **kw)
    torch.manual_seed(3)
    b = DQN(env.observation_space, env.action_space, engine=engine, seed=0, learner_kernels=CPU_KERNELS, **kw)
    env.close()
    return a, b


needs_native = pytest.mark.skipif(CPU_KERNELS("dqn_mlp") is None,
                                  reason="the CPU backend's native DQN step (pearl-cpu) is not installed here")
ENGINES = ["numpy", pytest.param("native", marks=needs_native)]


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


CONFIGS = [
    {},                                                                  # SB3's CartPole settings
    {"double_dqn": True, "hidden_sizes": (32, 16), "lr": 1e-2},
    {"max_grad_norm": None, "huber_delta": 0.5, "target_update_every": 3},
    {"max_grad_norm": 0.05, "tau": 0.3, "target_update_every": 2},     # clipping active, Polyak targets
]


def _moments(t):
    st = [t.optimizer.state[p] for p in t._params]
    return ([s[k].numpy().copy() for s in st for k in ("exp_avg", "exp_avg_sq")]
            + [np.array([float(s["step"])]) for s in st])


@pytest.mark.parametrize("kw", CONFIGS)
@pytest.mark.parametrize("engine,fused_adam",
                         [("numpy", True), ("numpy", False), pytest.param("native", True, marks=needs_native)],
                         ids=["numpy-torch-fused-adam", "numpy-numpy-adam", "native"])
def test_engine_matches_torch_step_by_step(kw, engine, fused_adam, monkeypatch):
    """Every step from the same state (the candidate is loaded with the torch trainer's state
    first) gives the same TD errors, loss, parameters and Adam state. Loading every step keeps
    float noise from compounding: a last-bit difference can flip a ReLU that sits at zero, and
    Adam turns a zero-versus-tiny gradient into a whole step, so long free runs of two correct
    implementations drift apart (see the free-run test below for one that stays close)."""
    if not fused_adam:
        from pearl_core.algorithms import mlp_engine

        monkeypatch.setattr(mlp_engine, "_FUSED_ADAM", None)
    a, b = _pair(engine, **kw)
    assert a.engine == "torch" and b.engine == engine
    for batch, w in _batches(12):
        b.load_state_dict(copy.deepcopy(a.state_dict()))
        ra, rb = a.update_policy(batch, w), b.update_policy(batch, w)
        np.testing.assert_allclose(rb.td_errors, ra.td_errors, rtol=2e-4, atol=2e-5)
        assert rb.metrics["loss"] == pytest.approx(ra.metrics["loss"], rel=2e-4, abs=1e-6)
        assert rb.metrics["q_mean"] == pytest.approx(ra.metrics["q_mean"], rel=2e-4, abs=1e-6)
        for pa, pb in zip(_params(a) + _moments(a), _params(b) + _moments(b)):
            np.testing.assert_allclose(pb, pa, rtol=1e-4, atol=2e-6)
    assert a.updates == b.updates == 12


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_free_run_stays_with_torch(engine):
    """Twelve steps without re-syncing (the Adam state and step counters carried by the engine
    itself), on a small network whose ReLUs stay clear of zero for these batches."""
    a, b = _pair(engine, double_dqn=True, hidden_sizes=(32, 16), lr=1e-2)
    for batch, w in _batches(12):
        ra, rb = a.update_policy(batch, w), b.update_policy(batch, w)
        np.testing.assert_allclose(rb.td_errors, ra.td_errors, rtol=1e-3, atol=1e-4)
    for pa, pb in zip(_params(a) + _moments(a), _params(b) + _moments(b)):
        np.testing.assert_allclose(pb, pa, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_checkpoints_resume_exactly(engine):
    a, b = _pair(engine, hidden_sizes=(16, 16))
    batches = _batches(6)
    for batch, w in batches[:3]:
        b.update_policy(batch, w)
    state = copy.deepcopy(b.state_dict())
    assert float(state["optimizer"]["state"][0]["step"]) == 3.0  # Adam's moments live in torch's layout
    c = copy.deepcopy(b)
    resumed = _pair(engine, hidden_sizes=(16, 16))[1]
    resumed.load_state_dict(state)
    for batch, w in batches[3:]:
        r1, r2 = c.update_policy(batch, w), resumed.update_policy(batch, w)
        np.testing.assert_array_equal(r1.td_errors, r2.td_errors)
    for p1, p2 in zip(_params(c), _params(resumed)):
        np.testing.assert_array_equal(p1, p2)


def test_engine_choice_and_errors():
    env = gym.make("CartPole-v1")
    spaces = env.observation_space, env.action_space
    env.close()
    auto = "native" if CPU_KERNELS("dqn_mlp") is not None else "numpy"
    # auto on the CPU: native where the learner device's backend provides it
    assert DQN(*spaces, learner_kernels=CPU_KERNELS).engine == auto
    with pytest.raises(SpecError, match="engine = 'jax'"):
        DQN(*spaces, engine="jax")
    with pytest.raises(SpecError, match="needs a ReLU MLP on the CPU"):
        DQN(*spaces, engine="native", device="meta")
    # without a native step (no lookup, or one that finds none): auto falls back to numpy,
    # 'native' says how to get one
    for kernels in (None, lambda name: None):
        assert DQN(*spaces, learner_kernels=kernels).engine == "numpy"
        with pytest.raises(KernelUnavailableError, match="pip install ./plugins/pearl_cpu"):
            DQN(*spaces, engine="native", learner_kernels=kernels)
    with pytest.raises(SpecError, match=r"kernel_lookup\('cpu'\)"):
        DQN(*spaces, engine="native")
    with pytest.raises(SpecError, match="learner_kernels = 'cpu'; expected a function"):
        DQN(*spaces, learner_kernels="cpu")
    # the lookup asks by device kind: a kind no backend drives has no kernels
    assert kernel_lookup("npu:0")("dqn_mlp") is None


@pytest.mark.parametrize("engine", ENGINES)
def test_pickled_trainer_owns_its_engine(engine):
    """A trainer sent to a worker (pickled after some updates) updates its own tensors, not
    views of the sender's, and continues exactly as the sender would."""
    a = _pair(engine, hidden_sizes=(16, 16))[1]
    batches = _batches(4)
    for batch, w in batches[:2]:
        a.update_policy(batch, w)
    b = pickle.loads(pickle.dumps(a))
    before = _params(a)
    for batch, w in batches[2:]:
        rb = b.update_policy(batch, w)
    for p0, p1 in zip(before, _params(a)):
        np.testing.assert_array_equal(p0, p1)  # the original is untouched
    for batch, w in batches[2:]:
        ra = a.update_policy(batch, w)
    np.testing.assert_array_equal(ra.td_errors, rb.td_errors)
    for p0, p1 in zip(_params(a), _params(b)):
        np.testing.assert_array_equal(p0, p1)


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_takes_strided_and_cast_batch_arrays(engine):
    """Views with strides (a column of a wider array) and other dtypes give the same step as
    contiguous float32 / int64 input: the trainer makes what the engine needs."""
    a, b = _pair(engine, hidden_sizes=(16, 16))
    rng = np.random.default_rng(5)
    B = 16
    wide = rng.standard_normal((B, 8)).astype(np.float64)
    acts = rng.integers(0, 2, (B, 2)).astype(np.int32)
    cols = rng.standard_normal((B, 3)).astype(np.float32)
    strided = Batch(wide[:, ::2], acts[:, 0], cols[:, 1], wide[:, 1::2], cols[:, 2] > 1.0)
    w = rng.uniform(0.2, 1.0, (B, 2)).astype(np.float32)[:, 1]
    plain = Batch(np.ascontiguousarray(wide[:, ::2], np.float32), acts[:, 0].astype(np.int64),
                  cols[:, 1].copy(), np.ascontiguousarray(wide[:, 1::2], np.float32), cols[:, 2] > 1.0)
    ra, rb = a.update_policy(plain, w.copy()), b.update_policy(strided, w)
    np.testing.assert_allclose(rb.td_errors, ra.td_errors, rtol=2e-4, atol=2e-5)
    for pa, pb in zip(_params(a), _params(b)):
        np.testing.assert_allclose(pb, pa, rtol=1e-4, atol=2e-6)
