"""Native learner steps for the actor-critics (TD3, DDPG, SAC): binding a backend's kernel to a trainer.

A backend's ``learner_kernel("td3_mlp")`` (TD3 with twin critics, DDPG with one) or
``learner_kernel("sac_mlp")`` runs one ``update_policy`` of the trainer as one call; the
CPU plugin (pearl-cpu, ``csrc/ac_mlp.cpp``) provides both. The trainer hands the factory
it was given (``TD3(learner_kernels=...)``) to :class:`ActorCriticEngine`; this module
never looks for a backend itself. Each update it builds one argument record
(:class:`~pearl_core.kernels.ACStepArgs`, :class:`~pearl_core.kernels.SACStepArgs`) and the
kernel returns one result record (:class:`~pearl_core.kernels.ACStepResult`,
:class:`~pearl_core.kernels.SACStepResult`): :mod:`pearl_core.kernels` is the ABI.

What the kernel computes is the trainer's torch path, step for step (the trainers'
``update_policy`` is the specification; ``plugins/pearl_cpu/tests/test_cpu_learner_actor_critic.py``
checks the kernels against it). What stays in Python:

* the random draws: TD3's smoothing noise and SAC's reparameterisation ``eps`` come from the
  trainer's torch generator ``_gen``, in the order and shapes of the torch path, and go to the
  kernel as float32 arrays, so both paths consume one random stream and a checkpoint resumes
  the same whichever engine ran;
* the schedule: the update counter and whether an actor (and Polyak) step is due;
* the discount, passed per sample: ``gamma ** k`` for a transition spanning ``k`` environment
  steps (n-step returns, ``Batch.steps``), ``gamma`` for every one-step sample.

The parameters, targets and Adam state the kernel writes are the torch tensors' storage
viewed as numpy (the Adam state in each optimizer's own state, created in torch's layout
when absent, as :class:`~pearl_core.algorithms.mlp_engine.MLPDQNEngine` does), so
``state_dict()``, checkpoints, ``get_weights()`` and the torch path all see one state: the
engine can switch mid-run. A trainer whose optimizers are not plain Adam (a user swapped
one) takes the torch path.

Threads: a kernel with a ``threads`` attribute (the CPU plugin's: the caller's thread and one
help-first helper) gets the learner's threads (:meth:`NativeEngineThreads.use_threads`, else
torch's intra-op count), and BLAS runs one thread in each of its threads.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from pearl_core.algorithms.common import host_array, host_discounts
from pearl_core.errors import KernelUnavailableError, SpecError
from pearl_core.kernels import ACStepArgs, ACStepResult, AdamHyper, SACStepArgs, SACStepResult

__all__ = ["ENGINES", "ActorCriticEngine", "NativeEngineThreads", "choose_engine", "native_inputs"]

ENGINES = ("auto", "native", "torch")


def _adam_arrays(optimizer: torch.optim.Optimizer,
                 params: list[torch.Tensor]) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray, object]:
    """``(exp_avgs, exp_avg_sqs, steps, key)`` of ``optimizer``'s state as numpy views (0-dim state as
    shape ``(1,)``), created in torch's layout if absent. The step counters become 0-dim views of one
    float32 array (``steps``); ``key`` identifies the state (a ``load_state_dict`` replaces it)."""
    for p in params:
        st = optimizer.state[p]
        if not st:
            st["step"] = torch.zeros((), dtype=torch.float32)
            st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
    states = [optimizer.state[p] for p in params]
    base = torch.tensor([float(st["step"]) for st in states], dtype=torch.float32)
    for i, st in enumerate(states):
        st["step"] = base[i]

    def view(t: torch.Tensor) -> np.ndarray:
        a = t.detach().numpy()
        return a.reshape(1) if a.ndim == 0 else a

    return ([view(st["exp_avg"]) for st in states], [view(st["exp_avg_sq"]) for st in states], base.numpy(),
            states[0]["exp_avg"])


def _state_key(optimizer: torch.optim.Optimizer, params: list[torch.Tensor]) -> object:
    st = optimizer.state.get(params[0])
    return st.get("exp_avg") if st else None


def _is_relu_mlp(net: nn.Module) -> bool:
    from pearl_core.algorithms.mlp_engine import supports

    return supports(net, torch.device("cpu"))


def _tanh_actor(net: nn.Module) -> bool:
    """``Sequential(ReLU MLP, Tanh)``, the deterministic actors of TD3 and DDPG."""
    return (isinstance(net, nn.Sequential) and len(net) == 2 and _is_relu_mlp(net[0])
            and type(net[1]) is nn.Tanh)


def _layers(net: nn.Module) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(m.weight.detach().numpy(), m.bias.detach().numpy()) for m in net.modules() if isinstance(m, nn.Linear)]


class ActorCriticEngine:
    """Runs TD3's, DDPG's or SAC's ``update_policy`` in a native kernel, over the trainer's tensors.

    Args:
        trainer: the TD3, DDPG or SAC whose networks and optimizers the kernel updates in place.
        factory: the ``"td3_mlp"`` (``kind`` ``"td3"`` or ``"ddpg"``) or ``"sac_mlp"`` (``kind``
            ``"sac"``) kernel factory (``Backend.learner_kernel`` gives it; its protocol is
            :class:`~pearl_core.kernels.TD3KernelFactory` / :class:`~pearl_core.kernels.SACKernelFactory`).
        kind: ``"td3"``, ``"ddpg"`` or ``"sac"``.
    """

    native = True

    def __init__(self, trainer: Any, factory: Any, kind: str):
        self.t = trainer
        self.factory = factory
        self.kind = kind
        self._kernel: Any = None
        self._key: tuple = ()
        self._discount: np.ndarray | None = None
        self._kernel_threads: int | None = None  # what the kernel's ``threads`` was last set to
        #: The learner's threads as the runtime gives them (``use_threads``); ``None``: torch's count.
        self.threads: int | None = None

    def __deepcopy__(self, memo: dict) -> "ActorCriticEngine":
        import copy

        return ActorCriticEngine(copy.deepcopy(self.t, memo), self.factory, self.kind)

    def __getstate__(self) -> dict:
        # The kernel holds pointers into this process's tensors: an unpickled engine binds anew.
        return {"t": self.t, "factory": self.factory, "kind": self.kind}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["t"], state["factory"], state["kind"])

    # -- what the kernel updates --------------------------------------------------------------
    def _optimizers(self) -> list[tuple[torch.optim.Optimizer, list[torch.Tensor]]]:
        t = self.t
        out = [(t.actor_optimizer, list(t._actor_params)), (t.critic_optimizer, list(t._critic_params))]
        if self.kind == "sac" and t.alpha_optimizer is not None:
            out.append((t.alpha_optimizer, [t.log_alpha.value]))
        return out

    def handles(self) -> bool:
        """Every optimizer is plain Adam (what the kernel implements); else the torch path runs."""
        from pearl_core.algorithms.mlp_engine import MLPDQNEngine

        return all(MLPDQNEngine.handles(opt) for opt, _ in self._optimizers())

    def _critics(self) -> tuple[list[nn.Module], list[nn.Module]]:
        t = self.t
        if self.kind == "ddpg":
            return [t.critic], [t.critic_target]
        return [t.critic1, t.critic2], [t.critic1_target, t.critic2_target]

    def kernel(self, B: int) -> Any:
        """The kernel bound to the current tensors and optimizer states (rebound when a state is
        replaced, e.g. by ``load_state_dict``, or the batch size changes)."""
        opts = self._optimizers()
        key = tuple(_state_key(opt, ps) for opt, ps in opts)
        k = self._kernel
        if k is not None and k.batch == B and all(a is not None and a is b for a, b in zip(key, self._key)) \
                and len(key) == len(self._key):
            return self._set_threads(k)
        adams = [_adam_arrays(opt, ps) for opt, ps in opts]
        self._key = tuple(a[3] for a in adams)
        t = self.t
        critics, targets = self._critics()
        c_layers, ct_layers = [_layers(c) for c in critics], [_layers(c) for c in targets]
        actor_adam, critic_adam = adams[0][:3], adams[1][:3]
        if self.kind == "sac":
            alpha_adam = None
            if len(adams) == 3:
                m, v, steps, _ = adams[2]
                alpha_adam = (m[0], v[0], steps)
            log_alpha = t.log_alpha.value.detach().numpy().reshape(1)
            self._kernel = self.factory(_layers(t.actor), c_layers, ct_layers, actor_adam, critic_adam, log_alpha,
                                        alpha_adam, B)
        else:
            self._kernel = self.factory(_layers(t.actor), _layers(t.actor_target), c_layers, ct_layers, actor_adam,
                                        critic_adam, B)
        self._kernel_threads = None  # a new kernel: its threads are set now
        return self._set_threads(self._kernel)

    def learner_threads(self) -> int:
        """The learner's threads: :attr:`threads` where the runtime set it, else torch's intra-op count."""
        return max(1, int(self.threads or torch.get_num_threads()))

    def _set_threads(self, k: Any) -> Any:
        if hasattr(k, "threads"):
            n = self.learner_threads()
            if self._kernel_threads != n:
                k.threads = self._kernel_threads = n
        return k

    def discount(self, B: int, given: np.ndarray | None = None) -> np.ndarray:
        """The per-sample discount, ``(B,)`` float32: ``given`` (n-step samples' ``gamma ** k``), or
        ``gamma`` for every sample (kept between updates)."""
        if given is not None:
            return given
        d = self._discount
        if d is None or d.shape[0] != B or d[0] != np.float32(self.t.gamma):
            d = self._discount = np.full(B, self.t.gamma, np.float32)
        return d

    def _blas(self) -> None:
        from pearl_core.algorithms.mlp_engine import _blas_threads

        # a kernel that runs its own threads calls BLAS single-threaded from each of them
        _blas_threads(1 if hasattr(self._kernel, "threads") else self.learner_threads())

    # -- one update ----------------------------------------------------------------------------
    def td3_args(self, inputs: tuple, noise: np.ndarray | None, actor_update: bool) -> ACStepArgs:
        """The kernel's arguments of one TD3/DDPG update (``inputs``: :func:`native_inputs`'s)."""
        obs, act, rew, next_obs, done, w, disc = inputs
        t = self.t
        return ACStepArgs(obs, act, rew, next_obs, done, w, self.discount(obs.shape[0], disc), noise,
                          bool(actor_update), float(t.max_grad_norm or 0.0), float(t.tau),
                          AdamHyper.from_optimizer(t.critic_optimizer), AdamHyper.from_optimizer(t.actor_optimizer))

    def td3_step(self, inputs: tuple, noise: np.ndarray | None, actor_update: bool) -> ACStepResult:
        """One TD3/DDPG update in the kernel (its ``actor_loss`` is nan when no actor step was due)."""
        k = self.kernel(inputs[0].shape[0])
        self._blas()
        return k.step(self.td3_args(inputs, noise, actor_update))

    def sac_args(self, inputs: tuple, eps_next: np.ndarray, eps_pi: np.ndarray) -> SACStepArgs:
        """The kernel's arguments of one SAC update (``inputs``: :func:`native_inputs`'s)."""
        obs, act, rew, next_obs, done, w, disc = inputs
        t = self.t
        alpha = AdamHyper.from_optimizer(t.alpha_optimizer) if t.alpha_optimizer is not None else None
        return SACStepArgs(obs, act, rew, next_obs, done, w, self.discount(obs.shape[0], disc), eps_next, eps_pi,
                           float(t.max_grad_norm or 0.0), float(t.tau), float(t.target_entropy),
                           AdamHyper.from_optimizer(t.critic_optimizer), AdamHyper.from_optimizer(t.actor_optimizer),
                           alpha)

    def sac_step(self, inputs: tuple, eps_next: np.ndarray, eps_pi: np.ndarray) -> SACStepResult:
        """One SAC update in the kernel (its ``alpha_loss`` is nan for a fixed alpha)."""
        k = self.kernel(inputs[0].shape[0])
        self._blas()
        return k.step(self.sac_args(inputs, eps_next, eps_pi))


class NativeEngineThreads:
    """What TD3, DDPG and SAC share about threads with a native step (as DQN's native step does)."""

    _engine: ActorCriticEngine | None

    @property
    def threads_yield(self) -> bool:
        """With the native step: its helper thread is help-first (``pearl_cpu``'s ``csrc/helper_pool.hpp``)."""
        return self._engine is not None

    def use_threads(self, n: int) -> None:
        """The plan's learner threads. With the native step they are its own (the CPU backend's runs
        a help-first helper next to the caller) and torch's pool stays at one thread, so no OpenMP
        thread spins against the actors between updates; otherwise torch's intra-op threads."""
        eng = self._engine
        if eng is not None and eng.handles():
            eng.threads = int(n)
            torch.set_num_threads(1)
        else:
            super().use_threads(n)  # type: ignore[misc]


def native_inputs(trainer: Any, batch, weights) -> tuple[np.ndarray, ...]:
    """``obs, act, rew, next_obs, done, w, discount`` as the kernels take them: contiguous float32
    (``done``: bool), observations flattened, actions normalised to ``[-1, 1]`` as
    ``BoxActions.normalise`` does; ``discount`` the per-sample ``gamma ** k`` of an n-step batch, or
    ``None`` when every sample is one step (the engine passes ``gamma`` for each). A device batch's
    fields are CPU tensors here (the kernels run on the CPU): read as the arrays they view, no copy."""
    obs = _flat32(batch.obs)
    B = obs.shape[0]
    box = trainer.box
    act = np.asarray(host_array(batch.action), dtype=np.float32).reshape(B, -1)
    act = np.ascontiguousarray((act - box.mid.reshape(-1)) / box.half.reshape(-1), dtype=np.float32)
    return (obs, act, _vec(batch.reward, np.float32), _flat32(batch.next_obs), _vec(batch.done, np.bool_),
            _vec(weights, np.float32), host_discounts(batch, trainer.gamma))


def _flat32(obs) -> np.ndarray:
    arr = host_array(obs)
    return np.ascontiguousarray(arr.reshape(arr.shape[0], -1), dtype=np.float32)


def _vec(values, dtype) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(host_array(values), dtype=dtype).reshape(-1))


