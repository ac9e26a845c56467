"""The conformance suites for a backend's ``"dqn_mlp"`` and ``"dqn_cnn"`` learner kernels
(:meth:`pearl_core.backend.Backend.learner_kernel`).

Usage, in a plugin's test module::

    from pearl_core.testing import DQNKernelConformance

    class TestMyKernel(DQNKernelConformance):
        def kernel_factory(self):
            return MyBackend().learner_kernel("dqn_mlp")

Each case builds two :class:`~pearl_core.algorithms.DQN` trainers: the reference
runs torch (``engine="torch"``), the candidate runs the kernel (``engine="native"``
with ``learner_kernels`` handing out the factory). The reference first takes
:attr:`DQNKernelConformance.warmup` updates alone, so that Adam's moments and
step counters are not zero, and its target network is perturbed, so that it
differs clearly from the online one (double DQN's argmax then matters). Then,
:attr:`DQNKernelConformance.steps` times, the candidate is loaded with the
reference's state and both update on the same random batch (importance weights
drawn from ``[0.2, 1)`` unless a case says uniform); TD errors, loss, mean q,
the online weights, Adam's moments and step counters must agree within float32
tolerances, and the target network must not change. Loading the state
before every step keeps float noise from compounding (a last-bit difference can
flip a ReLU that sits at zero), and makes the trainer bind a new kernel object each
step; :meth:`~DQNKernelConformance.test_free_run_matches_torch` runs steps without it:
one kernel object for :attr:`DQNKernelConformance.free_run_same_kernel` (24, at least 20) consecutive
updates (a kernel that goes wrong from its third step fails here), then across a
batch-size change. :meth:`~DQNKernelConformance.test_n_step_discounts_match_torch` checks
the per-sample ``discount`` field of the step record (n-step returns).
:meth:`~DQNKernelConformance.test_factory_makes_a_kernel_that_updates_in_place` checks the
ABI of :mod:`pearl_core.kernels`: the factory's product is a :class:`~pearl_core.kernels.DQNKernel`
and ``step`` takes a :class:`~pearl_core.kernels.DQNStepArgs` and returns a
:class:`~pearl_core.kernels.DQNStepResult` of the right shape and dtype
(:func:`~pearl_core.kernels.check_kernel_result`).

The cases (:data:`CASES`) cover double DQN on and off, the Huber loss in its
linear regime (a small ``huber_delta``) and its quadratic one (a ``huber_delta``
above every ``|delta|``: the MSE regime, ``delta^2 / 2``; ``DQN`` requires
``huber_delta > 0``), gradient clipping off (the kernel gets ``max_grad_norm`` 0)
and on (small norms, so that it is active), one to three hidden layers, odd
batch sizes and more than two actions.

:class:`DQNConvKernelConformance` runs the same checks on a ``"dqn_cnn"`` kernel
(:data:`CONV_CASES`: the small image encoder on 0/1 grids and on scaled ``uint8``
frames, square and not, several channel counts, double DQN and clipping).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

from pearl_core.kernels import KERNELS, AdamHyper, DQNStepArgs, check_kernel_result

__all__ = ["CASES", "CONV_CASES", "DQNConvKernelConformance", "DQNKernelConformance", "KernelCase"]

#: float32 tolerances of one synced step: TD errors, loss and mean q; weights and Adam moments.
TD_TOL = {"rtol": 2e-4, "atol": 2e-5}
PARAM_TOL = {"rtol": 1e-4, "atol": 2e-6}
#: ... and of every value after several steps without re-syncing (float noise compounds).
FREE_RUN_TOL = {"rtol": 1e-3, "atol": 1e-4}


@dataclass(frozen=True)
class KernelCase:
    """One option combination: the network, the batch and the DQN hyper-parameters."""

    id: str
    hidden_sizes: tuple[int, ...]
    batch: int
    obs_dim: int = 4
    n_actions: int = 2
    double_dqn: bool = False
    huber_delta: float = 1.0
    max_grad_norm: float | None = None  # None: no clipping (the kernel is passed 0)
    gamma: float = 0.97
    lr: float = 3e-3
    uniform_weights: bool = False
    image: tuple[int, int, int] | None = None  # (C, H, W) uint8 observations (the "dqn_cnn" cases)
    image_high: int = 1                        # their largest value (> 1: the trainer scales by 1/high)

    def dqn_kwargs(self) -> dict[str, Any]:
        return {"hidden_sizes": self.hidden_sizes, "double_dqn": self.double_dqn, "huber_delta": self.huber_delta,
                "max_grad_norm": self.max_grad_norm, "gamma": self.gamma, "lr": self.lr,
                "target_update_every": 10**9}  # the target network stays where the warm-up left it


CASES: tuple[KernelCase, ...] = (
    KernelCase("huber-clipped", (32, 32), 32, max_grad_norm=0.05),
    KernelCase("double-dqn", (16, 8), 16, obs_dim=6, n_actions=3, double_dqn=True,
               max_grad_norm=10.0),  # clipping configured, never reached (coefficient >= 1)
    KernelCase("huber-linear-regime", (24,), 20, huber_delta=0.05),
    KernelCase("mse-regime-double", (24, 24), 12, huber_delta=1e3, double_dqn=True, max_grad_norm=0.1),
    KernelCase("three-layers-odd-batch", (24, 16, 8), 7, n_actions=4, max_grad_norm=0.02),
    KernelCase("one-layer-uniform-weights", (64,), 64, double_dqn=True, uniform_weights=True),
)


#: The ``"dqn_cnn"`` cases: the small encoder (16 3x3 filters, stride 1) and its fully connected head.
CONV_CASES: tuple[KernelCase, ...] = (
    KernelCase("minatar-grid", (32,), 32, n_actions=3, image=(4, 10, 10), max_grad_norm=0.05),
    KernelCase("frames-scaled-double", (24, 16), 9, n_actions=4, image=(2, 12, 9), image_high=255, double_dqn=True),
    KernelCase("one-channel-mse", (16,), 16, image=(1, 5, 7), huber_delta=1e3, max_grad_norm=0.1),
)


def _spaces(case: KernelCase):
    import gymnasium.spaces as spaces

    if case.image is not None:
        return spaces.Box(0, case.image_high, case.image, np.uint8), spaces.Discrete(case.n_actions)
    return (spaces.Box(-1.0, 1.0, shape=(case.obs_dim,), dtype=np.float32), spaces.Discrete(case.n_actions))


def _batch(case: KernelCase, rng: np.random.Generator, size: int | None = None):
    from pearl_core.replay.storage import Batch

    B = case.batch if size is None else size
    if case.image is not None:
        obs = rng.integers(0, case.image_high + 1, (B, *case.image), dtype=np.uint8)
        nxt = rng.integers(0, case.image_high + 1, (B, *case.image), dtype=np.uint8)
    else:
        obs = rng.standard_normal((B, case.obs_dim)).astype(np.float32)
        nxt = rng.standard_normal((B, case.obs_dim)).astype(np.float32)
    batch = Batch(obs, rng.integers(0, case.n_actions, B), rng.standard_normal(B).astype(np.float32), nxt,
                  rng.random(B) < 0.2)
    w = np.ones(B, np.float32) if case.uniform_weights else rng.uniform(0.2, 1.0, B).astype(np.float32)
    return batch, w


def _online(t) -> list[tuple[str, np.ndarray]]:
    return [(n, p.detach().numpy().copy()) for n, p in t.q_net.named_parameters()]


def _target(t) -> list[np.ndarray]:
    return [p.detach().numpy().copy() for p in t.target_net.parameters()]


def _adam(t) -> list[tuple[str, np.ndarray]]:
    names = [n for n, _ in t.q_net.named_parameters()]
    out = []
    for name, p in zip(names, t._params):
        st = t.optimizer.state[p]
        out += [(f"{name} exp_avg", st["exp_avg"].numpy().copy()),
                (f"{name} exp_avg_sq", st["exp_avg_sq"].numpy().copy()),
                (f"{name} step", np.array([float(st["step"])]))]
    return out


def _check_result(name: str, out: Any, batch: int) -> None:
    """The step's result is the name's result record, of the right shape and dtype (an assertion failure if not)."""
    try:
        check_kernel_result(name, out, batch)
    except (TypeError, ValueError) as exc:
        raise AssertionError(f"{exc} (pearl_core.kernels states the ABI)") from None


def _check_kernel(name: str, kernel: Any, batch: int) -> None:
    want = KERNELS[name].kernel
    assert isinstance(kernel, want), (
        f"the {name!r} factory made {type(kernel).__name__}, which is not a pearl_core.sdk.{want.__name__} (it "
        "needs a batch attribute and step(args))")
    assert getattr(kernel, "batch", None) == batch, (
        f"the kernel's .batch is {getattr(kernel, 'batch', None)!r}; expected {batch} (the trainer "
        "rebuilds the kernel when the batch size changes, and reads it there)")


def _close(got: float, want: float, what: str, tol: dict[str, float]) -> None:
    bound = tol["atol"] + tol["rtol"] * abs(want)
    assert abs(got - want) <= bound, (f"{what} differs from torch's: the kernel gives {got!r}, torch {want!r} "
                                      f"(tolerance {bound:.2g})")


class DQNKernelConformance:
    """Subclass and implement :meth:`kernel_factory` to run the whole suite on a ``"dqn_mlp"`` kernel.

    Attributes:
        warmup: torch-only updates before the comparison (Adam's moments and step counters set).
        target_noise: standard deviation of the noise then added to the target network's weights.
        steps: compared updates per case.
        seed: seeds the networks and the batches.
    """

    warmup: int = 2
    steps: int = 4
    #: Consecutive updates of one kernel object in :meth:`test_free_run_matches_torch` (at least 20), each compared.
    free_run_same_kernel: int = 24
    seed: int = 0
    target_noise: float = 0.3
    #: The kernel's name (what the trainer asks ``learner_kernels`` for).
    kernel_name: str = "dqn_mlp"

    def kernel_factory(self) -> Callable[..., Any]:
        """The ``"dqn_mlp"`` factory under test (what ``Backend.learner_kernel("dqn_mlp")`` returns)."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement kernel_factory(self). Fix: return your backend's "
            "learner_kernel('dqn_mlp').")

    # -- helpers ------------------------------------------------------------------
    def _factory(self) -> Callable[..., Any]:
        factory = self.kernel_factory()
        assert factory is not None and callable(factory), (
            f"{type(self).__name__}.kernel_factory() returned {factory!r}; expected the 'dqn_mlp' factory "
            "(a callable). Fix: return backend.learner_kernel('dqn_mlp'), or skip the suite where it is None.")
        return factory

    def _pair(self, case: KernelCase):
        """``(torch reference, kernel candidate, batch rng)``, the candidate not yet synced."""
        import torch

        from pearl_core.algorithms import DQN

        factory = self._factory()
        obs_space, act_space = _spaces(case)
        torch.manual_seed(self.seed)
        ref = DQN(obs_space, act_space, engine="torch", seed=self.seed, **case.dqn_kwargs())
        cand = DQN(obs_space, act_space, engine="native", seed=self.seed, **case.dqn_kwargs(),
                   learner_kernels=lambda name: factory if name == self.kernel_name else None)
        assert cand.engine == "native", f"{case.id}: the candidate DQN runs engine {cand.engine!r}, not the kernel"
        rng = np.random.default_rng(self.seed)
        for _ in range(self.warmup):
            ref.update_policy(*_batch(case, rng))
        with torch.no_grad():  # a target clearly unlike the online network: double DQN's argmax then matters
            for p in ref.target_net.parameters():
                p.add_(torch.randn_like(p), alpha=self.target_noise)
        return ref, cand, rng

    @staticmethod
    def _compare(case: KernelCase, where: str, ref, cand, ra, rb, target_before, free_run: bool = False) -> None:
        """The candidate's result and state against the reference's (tolerances: see the module constants)."""
        td_tol, param_tol = (FREE_RUN_TOL, FREE_RUN_TOL) if free_run else (TD_TOL, PARAM_TOL)
        td_a, td_b = np.asarray(ra.td_errors), np.asarray(rb.td_errors)
        assert td_b.shape == td_a.shape, f"{case.id}, {where}: |delta| has shape {td_b.shape}; expected {td_a.shape}"
        np.testing.assert_allclose(td_b, td_a, **td_tol, err_msg=f"{case.id}, {where}: TD errors |delta| differ "
                                                                 "from torch's")
        _close(rb.metrics["loss"], ra.metrics["loss"], f"{case.id}, {where}: loss", td_tol)
        _close(rb.metrics["q_mean"], ra.metrics["q_mean"], f"{case.id}, {where}: mean q", td_tol)
        for (name, pa), (_, pb) in zip(_online(ref) + _adam(ref), _online(cand) + _adam(cand)):
            np.testing.assert_allclose(pb, pa, **param_tol, err_msg=f"{case.id}, {where}: {name} differs from torch's")
        for i, (before, after) in enumerate(zip(target_before, _target(cand))):
            np.testing.assert_array_equal(after, before, err_msg=f"{case.id}, {where}: the kernel wrote target "
                                                                 f"parameter {i}; it must only read the target network")

    # -- the contract of the factory itself ---------------------------------------------
    def test_factory_makes_a_kernel_that_updates_in_place(self):
        case = CASES[0]
        ref, cand, rng = self._pair(case)
        cand.load_state_dict(copy.deepcopy(ref.state_dict()))
        online = [(m.weight.detach().numpy(), m.bias.detach().numpy()) for m in cand.q_net if hasattr(m, "weight")]
        target = [(m.weight.detach().numpy(), m.bias.detach().numpy()) for m in cand.target_net if hasattr(m, "weight")]
        states = [cand.optimizer.state[p] for p in cand._params]
        m = [s["exp_avg"].numpy() for s in states]
        v = [s["exp_avg_sq"].numpy() for s in states]
        steps = np.array([float(s["step"]) for s in states], np.float32)
        kernel = self._factory()(online, target, m, v, steps, case.batch)
        _check_kernel(self.kernel_name, kernel, case.batch)
        before = ([a.copy() for pair in online for a in pair], [a.copy() for pair in target for a in pair],
                  [a.copy() for a in m + v], steps.copy())
        batch, w = _batch(case, rng)
        out = kernel.step(DQNStepArgs(batch.obs, batch.action.astype(np.int64), batch.reward, batch.next_obs,
                                      batch.done, w, case.gamma, case.huber_delta, 0.0, False,
                                      AdamHyper(case.lr, 0.9, 0.999, 1e-8)))
        _check_result(self.kernel_name, out, case.batch)
        after = [a for pair in online for a in pair]
        assert all(not np.array_equal(x, y) for x, y in zip(before[0], after)), \
            "step() must update every online parameter in place (the arrays it was given)"
        for x, y in zip(before[1], [a for pair in target for a in pair]):
            np.testing.assert_array_equal(y, x, err_msg="step() wrote the target network; it must only read it")
        assert all(not np.array_equal(x, y) for x, y in zip(before[2], m + v)), \
            "step() must update Adam's moments in place"
        np.testing.assert_array_equal(steps, before[3] + 1, err_msg="step() must add 1 to every Adam step counter")

    # -- against torch --------------------------------------------------------------------
    @pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
    def test_matches_torch_step_by_step(self, case):
        ref, cand, rng = self._pair(case)
        for i in range(self.steps):
            cand.load_state_dict(copy.deepcopy(ref.state_dict()))
            target_before = _target(cand)
            batch, w = _batch(case, rng)
            ra, rb = ref.update_policy(batch, w), cand.update_policy(batch, w)
            self._compare(case, f"step {i}", ref, cand, ra, rb, target_before)

    @pytest.mark.parametrize("case", CASES[:2], ids=[c.id for c in CASES[:2]])
    def test_n_step_discounts_match_torch(self, case):
        """n-step batches (``steps`` in 1..4): the kernel gets ``discount = gamma ** steps`` (float32, the
        ``discount`` field of :class:`~pearl_core.kernels.DQNStepArgs`) and must use it in place of ``gamma``."""
        from pearl_core.replay.storage import Batch

        ref, cand, rng = self._pair(case)
        for i in range(self.steps):
            cand.load_state_dict(copy.deepcopy(ref.state_dict()))
            target_before = _target(cand)
            one, w = _batch(case, rng)
            batch = Batch(one.obs, one.action, one.reward, one.next_obs, one.done,
                          rng.integers(1, 5, len(one)).astype(np.int32))
            ra, rb = ref.update_policy(batch, w), cand.update_policy(batch, w)
            self._compare(case, f"n-step step {i}", ref, cand, ra, rb, target_before)

    #: The case of :meth:`test_free_run_matches_torch`.
    free_run_case = KernelCase("free-run", (32, 16), 16, double_dqn=True, max_grad_norm=0.05, lr=1e-2)

    def test_free_run_matches_torch(self):
        """Steps without re-loading (the kernel carries the Adam state and counters): one kernel object for
        :attr:`free_run_same_kernel` consecutive updates, then the batch size changing (a new kernel each time)."""
        case = self.free_run_case
        ref, cand, rng = self._pair(case)
        cand.load_state_dict(copy.deepcopy(ref.state_dict()))
        target_before = _target(cand)
        same = max(20, self.free_run_same_kernel)
        kernels = []
        for i, size in enumerate((case.batch,) * same + (9, 9, case.batch)):
            batch, w = _batch(case, rng, size)
            ra, rb = ref.update_policy(batch, w), cand.update_policy(batch, w)
            kernels.append(cand._engine._kernel[1])
            self._compare(case, f"free step {i} (batch {size}, the kernel's step {_run_length(kernels)})", ref, cand,
                          ra, rb, target_before, free_run=True)
        assert all(k is kernels[0] for k in kernels[:same]), (
            f"the trainer bound a new kernel within the first {same} updates of one batch size; the suite means "
            "to run one kernel object for that many steps")
        _check_kernel(self.kernel_name, kernels[-1], case.batch)


