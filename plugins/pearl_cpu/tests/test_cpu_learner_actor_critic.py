"""The native actor-critic steps (pearl_cpu._learner_ac): TD3 and DDPG ("td3_mlp") and SAC ("sac_mlp").

Each trainer's native engine is checked against its torch engine, update for update, from one synced
state (same init, same seeds): TD errors and metrics after every update, then every parameter, target
parameter, Adam moment and step counter, ``log_alpha`` and the learner's random generator. Tolerance:
``rtol=1e-5, atol=1e-6`` on float32 values (the products go to another BLAS, which sums in another
order, and torch's Adam fuses multiply-adds; measured differences are ~1e-7). Also: bad input raises
ValueError and changes nothing, checkpoints resume across engines, and the trainers' engine choice.
"""

from __future__ import annotations

import copy
import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import torch

from pearl_core.algorithms import DDPG, SAC, TD3
from pearl_core.errors import KernelUnavailableError, SpecError
from pearl_core.plugins import get_backend, kernel_lookup
from pearl_core.replay.storage import Batch
from pearl_core.sdk import ACStepArgs, AdamHyper, SACKernel, TD3Kernel
from pearl_core.testing import ActorCriticKernelConformance
from pearl_cpu._learner_ac import SACMLPKernel, TD3MLPKernel
from pearl_cpu.learner import sac_mlp_kernel, td3_mlp_kernel

OBS = gym.spaces.Box(-5.0, 5.0, (5,), np.float32)
ACT = gym.spaces.Box(np.array([-2.0, -1.0], np.float32), np.array([2.0, 3.0], np.float32))
B = 16
N_UPDATES = 8
TOL = dict(rtol=1e-5, atol=1e-6)


def _make(cls, engine="native", **kw):
    torch.manual_seed(0)
    return cls(OBS, ACT, actor_hidden=(8, 8), critic_hidden=(8, 8), seed=0, engine=engine,
               learner_kernels=kernel_lookup("cpu"), **kw)


def _batch(seed, prioritized=False, n=B):
    r = np.random.default_rng(seed)
    b = Batch(r.standard_normal((n, 5)).astype(np.float32), r.uniform(ACT.low, ACT.high, (n, 2)).astype(np.float32),
              r.standard_normal(n).astype(np.float32), r.standard_normal((n, 5)).astype(np.float32), r.random(n) < 0.25)
    w = r.uniform(0.05, 1.0, n).astype(np.float32) if prioritized else np.ones(n, np.float32)
    return b, w


def _state(t) -> dict[str, np.ndarray]:
    """Copies of every module's tensors and every optimizer's state, by name."""
    out = {}
    for name, v in vars(t).items():
        if isinstance(v, torch.nn.Module):
            out.update({f"{name}.{k}": x.detach().numpy().copy() for k, x in v.state_dict().items()})
        elif isinstance(v, torch.optim.Optimizer):
            for i, st in v.state_dict()["state"].items():
                out.update({f"{name}.{i}.{k}": x.detach().numpy().copy() for k, x in st.items()})
    return out


def _assert_close(a: dict, b: dict, exact=False):
    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
    for k in a:
        if exact:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        else:
            np.testing.assert_allclose(b[k], a[k], **TOL, err_msg=k)


CASES = [
    pytest.param(TD3, {}, id="td3"),  # policy_delay 2: actor and Polyak steps on every second update
    pytest.param(TD3, {"max_grad_norm": 0.05}, id="td3-clipped"),
    pytest.param(TD3, {"target_noise": 0.0, "policy_delay": 3}, id="td3-no-smoothing-delay3"),
    pytest.param(DDPG, {}, id="ddpg"),
    pytest.param(DDPG, {"max_grad_norm": 0.05, "policy_delay": 2}, id="ddpg-clipped-delay2"),
    pytest.param(SAC, {}, id="sac"),
    pytest.param(SAC, {"max_grad_norm": 0.05}, id="sac-clipped"),
    pytest.param(SAC, {"ent_coef": 0.2}, id="sac-fixed-alpha"),
]


