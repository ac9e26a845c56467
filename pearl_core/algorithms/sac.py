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
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from pearl_core.algorithms.common import (BoxActions, CountedTrainer, adam, check_hidden, check_positive, check_unit,
                                          hard_update, mlp, polyak_update, reward_done_weights)
from pearl_core.errors import SpecError
from pearl_core.trainer import UpdateResult

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


class SAC(CountedTrainer):
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
    """

    action_kind = "continuous"
    acting_net = "actor"

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
    ):
        o = "SAC"
        self.device = torch.device(device)
        self.box = BoxActions.of(observation_space, action_space, o, self.device, actor='tanh-squashed actor')
        self.input_shape, self.action_shape = self.box.input_shape, self.box.action_shape
        self.action_low, self.action_high = self.box.low, self.box.high
        self.gamma = check_unit(gamma, o, "gamma")
        self.tau = check_unit(tau, o, "tau", open_low=True)
        self.max_grad_norm = check_positive(max_grad_norm, o, "max_grad_norm", allow_none=True)

        obs_dim, act_dim = self.box.obs_dim, self.box.act_dim
        self.auto_alpha = isinstance(ent_coef, str)
        if self.auto_alpha and ent_coef != "auto":
            raise SpecError(f"SAC: ent_coef = {ent_coef!r}; expected 'auto' or a number > 0. "
                            "Fix: ent_coef='auto' to learn alpha, or e.g. ent_coef=0.1 to fix it.")
        alpha0 = 1.0 if self.auto_alpha else check_positive(ent_coef, o, "ent_coef")
        self.target_entropy = -float(act_dim) if target_entropy is None else _finite(target_entropy, "target_entropy")
        a_hidden = check_hidden(actor_hidden, o, "actor_hidden")
        c_hidden = check_hidden(critic_hidden, o, "critic_hidden")
        self.actor = mlp(obs_dim, a_hidden, 2 * act_dim).to(self.device)
        self.critic1 = mlp(obs_dim + act_dim, c_hidden, 1).to(self.device)
        self.critic2 = mlp(obs_dim + act_dim, c_hidden, 1).to(self.device)
        self.critic1_target = mlp(obs_dim + act_dim, c_hidden, 1).to(self.device)
        self.critic2_target = mlp(obs_dim + act_dim, c_hidden, 1).to(self.device)
        for target, source in ((self.critic1_target, self.critic1), (self.critic2_target, self.critic2)):
            hard_update(target, source)
            target.requires_grad_(False)
        self.log_alpha = LogAlpha(math.log(alpha0)).to(self.device).requires_grad_(self.auto_alpha)
        self._actor_params = list(self.actor.parameters())
        self._critic_params = list(self.critic1.parameters()) + list(self.critic2.parameters())
        self.actor_optimizer = adam(self._actor_params, check_positive(actor_lr, o, "actor_lr"))
        self.critic_optimizer = adam(self._critic_params, check_positive(critic_lr, o, "critic_lr"))
        alpha_lr = check_positive(alpha_lr, o, "alpha_lr")
        self.alpha_optimizer = adam(self.log_alpha.parameters(), alpha_lr) if self.auto_alpha else None
        self._targets = list(self.critic1_target.parameters()) + list(self.critic2_target.parameters())
        act_seed, learn_seed = np.random.SeedSequence(seed).spawn(2)
        self._rng = np.random.default_rng(act_seed)
        self._gen = torch.Generator(device=self.device)
        self._gen.manual_seed(int(learn_seed.generate_state(1, np.uint64)[0]))
        self.updates = 0
        self.env_steps = 0

    @property
    def alpha(self) -> float:
        """The current entropy coefficient ``exp(log_alpha)``."""
        return float(self.log_alpha.value.detach().exp())

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

    def _min_q(self, obs: torch.Tensor, act: torch.Tensor, target: bool) -> torch.Tensor:
        q1, q2 = (self.critic1_target, self.critic2_target) if target else (self.critic1, self.critic2)
        sa = torch.cat([obs, act], dim=1)
        return torch.minimum(q1(sa), q2(sa)).squeeze(1)

    def update_policy(self, batch, weights: np.ndarray) -> UpdateResult:
        """One step of both critics, the actor and (if ``"auto"``) ``alpha``; then a Polyak step."""
        obs = self._as_input(batch.obs)
        next_obs = self._as_input(batch.next_obs)
        n = obs.shape[0]
        act = self.box.normalise(batch.action, n)
        rew, done, w = reward_done_weights(batch, weights, self.device)
        alpha = self.log_alpha.value.detach().exp()

        with torch.no_grad():
            next_act, next_log_prob = self.sample(next_obs)
            soft_next = self._min_q(next_obs, next_act, target=True) - alpha * next_log_prob
            target = torch.where(done, rew, rew + self.gamma * soft_next)
        sa = torch.cat([obs, act], dim=1)
        q1 = self.critic1(sa).squeeze(1)
        q2 = self.critic2(sa).squeeze(1)
        td1, td2 = q1 - target, q2 - target
        critic_loss = (w * (td1.square() + td2.square())).mean()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self._critic_params, self.max_grad_norm, foreach=True)
        self.critic_optimizer.step()

        pi_act, log_prob = self.sample(obs)
        actor_loss = (alpha * log_prob - self._min_q(obs, pi_act, target=False)).mean()
        # Gradients for the actor only: the critics' weight gradients are never needed here.
        grads = torch.autograd.grad(actor_loss, self._actor_params)
        for p, g in zip(self._actor_params, grads):
            p.grad = g
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self._actor_params, self.max_grad_norm, foreach=True)
        self.actor_optimizer.step()

        log_prob = log_prob.detach()
        metrics = {"critic_loss": float(critic_loss.detach()), "q_mean": float(q1.detach().mean()),
                   "actor_loss": float(actor_loss.detach()), "entropy": float(-log_prob.mean())}
        if self.alpha_optimizer is not None:
            alpha_loss = -(self.log_alpha.value * (log_prob + self.target_entropy)).mean()
            self.alpha_optimizer.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_optimizer.step()
            metrics["alpha_loss"] = float(alpha_loss.detach())
        metrics["alpha"] = self.alpha
        polyak_update(self._targets, self._critic_params, self.tau)
        self.updates += 1
        td = (td1.detach().abs() + td2.detach().abs()).mul_(0.5)
        return UpdateResult(td_errors=td.cpu().numpy(), metrics=metrics)

    # -- checkpoints -------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Networks, ``log_alpha``, optimizers, counters, the exploration stream and the learner's generator."""
        out = super().state_dict()
        out["learner_rng"] = self._gen.get_state()
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        if "learner_rng" in state:
            self._gen.set_state(state["learner_rng"])
