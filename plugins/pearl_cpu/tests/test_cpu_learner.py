"""The native DQN step (pearl_cpu._learner): found through the backend and kernel_lookup, checks its
input, and bad input changes nothing. Its math against torch: tests/algorithms/test_mlp_engine.py."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from pearl_core.algorithms import DQN
from pearl_core.plugins import get_backend, kernel_lookup
from pearl_core.sdk import AdamHyper, DQNKernel, DQNStepArgs, DQNStepResult
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


def _args(batch, **hp):
    """The step's record (pearl_core.kernels.DQNStepArgs) of a batch and HP (with ``hp`` changed)."""
    hp = {**HP, **hp}
    adam = AdamHyper(hp.pop("lr"), hp.pop("beta1"), hp.pop("beta2"), hp.pop("eps"))
    return DQNStepArgs(**batch, **hp, adam=adam)


def _step(k, batch, **hp):
    """One step with the record; ``(td, loss, q_mean)`` of the result record."""
    r = k.step(_args(batch, **hp))
    assert isinstance(r, DQNStepResult), r
    return r.td, r.loss, r.q_mean


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
    assert isinstance(k, DQNKernel)  # pearl_core.kernels' protocol: batch and step(DQNStepArgs)
    before = _state(t)
    td, loss, q_mean = _step(k, _batch(), **HP)
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
    _step(k, _batch(), **HP)
    before = _state(t)
    batch = _batch(seed=1)
    batch[field] = value
    with pytest.raises(ValueError, match=match):
        _step(k, batch, **HP)
    for x, y in zip(before, _state(t)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("hp,match", [({"gamma": 1.5}, r"gamma must be in \[0, 1\]"),
                                      ({"huber_delta": 0.0}, "huber_delta must be > 0")])
def test_bad_hyperparameters_raise(hp, match):
    t = _trainer()
    k = _kernel(t)
    before = _state(t)
    with pytest.raises(ValueError, match=match):
        _step(k, _batch(), **hp)
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


def _twin_trainers(hidden, double_dqn):
    env = gym.make("CartPole-v1")
    out = []
    for _ in range(2):
        torch.manual_seed(0)
        out.append(DQN(env.observation_space, env.action_space, hidden_sizes=hidden, engine="native", seed=0,
                       double_dqn=double_dqn, max_grad_norm=0.5, learner_kernels=kernel_lookup("cpu")))
    env.close()
    return out


@pytest.mark.parametrize("hidden,double_dqn", [((16, 8), False), ((64, 64), True), ((256, 256), False)])
def test_two_threads_compute_bitwise_what_one_thread_computes(hidden, double_dqn):
    # The helper thread runs the same products and loops on the same data (csrc/dqn_mlp.cpp), so
    # every parameter, Adam moment, TD error and loss must be identical, not merely close.
    one, two = _twin_trainers(hidden, double_dqn)
    k1, k2 = _kernel(one, 32), _kernel(two, 32)
    k1.threads, k2.threads = 1, 2
    assert (k1.threads, k2.threads) == (1, 2)
    hp = dict(HP, double_dqn=double_dqn, max_grad_norm=0.5)  # clipping active: the norm's order matters too
    for seed in range(6):
        b = _batch(32, seed)
        td1, loss1, q1 = _step(k1, b, **hp)
        td2, loss2, q2 = _step(k2, b, **hp)
        np.testing.assert_array_equal(td1, td2)
        assert (loss1, q1) == (loss2, q2)
    for a, b in zip(_state(one), _state(two)):
        np.testing.assert_array_equal(a, b)
    fresh = next(_twin_trainers(hidden, double_dqn)[0].q_net.parameters()).detach().numpy()
    assert not np.array_equal(_state(one)[0], fresh)  # it trained


def _as_batch(b):
    from pearl_core.replay.storage import Batch

    return Batch(b["obs"], b["actions"], b["rewards"], b["next_obs"], b["done"])


def _keeps_denormals() -> bool:
    """Whether float32 arithmetic on this thread keeps a denormal (no flush-to-zero mode is set)."""
    return bool((np.array([1e-39], np.float32) * np.float32(1.0))[0] != 0.0)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_step_flushes_denormals_and_leaves_the_callers_mode_as_it_was(threads):
    # csrc/helper_pool.hpp's FlushDenormals: during a step both threads flush denormals to zero; after
    # it the calling thread computes with denormals again (numpy and torch there are not affected).
    assert _keeps_denormals()
    t = _trainer()
    k = _kernel(t)
    k.threads = threads
    b0 = list(t.q_net.parameters())[1]  # layer 0's bias, 16 units
    with torch.no_grad():
        b0[15] = -1e6  # unit 15 never fires: its bias gets a zero gradient
    st = t.optimizer.state[b0]
    st["exp_avg"][15] = 1e-39  # denormal moments: beta * 1e-39 + 0 stays denormal unless flushed
    st["exp_avg_sq"][15] = 1e-39
    _step(k, _batch(), **HP)
    assert st["exp_avg"][15].item() == 0.0 and st["exp_avg_sq"][15].item() == 0.0
    assert _keeps_denormals()


def test_threads_follow_torch_and_can_be_set_back():
    t = _trainer()
    prev = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        t.update_policy(_as_batch(_batch(8)), np.ones(8, np.float32))  # the engine sets the kernel's threads
        assert _kernel(t).threads == 2  # the caller's and one helper, however many are asked for
        torch.set_num_threads(1)
        t.update_policy(_as_batch(_batch(8, 1)), np.ones(8, np.float32))
        assert _kernel(t).threads == 1
        k = _kernel(t)
        with pytest.raises(ValueError, match="threads = 0"):
            k.threads = 0
        assert k.threads == 1
    finally:
        torch.set_num_threads(prev)


def _step_in_forked_child(k, conn):
    try:
        td, _, _ = _step(k, _batch(32, 9), **HP)  # the parent's helper thread is not in this process
        del k
        import gc

        gc.collect()  # the kernel goes: its helper must not be joined here (that would hang)
        conn.send(("ok", float(td.sum())))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send(("error", repr(exc)))


def test_a_forked_child_steps_and_exits_with_a_two_thread_kernel():
    import multiprocessing as mp

    one, two = _twin_trainers((64, 64), False)
    k1, k2 = _kernel(one, 32), _kernel(two, 32)
    k1.threads, k2.threads = 1, 2
    _step(k2, _batch(32, 0), **HP)  # the helper thread runs (and now waits) in this process
    _step(k1, _batch(32, 0), **HP)
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_step_in_forked_child, args=(k2, child))
    proc.start()
    assert parent.poll(60), "the forked child hung"
    status, value = parent.recv()
    proc.join(30)
    assert status == "ok", value
    assert proc.exitcode == 0
    td1, _, _ = _step(k1, _batch(32, 9), **HP)
    assert value == float(td1.sum())  # the child's step computed what a one-thread step computes
    _step(k2, _batch(32, 1), **HP)  # and the parent's helper still works