def test_backend_provides_the_kernels():
    cpu = get_backend("cpu")
    assert cpu.learner_kernel("td3_mlp") is td3_mlp_kernel
    assert cpu.learner_kernel("sac_mlp") is sac_mlp_kernel
    assert kernel_lookup("cpu")("td3_mlp") is td3_mlp_kernel and kernel_lookup("cpu")("sac_mlp") is sac_mlp_kernel
    assert TD3.learner_kernel_names == DDPG.learner_kernel_names == ("td3_mlp",)
    assert SAC.learner_kernel_names == ("sac_mlp",)


@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "is-weights"])
@pytest.mark.parametrize("cls,kw", CASES)
def test_native_updates_match_torch(cls, kw, prioritized):
    ref, nat = _make(cls, "torch", **kw), _make(cls, "native", **kw)
    assert (ref.engine, nat.engine) == ("torch", "native")
    start = _state(nat)
    _assert_close(_state(ref), start, exact=True)
    for i in range(N_UPDATES):
        b, w = _batch(i, prioritized)
        r, n = ref.update_policy(b, w), nat.update_policy(b, w)
        assert n.td_errors.dtype == np.float32 and n.td_errors.shape == (B,)
        np.testing.assert_allclose(n.td_errors, r.td_errors, **TOL, err_msg=f"update {i}")
        assert list(n.metrics) == list(r.metrics)
        for k in r.metrics:
            assert n.metrics[k] == pytest.approx(r.metrics[k], rel=1e-5, abs=1e-6), (i, k)
    _assert_close(_state(ref), _state(nat))
    assert ref.updates == nat.updates == N_UPDATES
    if hasattr(ref, "_gen"):  # both drew the same numbers from the learner's stream
        assert torch.equal(ref._gen.get_state(), nat._gen.get_state())
    end = _state(nat)
    moved = [k for k in start if k.endswith("weight") and not np.array_equal(start[k], end[k])]
    nets = {k.split(".")[0] for k in moved}
    assert {"actor", "critic1" if cls is not DDPG else "critic"} <= nets
    assert any("target" in n for n in nets)  # the Polyak steps ran


@pytest.mark.parametrize("cls", [TD3, DDPG, SAC])
def test_clipping_changes_the_native_result(cls):
    # With max_grad_norm = 0.05 the clip is active (the match above then covers it); without, it is not.
    clipped, free = _make(cls, max_grad_norm=0.05), _make(cls)
    for i in range(3):
        b, w = _batch(i)
        clipped.update_policy(b, w)
        free.update_policy(b, w)
    a, b = _state(clipped), _state(free)
    assert any(not np.allclose(a[k], b[k], **TOL) for k in a if k.startswith("critic1") or k.startswith("critic."))


@pytest.mark.parametrize("cls,kw", [CASES[0], CASES[3], CASES[5]])
@pytest.mark.parametrize("first,then", [("native", "torch"), ("torch", "native")])
def test_a_checkpoint_resumes_identically_on_either_engine(cls, kw, first, then):
    ref = _make(cls, "torch", **kw)
    for i in range(6):
        ref.update_policy(*_batch(i, True))
    a = _make(cls, first, **kw)
    for i in range(3):
        a.update_policy(*_batch(i, True))
    b = _make(cls, then, **kw)
    b.update_policy(*_batch(99))  # b binds its engine to its own state first; the load must replace it
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    for i in range(3, 6):
        b.update_policy(*_batch(i, True))
    _assert_close(_state(ref), _state(b))
    if hasattr(ref, "_gen"):
        assert torch.equal(ref._gen.get_state(), b._gen.get_state())


@pytest.mark.parametrize("cls,kw", [CASES[0], CASES[5]])
def test_a_deep_copy_trains_on_its_own_tensors(cls, kw):
    t = _make(cls, **kw)
    t.update_policy(*_batch(0))
    twin = copy.deepcopy(t)
    assert twin.engine == "native" and twin._engine.t is twin
    before = _state(t)
    r1 = twin.update_policy(*_batch(1))
    _assert_close(before, _state(t), exact=True)  # the original is untouched
    r2 = t.update_policy(*_batch(1))
    np.testing.assert_array_equal(r1.td_errors, r2.td_errors)


def test_a_swapped_optimizer_takes_the_torch_path():
    t = _make(TD3)
    t.actor_optimizer = torch.optim.SGD(t._actor_params, lr=0.1)
    assert not t._engine.handles()
    res = t.update_policy(*_batch(0))
    assert res.td_errors.shape == (B,)