class DQNConvKernelConformance(DQNKernelConformance):
    """Subclass and implement :meth:`kernel_factory` to run the suite on a ``"dqn_cnn"`` kernel: the
    torch comparisons of :class:`DQNKernelConformance` on :data:`CONV_CASES` (the trainer flattens and
    scales the images; the kernel's layer 0 is the convolution, seen 2-D)."""

    kernel_name = "dqn_cnn"

    def kernel_factory(self) -> Callable[..., Any]:
        """The ``"dqn_cnn"`` factory under test (what ``Backend.learner_kernel("dqn_cnn")`` returns)."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement kernel_factory(self). Fix: return your backend's "
            "learner_kernel('dqn_cnn').")

    def test_factory_makes_a_kernel_that_updates_in_place(self):
        """The trainer builds the kernel over its own arrays (a :class:`~pearl_core.kernels.ConvShape` first);
        one step (flattened, scaled images) returns a :class:`~pearl_core.kernels.DQNStepResult`, moves every
        online parameter and Adam moment, counts every Adam step and leaves the target network alone."""
        case = CONV_CASES[0]
        ref, cand, rng = self._pair(case)
        cand.load_state_dict(copy.deepcopy(ref.state_dict()))
        online, target, adam = _online(cand), _target(cand), _adam(cand)
        kernel = cand._engine._native_kernel(case.batch)
        _check_kernel(self.kernel_name, kernel, case.batch)
        batch, w = _batch(case, rng)
        scale = np.float32(1.0 / case.image_high)
        flat = [np.ascontiguousarray(x.reshape(case.batch, -1), np.float32) * scale
                for x in (batch.obs, batch.next_obs)]
        out = kernel.step(DQNStepArgs(flat[0], batch.action.astype(np.int64), batch.reward, flat[1], batch.done, w,
                                      case.gamma, case.huber_delta, 0.0, case.double_dqn,
                                      AdamHyper(case.lr, 0.9, 0.999, 1e-8)))
        _check_result(self.kernel_name, out, case.batch)
        for (name, before), (_, after) in zip(online + adam, _online(cand) + _adam(cand)):
            if name.endswith(" step"):
                np.testing.assert_array_equal(after, before + 1, err_msg=f"{name}: one step must count one")
            else:
                assert not np.array_equal(after, before), f"step() must update {name} in place"
        for before, after in zip(target, _target(cand)):
            np.testing.assert_array_equal(after, before, err_msg="step() wrote the target network")

    @pytest.mark.parametrize("case", CONV_CASES, ids=[c.id for c in CONV_CASES])
    def test_matches_torch_step_by_step(self, case):
        super().test_matches_torch_step_by_step(case)

    @pytest.mark.parametrize("case", CONV_CASES[:2], ids=[c.id for c in CONV_CASES[:2]])
    def test_n_step_discounts_match_torch(self, case):
        super().test_n_step_discounts_match_torch(case)

    free_run_case = KernelCase("free-run-conv", (32,), 16, n_actions=3, image=(3, 8, 8), double_dqn=True,
                               max_grad_norm=0.05, lr=1e-2)


def _run_length(kernels: list) -> int:
    """How many of the last updates ran the last kernel object (1 for a kernel's first step)."""
    n = 0
    for k in reversed(kernels):
        if k is not kernels[-1]:
            break
        n += 1
    return n
