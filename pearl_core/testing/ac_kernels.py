"""The conformance suite for a backend's actor-critic learner kernels, ``"td3_mlp"`` (TD3 and DDPG)
and ``"sac_mlp"`` (SAC) (:meth:`pearl_core.backend.Backend.learner_kernel`).

Usage, in a plugin's test module::

    from pearl_core.testing import ActorCriticKernelConformance

    class TestMyKernels(ActorCriticKernelConformance):
        def kernel_factory(self, name):
            return MyBackend().learner_kernel(name)  # None for a kernel the backend lacks: its cases skip

Each case builds two trainers (:class:`~pearl_core.algorithms.TD3`,
:class:`~pearl_core.algorithms.DDPG` or :class:`~pearl_core.algorithms.SAC`): the reference runs
torch (``engine="torch"``), the candidate the kernel (``engine="native"`` with ``learner_kernels``
handing out the factory). The reference first takes :attr:`ActorCriticKernelConformance.warmup`
updates alone (Adam's moments and counters are then not zero, and the targets differ from the
networks). Then, :attr:`ActorCriticKernelConformance.steps` times, the candidate is loaded with the
reference's state (its learner generator included: both draw the same smoothing noise or
reparameterisation ``eps``) and both update on the same batch: TD errors, metrics, every parameter,
target, Adam moment and step counter and ``log_alpha`` must agree within float32 tolerances.
:meth:`~ActorCriticKernelConformance.test_free_run_matches_torch` also runs several updates without
re-loading: one kernel object for :attr:`ActorCriticKernelConformance.free_run_same_kernel` (24, at least 20)
consecutive updates (a kernel that goes wrong from its third step fails here), then the batch size
changing. :meth:`~ActorCriticKernelConformance.test_factory_makes_a_kernel_that_updates_in_place`
checks the ABI of :mod:`pearl_core.kernels`: the factory's product is a
:class:`~pearl_core.kernels.TD3Kernel` / :class:`~pearl_core.kernels.SACKernel`, and ``step`` takes
the argument record and returns the result record, of the right shapes and dtypes.

The cases (:data:`AC_CASES`) cover TD3's delayed actor and Polyak steps, smoothing noise on and off,
DDPG (one critic) with and without a delay, SAC with automatic and fixed ``alpha``, clipping off and
on (small norms, so that it is active), one to three hidden layers, odd batch sizes, one and three
action dimensions, uniform and non-uniform importance weights.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest

from pearl_core.testing.learner_kernels import _check_kernel, _check_result, _run_length

__all__ = ["AC_CASES", "ActorCriticKernelConformance", "ACKernelCase"]

#: float32 tolerances of one synced update: TD errors and metrics; parameters and optimizer state.
TD_TOL = {"rtol": 2e-4, "atol": 2e-5}
PARAM_TOL = {"rtol": 1e-4, "atol": 2e-6}
#: ... and of every value after several updates without re-syncing (float noise compounds).
FREE_RUN_TOL = {"rtol": 1e-3, "atol": 1e-4}


@dataclass(frozen=True)
class ACKernelCase:
    """One option combination: the algorithm, networks, batch and hyper-parameters."""

    id: str
    algo: str  # "td3", "ddpg" or "sac"
    hidden: tuple[int, ...]
    batch: int
    obs_dim: int = 4
    act_dim: int = 2
    uniform_weights: bool = False
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def kernel(self) -> str:
        return "sac_mlp" if self.algo == "sac" else "td3_mlp"

    def trainer_cls(self) -> type:
        from pearl_core.algorithms import DDPG, SAC, TD3

        return {"td3": TD3, "ddpg": DDPG, "sac": SAC}[self.algo]


AC_CASES: tuple[ACKernelCase, ...] = (
    ACKernelCase("td3", "td3", (32, 32), 16),
    ACKernelCase("td3-clipped-3-layers-odd-batch", "td3", (24, 16, 8), 7, act_dim=3, kwargs={"max_grad_norm": 0.05}),
    ACKernelCase("td3-no-smoothing-uniform", "td3", (16,), 12, act_dim=1, uniform_weights=True,
                 kwargs={"target_noise": 0.0, "policy_delay": 1}),
    ACKernelCase("ddpg", "ddpg", (32, 16), 16),
    ACKernelCase("ddpg-clipped-delay2", "ddpg", (24,), 9, act_dim=3, kwargs={"max_grad_norm": 0.05, "policy_delay": 2}),
    ACKernelCase("sac", "sac", (32, 32), 16),
    ACKernelCase("sac-clipped-odd-batch", "sac", (24, 16, 8), 7, act_dim=3, kwargs={"max_grad_norm": 0.05}),
    ACKernelCase("sac-fixed-alpha-uniform", "sac", (16,), 12, act_dim=1, uniform_weights=True,
                 kwargs={"ent_coef": 0.3}),
)


def _spaces(case: ACKernelCase):
    import gymnasium.spaces as spaces

    low = np.linspace(-2.0, -0.5, case.act_dim).astype(np.float32)
    high = np.linspace(1.0, 3.0, case.act_dim).astype(np.float32)
    return spaces.Box(-1.0, 1.0, shape=(case.obs_dim,), dtype=np.float32), spaces.Box(low, high, dtype=np.float32)


def _batch(case: ACKernelCase, rng: np.random.Generator, size: int | None = None):
    from pearl_core.replay.storage import Batch

    B = case.batch if size is None else size
    _, act_space = _spaces(case)
    batch = Batch(rng.standard_normal((B, case.obs_dim)).astype(np.float32),
                  rng.uniform(act_space.low, act_space.high, (B, case.act_dim)).astype(np.float32),
                  rng.standard_normal(B).astype(np.float32), rng.standard_normal((B, case.obs_dim)).astype(np.float32),
                  rng.random(B) < 0.2)
    w = np.ones(B, np.float32) if case.uniform_weights else rng.uniform(0.2, 1.0, B).astype(np.float32)
    return batch, w


def _state(t) -> list[tuple[str, np.ndarray]]:
    """Every module's tensors and every optimizer's state (the step counters included), by name."""
    import torch

    out = []
    for name, v in vars(t).items():
        if isinstance(v, torch.nn.Module):
            out += [(f"{name}.{k}", x.detach().numpy().copy()) for k, x in v.state_dict().items()]
        elif isinstance(v, torch.optim.Optimizer):
            for i, st in v.state_dict()["state"].items():
                out += [(f"{name} state {i} {k}", np.asarray(x.detach().numpy(), np.float64).copy())
                        for k, x in st.items()]
    return sorted(out, key=lambda kv: kv[0])


def _close(got: float, want: float, what: str, tol: dict[str, float]) -> None:
    bound = tol["atol"] + tol["rtol"] * abs(want)
    assert abs(got - want) <= bound, (f"{what} differs from torch's: the kernel gives {got!r}, torch {want!r} "
                                      f"(tolerance {bound:.2g})")


class ActorCriticKernelConformance:
    """Subclass and implement :meth:`kernel_factory` to run the suite on ``"td3_mlp"`` and ``"sac_mlp"`` kernels.

    Attributes:
        warmup: torch-only updates before the comparison.
        steps: compared updates per case.
        seed: seeds the networks, the trainers' streams and the batches.
    """

    warmup: int = 3
    steps: int = 4
    seed: int = 0
    #: Consecutive updates of one kernel object in :meth:`test_free_run_matches_torch` (at least 20), each compared.
    free_run_same_kernel: int = 24

    def kernel_factory(self, name: str) -> Callable[..., Any] | None:
        """The factory under test for ``name`` (``"td3_mlp"`` or ``"sac_mlp"``), or ``None`` to skip its cases."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement kernel_factory(self, name). Fix: return your backend's "
            "learner_kernel(name).")

    def _pair(self, case: ACKernelCase):
        """``(torch reference, kernel candidate, batch rng)`` after the reference's warm-up."""
        import torch

        factory = self.kernel_factory(case.kernel)
        if factory is None:
            pytest.skip(f"{type(self).__name__} offers no {case.kernel!r} kernel")
        assert callable(factory), f"kernel_factory({case.kernel!r}) returned {factory!r}; expected a callable or None"
        obs_space, act_space = _spaces(case)
        cls = case.trainer_cls()
        kw = dict(actor_hidden=case.hidden, critic_hidden=case.hidden, seed=self.seed, **case.kwargs)
        torch.manual_seed(self.seed)
        ref = cls(obs_space, act_space, engine="torch", **kw)
        cand = cls(obs_space, act_space, engine="native", **kw,
                   learner_kernels=lambda name: factory if name == case.kernel else None)
        assert cand.engine == "native", f"{case.id}: the candidate runs engine {cand.engine!r}, not the kernel"
        rng = np.random.default_rng(self.seed)
        for _ in range(self.warmup):
            ref.update_policy(*_batch(case, rng))
        return ref, cand, rng

    @staticmethod
    def _compare(case: ACKernelCase, where: str, ref, cand, ra, rb, free_run: bool = False) -> None:
        td_tol, param_tol = (FREE_RUN_TOL, FREE_RUN_TOL) if free_run else (TD_TOL, PARAM_TOL)
        td_a, td_b = np.asarray(ra.td_errors), np.asarray(rb.td_errors)
        assert td_b.shape == td_a.shape, f"{case.id}, {where}: TD errors have shape {td_b.shape}; expected {td_a.shape}"
        np.testing.assert_allclose(td_b, td_a, **td_tol, err_msg=f"{case.id}, {where}: TD errors differ from torch's")
        assert list(rb.metrics) == list(ra.metrics), f"{case.id}, {where}: metrics {list(rb.metrics)}; expected " \
                                                     f"{list(ra.metrics)}"
        for k in ra.metrics:
            _close(rb.metrics[k], ra.metrics[k], f"{case.id}, {where}: metric {k!r}", td_tol)
        sa, sb = _state(ref), _state(cand)
        assert [n for n, _ in sa] == [n for n, _ in sb], f"{case.id}, {where}: the trainers' state differs in keys"
        for (name, a), (_, b) in zip(sa, sb):
            np.testing.assert_allclose(b, a, **param_tol, err_msg=f"{case.id}, {where}: {name} differs from torch's")
        if hasattr(ref, "_gen"):
            import torch

            assert torch.equal(ref._gen.get_state(), cand._gen.get_state()), (
                f"{case.id}, {where}: the learner's generator moved differently (the trainer draws, not the kernel)")

    @pytest.mark.parametrize("case", AC_CASES, ids=[c.id for c in AC_CASES])
    def test_matches_torch_step_by_step(self, case):
        ref, cand, rng = self._pair(case)
        for i in range(self.steps):
            cand.load_state_dict(copy.deepcopy(ref.state_dict()))
            batch, w = _batch(case, rng)
            ra, rb = ref.update_policy(batch, w), cand.update_policy(batch, w)
            self._compare(case, f"update {i}", ref, cand, ra, rb)

    @pytest.mark.parametrize("algo", ["td3", "ddpg", "sac"])
    def test_free_run_matches_torch(self, algo):
        """Updates without re-loading (the kernel carries every state): one kernel object for
        :attr:`free_run_same_kernel` consecutive updates, then the batch size changing."""
        case = ACKernelCase(f"free-run-{algo}", algo, (32, 16), 16, kwargs={"max_grad_norm": 0.5})
        ref, cand, rng = self._pair(case)
        cand.load_state_dict(copy.deepcopy(ref.state_dict()))
        same = max(20, self.free_run_same_kernel)
        kernels = []
        for i, size in enumerate((case.batch,) * same + (9, 9, case.batch)):
            batch, w = _batch(case, rng, size)
            ra, rb = ref.update_policy(batch, w), cand.update_policy(batch, w)
            kernels.append(cand._engine._kernel)
            self._compare(case, f"free update {i} (batch {size}, the kernel's step {_run_length(kernels)})", ref,
                          cand, ra, rb, free_run=True)
        assert all(k is kernels[0] for k in kernels[:same]), (
            f"the trainer bound a new kernel within the first {same} updates of one batch size; the suite means "
            "to run one kernel object for that many steps")

    @pytest.mark.parametrize("algo", ["td3", "ddpg", "sac"])
    def test_factory_makes_a_kernel_that_updates_in_place(self, algo):
        """The trainer's kernel (built over its tensors) is the name's protocol; one ``step`` with the argument
        record returns the result record, moves every critic parameter and counts every critic Adam step."""
        from pearl_core.algorithms.ac_engine import native_inputs

        case = next(c for c in AC_CASES if c.algo == algo)
        ref, cand, rng = self._pair(case)
        cand.load_state_dict(copy.deepcopy(ref.state_dict()))
        eng, B = cand._engine, case.batch
        kernel = eng.kernel(B)
        _check_kernel(case.kernel, kernel, B)
        batch, w = _batch(case, rng)
        inputs = native_inputs(cand, batch, w)
        draw = rng.standard_normal((B, case.act_dim)).astype(np.float32)
        args = (eng.sac_args(inputs, draw, rng.standard_normal((B, case.act_dim)).astype(np.float32))
                if algo == "sac" else eng.td3_args(inputs, np.clip(0.2 * draw, -0.5, 0.5), True))
        before = dict(_state(cand))
        out = kernel.step(args)
        _check_result(case.kernel, out, B)
        for name, after in _state(cand):
            critic = name.startswith("critic") and not name.split(".")[0].endswith("_target")
            if name.startswith("critic_optimizer") and name.endswith(" step"):
                np.testing.assert_array_equal(after, before[name] + 1, err_msg=f"{name}: one step must count one")
            elif critic and not name.startswith("critic_optimizer"):
                assert not np.array_equal(after, before[name]), f"step() must update {name} in place"