# -- input checks ------------------------------------------------------------------------------
# The compiled steps check their input (csrc/); these tests call them as compiled, positionally
# (TD3MLPKernel.step, SACMLPKernel.step), under the typed step the factories' kernels add.
def _td3_args(t):
    b, w = _batch(5, True)
    from pearl_core.algorithms.ac_engine import native_inputs

    obs, act, rew, nobs, done, w, _ = native_inputs(t, b, w)
    return dict(obs=obs, actions=act, rewards=rew, next_obs=nobs, done=done, weights=w,
                discount=np.full(B, 0.98, np.float32), noise=np.zeros((B, 2), np.float32), actor_update=True,
                max_grad_norm=0.5, tau=0.005, critic_adam=(1e-3, 0.9, 0.999, 1e-8),
                actor_adam=(1e-3, 0.9, 0.999, 1e-8))


def _sac_args(t):
    args = _td3_args(t)
    del args["noise"], args["actor_update"]
    return dict(args, eps_next=np.zeros((B, 2), np.float32), eps_pi=np.zeros((B, 2), np.float32),
                target_entropy=-2.0, alpha_adam=(1e-3, 0.9, 0.999, 1e-8))


def _t(a):
    return np.asfortranarray(np.ascontiguousarray(a).reshape(a.shape))  # 2-D: not C-contiguous


COMMON_BAD = [
    ("obs", np.zeros((B, 5), np.float64), "obs must be float32; found float64"),
    ("obs", np.zeros((B, 4), np.float32), r"obs has shape \(16, 4\); expected \(16, 5\)"),
    ("obs", _t(np.ones((B, 5), np.float32)), "obs must be C-contiguous"),
    ("actions", np.zeros((B, 1), np.float32), r"actions has shape \(16, 1\); expected \(16, 2\)"),
    ("actions", [[0.0, 0.0]] * B, "actions is not a numpy array"),
    ("next_obs", np.zeros((B - 1, 5), np.float32), r"next_obs has shape \(15, 5\); expected \(16, 5\)"),
    ("rewards", np.zeros(B, np.float64), "rewards must be float32"),
    ("done", np.zeros(B, np.int64), "done must be bool"),
    ("weights", np.ones((B, 1), np.float32), r"weights has shape \(16, 1\); expected \(16,\)"),
    ("discount", np.full(B, 0.98), "discount must be float32"),
    ("discount", np.r_[np.full(B - 1, 0.98), 1.5].astype(np.float32), r"discount\[15\] = 1.5.* outside \[0, 1\]"),
    ("discount", np.r_[np.nan, np.full(B - 1, 0.98)].astype(np.float32), r"discount\[0\] = nan"),
    ("max_grad_norm", -1.0, "max_grad_norm must be a finite number >= 0"),
    ("tau", 0.0, r"tau must be in \(0, 1\]"),
    ("critic_adam", (0.0, 0.9, 0.999, 1e-8), "critic_adam lr must be"),
    ("actor_adam", (1e-3, 1.0, 0.999, 1e-8), "actor_adam betas must be in"),
    ("actor_adam", (1e-3, 0.9), r"actor_adam must be \(lr, beta1, beta2, eps\)"),
]


def _kernel_state(t):
    st = _state(t)
    eng = t._engine
    for i, (opt, _) in enumerate(eng._optimizers()):  # the step counters the kernel holds
        st[f"steps{i}"] = np.array([float(s["step"]) for s in opt.state.values()])
    return st


@pytest.mark.parametrize("field,value,match", COMMON_BAD + [
    ("noise", np.zeros((B, 3), np.float32), r"noise has shape \(16, 3\); expected \(16, 2\)"),
    ("noise", np.zeros((B, 2), np.float64), "noise must be float32"),
])
def test_td3_kernel_bad_input_raises_and_changes_nothing(field, value, match):
    t = _make(TD3, max_grad_norm=0.5)
    t.update_policy(*_batch(0))
    k = t._engine.kernel(B)
    before = _kernel_state(t)
    args = _td3_args(t)
    args[field] = value
    with pytest.raises(ValueError, match=match):
        TD3MLPKernel.step(k, **args)
    _assert_close(before, _kernel_state(t), exact=True)
    good = _td3_args(t)  # and the kernel still works, through its typed step too
    assert isinstance(k, TD3Kernel)
    k.step(ACStepArgs(**dict(good, critic_adam=AdamHyper(*good["critic_adam"]),
                             actor_adam=AdamHyper(*good["actor_adam"]))))
    assert not np.array_equal(before["critic1.0.weight"], _state(t)["critic1.0.weight"])


