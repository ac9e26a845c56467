"""Soft actor-critic (SAC, Haarnoja et al. 2018) for ``Box`` action spaces.

The actor is a squashed Gaussian: its MLP outputs a mean ``m`` and a
``log_std`` (clamped to ``[-20, 2]``) per action dimension; an action is
``a = tanh(u)``, ``u = m + exp(log_std) * eps``, ``eps ~ N(0, 1)``, in the
normalised ``[-1, 1]`` units the critics work in, scaled affinely onto the Box
like :class:`~pearl_core.algorithms.ddpg.DDPG`'s. Its log-density carries the
change-of-variables term of the squash,
``log pi(a|s) = sum_i [log N(u_i; m_i, std_i) - log(1 - tanh(u_i)^2)]``, written
``2 * (log 2 - u - softplus(-2u))`` for the last term (no ``1 - a^2`` that rounds
to 0 near the bounds). ``get_action(obs, explore=True)`` samples;
``explore=False`` acts with the deterministic ``tanh(m)``.

Twin critics ``Q1``, ``Q2`` with Polyak-averaged targets (``tau``, after every
update) learn the soft target
``y = r + gamma * (1 - done) * (min(Q1'(s', a'), Q2'(s', a')) - alpha * log pi(a'|s'))``,
``a' ~ pi(.|s')``, by the importance-weighted ``mean(w * (δ1² + δ2²))``,
``δi = Qi(s, a) - y``. The actor minimises ``mean(alpha * log pi(a|s) - min(Q1, Q2)(s, a))``
with reparameterised ``a ~ pi(.|s)``. The entropy coefficient ``alpha`` is tuned
automatically (``ent_coef="auto"``): a learnable ``log_alpha`` with its own Adam
minimises ``-log_alpha * (log pi(a|s) + target_entropy)``, so ``alpha`` grows
while the policy's entropy is below ``target_entropy`` (default ``-|A|``, the
number of action dimensions) and shrinks above it; a float ``ent_coef`` fixes
``alpha`` instead. Importance weights scale the critic loss only (they correct
the replay's sampling of TD targets; the actor and ``alpha`` losses are
expectations over states, as in prioritized-replay actor-critics).

Priorities: ``update_policy`` returns ``(|δ1| + |δ2|) / 2`` per sample, the mean
absolute error of the two critics both trained on it (the error of the min
critic alone would ignore the other's surprise and switch critics as they cross).

Random streams: actors sample their exploration noise from a numpy stream, the
learner its reparameterisation noise from a torch generator on the networks'
device; both are seeded from ``seed`` and both are in :meth:`SAC.state_dict`
(with ``log_alpha`` and its optimizer), so a resumed run continues them.

Defaults follow rl-baselines3-zoo's ``hyperparams/sac.yml`` entry for
Pendulum-v1 (``n_timesteps: 20000, policy: 'MlpPolicy', learning_rate: 1e-3``) on
top of stable-baselines3's SAC defaults (``buffer_size=1_000_000,
learning_starts=100, batch_size=256, tau=0.005, gamma=0.99, train_freq=1,
gradient_steps=1, ent_coef='auto'`` starting at 1, ``target_entropy='auto'`` =
``-|A|``, ``net_arch=[256, 256]``); the zoo's one learning rate is used for the
actor, the critics and ``alpha``. The matching run config is ``batch_size=256,
learning_starts=100, replay_ratio=1.0`` with ``ReplayConfig(capacity=1_000_000)``
(one update per env step, the zoo's ``train_freq=1, gradient_steps=1``;
``train_every=200``, one burst per Pendulum episode, keeps the ratio with less
per-burst overhead), budget 20k env steps.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from pearl_core.algorithms.ac_engine import NativeEngineThreads, choose_engine, native_inputs
from pearl_core.algorithms.common import (adam, bootstrap_discount, check_hidden, check_positive, mlp, polyak_update,
                                          update_result)
from pearl_core.algorithms.twin_critic import TwinCriticTrainer
from pearl_core.errors import SpecError
from pearl_core.trainer import GraphHooks, UpdateResult, is_device_batch

__all__ = ["SAC"]

#: Bounds of the actor's ``log_std`` output (std in ``[2e-9, 7.4]`` normalised units).
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _finite(value, name: str) -> float:
    """``value`` as a finite float, or :class:`SpecError`."""
    try:
        out = float(value)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"SAC: {name} = {value!r}; expected a finite number, e.g. -1.0.") from exc
    if isinstance(value, bool) or not math.isfinite(out):
        raise SpecError(f"SAC: {name} = {value!r}; expected a finite number, e.g. -1.0 (None: minus the "
                        "number of action dimensions).")
    return out


class LogAlpha(nn.Module):
    """Holds ``log(alpha)`` as a parameter, so the trainer's default checkpoint saves it with the networks."""

    def __init__(self, value: float):
        super().__init__()
        self.value = nn.Parameter(torch.tensor(float(value)))