def choose_engine(trainer: Any, owner: str, engine: str, learner_kernels: Any, kernel: str,
                  kind: str) -> tuple[str, ActorCriticEngine | None]:
    """``(engine name, ActorCriticEngine or None)`` for ``TD3/DDPG/SAC(engine=..., learner_kernels=...)``.

    ``"auto"``: native when ``learner_kernels`` gives ``kernel`` and the networks fit (ReLU MLPs on
    the CPU), else torch; ``"native"``: the kernel or an error saying why not; ``"torch"``: autograd.

    Raises:
        SpecError: an unknown engine, a ``learner_kernels`` that is not callable, or
            ``engine="native"`` with networks the kernel cannot run.
        KernelUnavailableError: ``engine="native"`` and no such kernel was given.
    """
    if engine not in ENGINES:
        raise SpecError(f"{owner}: engine = {engine!r}; expected 'auto', 'native' or 'torch'.")
    if learner_kernels is not None and not callable(learner_kernels):
        raise SpecError(f"{owner}: learner_kernels = {learner_kernels!r}; expected a function name -> kernel "
                        "factory or None, e.g. pearl_core.plugins.kernel_lookup('cpu').")
    why = _misfit(trainer, kind)
    if engine == "native" and why:
        raise SpecError(f"{owner}: engine='native' needs ReLU MLPs on the CPU (found {why}). "
                        "Fix: engine='torch' or 'auto'.")
    factory = learner_kernels(kernel) if (learner_kernels is not None and not why and engine != "torch") else None
    if engine == "native" and factory is None:
        found = "none was given (learner_kernels=None)" if learner_kernels is None else \
            f"{learner_kernels!r} has none"
        raise KernelUnavailableError(
            f"{owner}: engine='native' needs the native {kernel!r} learner kernel, and {found}. Fix: build the "
            "trainer through the runtime (it passes the learner device's kernels), or install pearl-cpu "
            "(pip install ./plugins/pearl_cpu) and pass learner_kernels=pearl_core.plugins.kernel_lookup('cpu'), "
            "or use engine='auto' (it falls back to the torch engine).")
    if factory is None:
        return "torch", None
    return "native", ActorCriticEngine(trainer, factory, kind)


def _misfit(trainer: Any, kind: str) -> str:
    """Why the kernel cannot run the trainer's networks ("" when it can)."""
    if trainer.device.type != "cpu":
        return f"device={str(trainer.device)!r}"
    if kind == "sac":
        if not _is_relu_mlp(trainer.actor):
            return "an actor that is not a ReLU MLP"
    elif not (_tanh_actor(trainer.actor) and _tanh_actor(trainer.actor_target)):
        return "an actor that is not a ReLU MLP with a tanh output"
    nets = [trainer.critic, trainer.critic_target] if kind == "ddpg" else [
        trainer.critic1, trainer.critic2, trainer.critic1_target, trainer.critic2_target]
    if not all(_is_relu_mlp(n) for n in nets):
        return "critics that are not ReLU MLPs"
    return ""