@pytest.mark.parametrize("field,value,match", COMMON_BAD + [
    ("eps_next", np.zeros((B, 3), np.float32), r"eps_next has shape \(16, 3\); expected \(16, 2\)"),
    ("eps_pi", np.zeros((B, 2), np.float64), "eps_pi must be float32"),
    ("eps_pi", None, "eps_pi is not a numpy array"),
    ("target_entropy", float("nan"), "target_entropy must be finite"),
    ("alpha_adam", None, "alpha_adam is None, but the kernel tunes alpha"),
])
def test_sac_kernel_bad_input_raises_and_changes_nothing(field, value, match):
    t = _make(SAC, max_grad_norm=0.5)
    t.update_policy(*_batch(0))
    k = t._engine.kernel(B)
    before = _kernel_state(t)
    args = _sac_args(t)
    args[field] = value
    assert isinstance(k, SACKernel)
    with pytest.raises(ValueError, match=match):
        SACMLPKernel.step(k, **args)
    _assert_close(before, _kernel_state(t), exact=True)


def test_construction_checks_every_array():
    from pearl_core.algorithms.ac_engine import _adam_arrays, _layers

    t = _make(TD3)
    actor, actor_t = _layers(t.actor), _layers(t.actor_target)
    crit = [_layers(t.critic1), _layers(t.critic2)]
    crit_t = [_layers(t.critic1_target), _layers(t.critic2_target)]
    aa = _adam_arrays(t.actor_optimizer, t._actor_params)[:3]
    ca = _adam_arrays(t.critic_optimizer, t._critic_params)[:3]
    ok = td3_mlp_kernel(actor, actor_t, crit, crit_t, aa, ca, B)
    assert (ok.batch, ok.n_critics, ok.act_dim, ok.in_features) == (B, 2, 2, 5)
    with pytest.raises(ValueError, match="expected 1 or 2 critics; found 3"):
        td3_mlp_kernel(actor, actor_t, crit + crit[:1], crit_t + crit_t[:1], aa, ca, B)
    with pytest.raises(ValueError, match="expected 6 critic Adam moment arrays of each kind; found 12 exp_avg"):
        td3_mlp_kernel(actor, actor_t, crit[:1], crit_t[:1], aa, ca, B)
    with pytest.raises(ValueError, match=r"critic1 takes 6 inputs; expected obs \+ action = 7"):
        from pearl_core.algorithms.common import mlp

        narrow = [_layers(mlp(6, (8, 8), 1)) for _ in range(4)]
        td3_mlp_kernel(actor, actor_t, narrow[:2], narrow[2:], aa, ca, B)
    with pytest.raises(ValueError, match=r"actor layer 2 target weight has shape \(8, 8\); expected \(2, 8\)"):
        bad = list(actor_t)
        bad[2] = (np.zeros((8, 8), np.float32), actor_t[2][1])
        td3_mlp_kernel(actor, bad, crit, crit_t, aa, ca, B)
    with pytest.raises(ValueError, match="must be writeable"):
        ro = actor[0][0].copy()
        ro.flags.writeable = False
        td3_mlp_kernel([(ro, actor[0][1])] + actor[1:], actor_t, crit, crit_t, aa, ca, B)
    with pytest.raises(ValueError, match="batch size must be >= 1"):
        td3_mlp_kernel(actor, actor_t, crit, crit_t, aa, ca, 0)
    s = _make(SAC)
    sa = _adam_arrays(s.actor_optimizer, s._actor_params)[:3]
    sc = _adam_arrays(s.critic_optimizer, s._critic_params)[:3]
    scrit = [_layers(s.critic1), _layers(s.critic2)]
    scrit_t = [_layers(s.critic1_target), _layers(s.critic2_target)]
    la = s.log_alpha.value.detach().numpy().reshape(1)
    k = sac_mlp_kernel(_layers(s.actor), scrit, scrit_t, sa, sc, la, None, B)
    assert (k.act_dim, k.auto_alpha) == (2, False)
    with pytest.raises(ValueError, match=r"log_alpha has shape \(\); expected \(1,\)"):
        sac_mlp_kernel(_layers(s.actor), scrit, scrit_t, sa, sc, s.log_alpha.value.detach().numpy(), None, B)
    with pytest.raises(ValueError, match="expected 2 critics"):
        sac_mlp_kernel(_layers(s.actor), scrit[:1], scrit_t[:1], sa, sc, la, None, B)