class SAC(NativeEngineThreads, TwinCriticTrainer):
    """SAC: squashed Gaussian actor, twin soft critics with Polyak targets, automatic entropy tuning.

    Args:
        observation_space: a ``Box`` (observations are flattened).
        action_space: a ``Box`` with finite bounds.
        actor_hidden, critic_hidden: MLP hidden sizes (both critics get ``critic_hidden``).
        actor_lr, critic_lr: Adam learning rates (one critic optimizer holds both critics).
        alpha_lr: Adam learning rate of ``log_alpha`` (used with ``ent_coef="auto"``).
        gamma: discount factor in ``[0, 1]``.
        tau: Polyak rate of both target critics, applied after every update.
        ent_coef: ``"auto"`` (learn ``alpha``, starting at 1) or a fixed ``alpha > 0``.
        target_entropy: the entropy ``"auto"`` tunes ``alpha`` towards (``None``: ``-|A|``).
        max_grad_norm: clip the actor's and the critics' gradient norms (``None``: off).
        seed: seeds the exploration and reparameterisation noise (network init
            follows torch's global seed).
        device: torch device of the networks.
        engine: how :meth:`update_policy` computes: ``"torch"`` (autograd and torch's Adam),
            ``"native"`` (one call into the ``"sac_mlp"`` kernel from ``learner_kernels``, the same
            math; :mod:`pearl_core.algorithms.ac_engine`) or ``"auto"`` (native when
            ``learner_kernels`` gives the kernel and the networks are ReLU MLPs on the CPU, else torch).
        learner_kernels: ``name -> kernel factory or None``, where native learner steps come from;
            the runtime passes ``pearl_core.plugins.kernel_lookup(<learner device>)``.
    """

    #: Learner kernels this trainer can run (:meth:`pearl_core.backend.Backend.learner_kernel`).
    learner_kernel_names = ("sac_mlp",)
    #: Tensor batches on :attr:`device`: the torch path reads them where they are and returns its TD errors
    #: and metrics (``alpha`` included) there; the native (CPU) step views CPU tensors as numpy arrays.
    device_batches = True

    def __init__(
        self,
        observation_space,
        action_space,
        *,
        actor_hidden: Sequence[int] = (256, 256),
        critic_hidden: Sequence[int] = (256, 256),
        actor_lr: float = 1e-3,
        critic_lr: float = 1e-3,
        alpha_lr: float = 1e-3,
        gamma: float = 0.99,
        tau: float = 0.005,
        ent_coef: float | str = "auto",
        target_entropy: float | None = None,
        max_grad_norm: float | None = None,
        seed: int | None = None,
        device: str = "cpu",
        engine: str = "auto",
        learner_kernels: Callable[[str], Any | None] | None = None,
    ):
        o = "SAC"
        self._setup(o, observation_space, action_space, device=device, gamma=gamma, tau=tau,
                    max_grad_norm=max_grad_norm, seed=seed, actor="tanh-squashed actor")
        obs_dim, act_dim = self.box.obs_dim, self.box.act_dim
        self.auto_alpha = isinstance(ent_coef, str)
        if self.auto_alpha and ent_coef != "auto":
            raise SpecError(f"SAC: ent_coef = {ent_coef!r}; expected 'auto' or a number > 0. "
                            "Fix: ent_coef='auto' to learn alpha, or e.g. ent_coef=0.1 to fix it.")
        alpha0 = 1.0 if self.auto_alpha else check_positive(ent_coef, o, "ent_coef")
        self.target_entropy = -float(act_dim) if target_entropy is None else _finite(target_entropy, "target_entropy")
        a_hidden = check_hidden(actor_hidden, o, "actor_hidden")
        self.actor = mlp(obs_dim, a_hidden, 2 * act_dim).to(self.device)
        self._twin_critics(o, critic_hidden, critic_lr)
        self.log_alpha = LogAlpha(math.log(alpha0)).to(self.device).requires_grad_(self.auto_alpha)
        self._actor_params = list(self.actor.parameters())
        self.actor_optimizer = adam(self._actor_params, check_positive(actor_lr, o, "actor_lr"))
        alpha_lr = check_positive(alpha_lr, o, "alpha_lr")
        self.alpha_optimizer = adam(self.log_alpha.parameters(), alpha_lr) if self.auto_alpha else None
        self._targets = list(self.critic1_target.parameters()) + list(self.critic2_target.parameters())
        self.engine, self._engine = choose_engine(self, o, engine, learner_kernels, "sac_mlp", "sac")

    @property
    def alpha(self) -> float:
        """The current entropy coefficient ``exp(log_alpha)`` (a python float: reading it synchronises with
        the device; :meth:`_alpha_tensor` does not)."""
        return float(self._alpha_tensor())

    def _alpha_tensor(self) -> torch.Tensor:
        """``exp(log_alpha)`` as a detached 0-d tensor on :attr:`device` (a new tensor: later steps of
        ``log_alpha`` do not change it)."""
        return self.log_alpha.value.detach().exp()

    # -- acting ------------------------------------------------------------------
    def _mean_log_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.actor(obs).chunk(2, dim=1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def get_action(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        """Actions ``(n, *action_shape)`` ``float32`` inside the Box: sampled if ``explore``, else ``tanh(mean)``."""
        with torch.inference_mode():
            mean, log_std = self._mean_log_std(self._as_input(obs))
            u = mean.cpu().numpy()
            if explore:
                std = log_std.exp().cpu().numpy()
                u = u + std * self._rng.standard_normal(u.shape, dtype=np.float32)
        return self.box.to_env(np.tanh(u))

    # -- learning ----------------------------------------------------------------
    def learner_passes(self) -> dict[str, tuple[float, float, float]]:
        """Per update: the actor samples on ``s'`` (the target) and on ``s`` (its loss, then a
        backward pass); each critic's loss (a forward and a backward pass) and the actor's loss
        through both critics (a forward pass each, back-propagated for the input gradient
        only). The target critics: one forward pass each (the default). ``log_alpha`` has no layer."""
        return {"actor": (2.0, 1.0, 1.0), "critic1": (2.0, 1.0, 2.0), "critic2": (2.0, 1.0, 2.0)}

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised ``(a, log pi(a|s))`` for a batch: ``(B, |A|)`` in ``[-1, 1]`` and ``(B,)``.

        Draws ``eps`` from the learner's generator; gradients flow through both to the actor.
        """
        mean, log_std = self._mean_log_std(obs)
        eps = torch.randn(mean.shape, generator=self._gen, device=self.device)
        u = mean + log_std.exp() * eps
        log_prob = -(0.5 * eps.square() + log_std + _HALF_LOG_2PI)
        log_prob = log_prob - 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
        return torch.tanh(u), log_prob.sum(dim=1)

    def update_policy(self, batch, weights: np.ndarray) -> UpdateResult:
        """One step of both critics, the actor and (if ``"auto"``) ``alpha``; then a Polyak step.

        ``batch`` holds numpy arrays, or torch tensors on :attr:`device` (a device batch: TD errors and
        metrics come back as tensors there, no host synchronisation;
        :attr:`~pearl_core.trainer.Trainer.device_batches`)."""
        device_batch = is_device_batch(batch)
        if self._engine is not None and self._engine.handles():
            return self._update_native(batch, weights, device_batch)
        result = self._torch_update(batch, weights, device_batch)
        self.updates += 1
        return result

    def _advance(self, count: int) -> None:
        self.updates += int(count)

    def graph_hooks(self) -> GraphHooks | None:
        """The torch update as :class:`~pearl_core.trainer.GraphHooks`: all of it in the graph (the Polyak
        step is every update's), both policy draws from the learner's generator (``None`` while the native
        kernel runs the update)."""
        if self._engine is not None and self._engine.handles():
            return None
        optimizers = [self.critic_optimizer, self.actor_optimizer]
        if self.alpha_optimizer is not None:
            optimizers.append(self.alpha_optimizer)
        return GraphHooks(update=lambda batch, weights: self._torch_update(batch, weights, True),
                          before=lambda: None, advance=self._advance, optimizers=tuple(optimizers),
                          generators=(self._gen,))

    def _torch_update(self, batch, weights, device_batch: bool) -> UpdateResult:
        """One update in torch, without the counter (the graph's part)."""
        obs, next_obs, act, rew, done, w = self._inputs(batch, weights)
        alpha = self._alpha_tensor()
        with torch.no_grad():
            next_act, next_log_prob = self.sample(next_obs)
            soft_next = self._min_q(next_obs, next_act, target=True) - alpha * next_log_prob
            target = torch.where(done, rew, rew + bootstrap_discount(batch, self.gamma, self.device) * soft_next)
        td, metrics = self._critic_step(obs, act, target, w)

        pi_act, log_prob = self.sample(obs)
        actor_loss = (alpha * log_prob - self._min_q(obs, pi_act, target=False)).mean()
        self._actor_step(actor_loss)

        log_prob = log_prob.detach()
        metrics.update(actor_loss=actor_loss.detach(), entropy=-log_prob.mean())
        if self.alpha_optimizer is not None:
            alpha_loss = -(self.log_alpha.value * (log_prob + self.target_entropy)).mean()
            self.alpha_optimizer.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_optimizer.step()
            metrics["alpha_loss"] = alpha_loss.detach()
        metrics["alpha"] = self._alpha_tensor()  # after its step; a float (self.alpha) would synchronise
        polyak_update(self._targets, self._critic_params, self.tau)
        return update_result(td, metrics, device_batch)

    def _update_native(self, batch, weights: np.ndarray, device_batch: bool) -> UpdateResult:
        """:meth:`update_policy` in the native kernel; both ``eps`` are drawn here, as the torch path's
        two :meth:`sample` calls draw them (``s'`` first, then ``s``)."""
        inputs = native_inputs(self, batch, weights)
        shape = (inputs[0].shape[0], self.box.act_dim)
        eps_next = torch.randn(shape, generator=self._gen, device=self.device).numpy()
        eps_pi = torch.randn(shape, generator=self._gen, device=self.device).numpy()
        r = self._engine.sac_step(inputs, eps_next, eps_pi)  # type: ignore[union-attr]
        self.updates += 1
        metrics = {"critic_loss": r.critic_loss, "q_mean": r.q_mean, "actor_loss": r.actor_loss, "entropy": r.entropy}
        if self.alpha_optimizer is not None:
            metrics["alpha_loss"] = r.alpha_loss
        metrics["alpha"] = r.alpha
        # a device batch here is on the CPU: its TD errors as a tensor viewing the kernel's array
        return UpdateResult(td_errors=torch.from_numpy(r.td) if device_batch else r.td, metrics=metrics)