# -- engine selection --------------------------------------------------------------------------
@pytest.mark.parametrize("cls,kernel", [(TD3, "td3_mlp"), (DDPG, "td3_mlp"), (SAC, "sac_mlp")])
def test_engine_selection(cls, kernel):
    assert _make(cls, "auto").engine == "native"
    assert _make(cls, "torch").engine == "torch" and _make(cls, "torch")._engine is None
    assert cls(OBS, ACT, actor_hidden=(8,), critic_hidden=(8,)).engine == "torch"  # auto, no kernels given
    with pytest.raises(KernelUnavailableError, match=f"engine='native' needs the native '{kernel}' learner kernel, "
                                                     r"and none was given \(learner_kernels=None\)"):
        cls(OBS, ACT, actor_hidden=(8,), critic_hidden=(8,), engine="native")
    with pytest.raises(KernelUnavailableError, match="has none"):
        cls(OBS, ACT, actor_hidden=(8,), critic_hidden=(8,), engine="native", learner_kernels=lambda name: None)
    for bad in ("numpy", "fast"):
        with pytest.raises(SpecError, match=f"engine = '{bad}'; expected 'auto', 'native' or 'torch'"):
            cls(OBS, ACT, engine=bad)
    with pytest.raises(SpecError, match="learner_kernels = 3; expected a function"):
        cls(OBS, ACT, learner_kernels=3)


def test_native_needs_relu_mlps_on_the_cpu():
    from pearl_core.algorithms.ac_engine import choose_engine

    t = _make(TD3, "torch")
    t.actor[1] = torch.nn.Identity()
    with pytest.raises(SpecError, match="needs ReLU MLPs on the CPU .found an actor that is not a ReLU MLP with a "
                                        "tanh output"):
        choose_engine(t, "TD3", "native", kernel_lookup("cpu"), "td3_mlp", "td3")
    assert choose_engine(t, "TD3", "auto", kernel_lookup("cpu"), "td3_mlp", "td3") == ("torch", None)
    s = _make(SAC, "torch")
    s.critic2[1] = torch.nn.Tanh()
    with pytest.raises(SpecError, match="critics that are not ReLU MLPs"):
        choose_engine(s, "SAC", "native", kernel_lookup("cpu"), "sac_mlp", "sac")


# -- threads -----------------------------------------------------------------------------------
def _make_wide(cls, **kw):
    torch.manual_seed(0)
    return cls(OBS, ACT, actor_hidden=(64, 32), critic_hidden=(64, 32), seed=0, engine="native",
               learner_kernels=kernel_lookup("cpu"), **kw)


@pytest.mark.parametrize("cls,kw", [
    pytest.param(TD3, {"max_grad_norm": 0.05}, id="td3-clipped"),
    pytest.param(TD3, {}, id="td3"),
    pytest.param(DDPG, {"max_grad_norm": 0.05}, id="ddpg-clipped"),
    pytest.param(SAC, {"max_grad_norm": 0.05}, id="sac-clipped"),
    pytest.param(SAC, {"ent_coef": 0.1}, id="sac-fixed-alpha"),
])
def test_two_threads_compute_bitwise_what_one_thread_computes(cls, kw):
    # The helper runs the same products and loops on the same data (csrc/ac_mlp.cpp): every parameter,
    # target, Adam moment, TD error and metric must be identical, not merely close.
    one, two = _make_wide(cls, **kw), _make_wide(cls, **kw)
    one.use_threads(1)
    two.use_threads(2)
    prev = torch.get_num_threads()
    try:
        for i in range(6):
            b, w = _batch(i, True, n=32)
            r1, r2 = one.update_policy(b, w), two.update_policy(b, w)
            np.testing.assert_array_equal(r1.td_errors, r2.td_errors)
            assert r1.metrics == r2.metrics
        assert (one._engine.kernel(32).threads, two._engine.kernel(32).threads) == (1, 2)
        _assert_close(_state(one), _state(two), exact=True)
        assert not np.array_equal(_state(two)["actor.0.weight" if cls is SAC else "actor.0.0.weight"],
                                  _state(_make_wide(cls, **kw))["actor.0.weight" if cls is SAC else "actor.0.0.weight"])
    finally:
        torch.set_num_threads(prev)


def test_threads_follow_torch_then_the_plan_and_yield():
    prev = torch.get_num_threads()
    try:
        t = _make(TD3)
        assert t.threads_yield is True and _make(TD3, "torch").threads_yield is False
        torch.set_num_threads(3)
        t.update_policy(*_batch(0))
        assert t._engine.kernel(B).threads == 2  # the caller's and one helper, however many are asked for
        t.use_threads(1)  # the plan's learner threads
        assert torch.get_num_threads() == 1
        t.update_policy(*_batch(1))
        assert t._engine.kernel(B).threads == 1
        k = t._engine.kernel(B)
        with pytest.raises(ValueError, match="threads = 0"):
            k.threads = 0
        assert k.threads == 1
    finally:
        torch.set_num_threads(prev)


def _step_in_forked_child(t, conn):
    try:
        res = t.update_policy(*_batch(9, n=32))  # the parent's helper thread is not in this process
        conn.send(("ok", float(res.td_errors.sum())))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send(("error", repr(exc)))


def test_a_forked_child_steps_with_a_helper_of_its_own():
    import multiprocessing as mp

    t = _make_wide(SAC)
    t.use_threads(2)
    prev = torch.get_num_threads()
    try:
        t.update_policy(*_batch(0, n=32))  # the parent's helper is running now
        ctx = mp.get_context("fork")
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_step_in_forked_child, args=(t, child))
        p.start()
        p.join(60)
        assert p.exitcode == 0, "the forked child hung or died"
        status, value = parent.recv()
        assert status == "ok", value
        same = copy.deepcopy(t)  # what the child computed, computed here
        assert value == pytest.approx(float(same.update_policy(*_batch(9, n=32)).td_errors.sum()), rel=1e-6)
        t.update_policy(*_batch(1, n=32))  # the parent's helper still works
    finally:
        torch.set_num_threads(prev)


class TestCpuActorCriticConformance(ActorCriticKernelConformance):
    """The kit's suite (what a third-party backend runs) on this backend's kernels."""

    def kernel_factory(self, name):
        return get_backend("cpu").learner_kernel(name)


class _Wrapped:
    """A kernel whose step() passes its argument record through ``edit`` first, from its ``from_step``-th
    step on (a planted bug)."""

    def __init__(self, kern, edit, from_step=1):
        self.kern, self.edit, self.batch, self.from_step, self.steps = kern, edit, kern.batch, from_step, 0

    def step(self, args):
        self.steps += 1
        return self.kern.step(self.edit(args) if self.steps >= self.from_step else args)


def _planted(edit, name, from_step=1):
    real = td3_mlp_kernel if name == "td3_mlp" else sac_mlp_kernel

    class Suite(ActorCriticKernelConformance):
        def kernel_factory(self, asked):
            return (lambda *a: _Wrapped(real(*a), edit, from_step)) if asked == name else None

    return Suite()


def _set(field, f):
    return lambda args: dataclasses.replace(args, **{field: f(getattr(args, field))})


@pytest.mark.parametrize("name,edit,case", [
    ("td3_mlp", _set("discount", lambda d: np.full_like(d, 0.9)), 0),  # a fixed discount instead of the caller's
    ("td3_mlp", _set("weights", np.ones_like), 0),  # the importance weights ignored
    ("td3_mlp", _set("actor_update", lambda due: True), 0),  # an actor (and Polyak) step on every update
    ("sac_mlp", lambda a: dataclasses.replace(a, eps_next=a.eps_pi, eps_pi=a.eps_next), 5),  # the two eps swapped
    ("sac_mlp", _set("target_entropy", lambda te: te + 0.5), 5),  # a wrong target entropy
])
def test_the_suite_catches_planted_bugs(name, edit, case):
    from pearl_core.testing.ac_kernels import AC_CASES

    with pytest.raises(AssertionError, match="differs? from torch's"):
        _planted(edit, name).test_matches_torch_step_by_step(AC_CASES[case])
    _planted(lambda a: a, name).test_matches_torch_step_by_step(AC_CASES[case])  # the control passes


@pytest.mark.parametrize("name,algo,case", [("td3_mlp", "td3", 0), ("td3_mlp", "ddpg", 3), ("sac_mlp", "sac", 5)])
def test_the_suite_catches_a_kernel_that_goes_wrong_from_its_third_step(name, algo, case):
    """The synced comparisons bind a new kernel every update (each runs one step): only the free run, one
    kernel object for five steps, reaches a bug that starts at a kernel's third step."""
    from pearl_core.testing.ac_kernels import AC_CASES

    suite = _planted(_set("discount", lambda d: d * np.float32(0.9)), name, from_step=3)
    suite.test_matches_torch_step_by_step(AC_CASES[case])  # passes: no kernel there reaches its third step
    with pytest.raises(AssertionError, match=r"the kernel's step 3\).*differs? from torch's"):
        suite.test_free_run_matches_torch(algo)
    _planted(lambda a: a, name).test_free_run_matches_torch(algo)  # the control passes


class _TupleResult(_Wrapped):
    """Returns the positional tuple of the old ABI instead of the result record."""

    def step(self, args):
        return dataclasses.astuple(self.kern.step(args))


def test_the_suite_catches_a_step_that_returns_a_tuple():
    class Suite(ActorCriticKernelConformance):
        def kernel_factory(self, asked):
            return (lambda *a: _TupleResult(td3_mlp_kernel(*a), None)) if asked == "td3_mlp" else None

    with pytest.raises(AssertionError, match="returned tuple .*expected a pearl_core.sdk.ACStepResult record"):
        Suite().test_factory_makes_a_kernel_that_updates_in_place("td3")


@pytest.mark.parametrize("cls", [TD3, DDPG, SAC])
def test_native_steps_bootstrap_n_step_samples_as_torch_does(cls):
    """n-step batches (``steps`` k per sample): the native step discounts each sample by gamma ** k as the
    torch path does, update for update."""
    nat, ref = _make(cls, "native"), _make(cls, "torch")
    assert nat.engine == "native" and ref.engine == "torch"
    r = np.random.default_rng(11)
    for i in range(4):
        b, w = _batch(100 + i, prioritized=True)
        b = Batch(b.obs, b.action, b.reward, b.next_obs, b.done, r.integers(1, 4, B).astype(np.int32))
        got, want = nat.update_policy(b, w), ref.update_policy(b, w)
        np.testing.assert_allclose(got.td_errors, want.td_errors, **TOL)
    _assert_close(_state(ref), _state(nat))
    # ... and the discount matters: the same batch as one-step samples trains otherwise
    one = _make(cls, "native")
    b, w = _batch(100, prioritized=True)
    k3 = Batch(b.obs, b.action, b.reward, b.next_obs, b.done, np.full(B, 3, np.int32))
    assert not np.allclose(one.update_policy(b, w).td_errors, _make(cls, "native").update_policy(k3, w).td_errors)


def _keeps_denormals() -> bool:
    """Whether float32 arithmetic on this thread keeps a denormal (no flush-to-zero mode is set)."""
    return bool((np.array([1e-39], np.float32) * np.float32(1.0))[0] != 0.0)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cls", [TD3, SAC])
def test_the_step_flushes_denormals_and_leaves_the_callers_mode_as_it_was(cls, threads):
    # csrc/helper_pool.hpp's FlushDenormals: during a step both threads flush denormals to zero; after
    # it the calling thread computes with denormals again (numpy and torch there are not affected).
    assert _keeps_denormals()
    t = _make(cls)
    prev = torch.get_num_threads()
    try:
        t.use_threads(threads)
        t.update_policy(*_batch(0))  # the kernel and its Adam state exist from here
        lin = next(m for m in t.critic1.modules() if isinstance(m, torch.nn.Linear))
        with torch.no_grad():
            lin.bias[7] = -1e6  # unit 7 of critic 1 never fires: its bias gets a zero gradient
        st = t.critic_optimizer.state[lin.bias]
        st["exp_avg"][7] = 1e-39  # denormal moments: beta * 1e-39 + 0 stays denormal unless flushed
        st["exp_avg_sq"][7] = 1e-39
        t.update_policy(*_batch(1))
        assert t._engine.kernel(B).threads == threads
        assert st["exp_avg"][7].item() == 0.0 and st["exp_avg_sq"][7].item() == 0.0
    finally:
        torch.set_num_threads(prev)
    assert _keeps_denormals()
