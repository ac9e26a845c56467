"""Twin delayed DDPG (TD3, Fujimoto et al. 2018) for ``Box`` action spaces.

TD3 is DDPG with three changes against the critic's over-estimation:

* **twin critics** — two critics ``Q1``, ``Q2`` with their own Polyak targets;
  the target is ``y = r + gamma * (1 - done) * min(Q1'(s', a'), Q2'(s', a'))``;
* **target policy smoothing** — ``a' = clip(mu'(s') + clip(eps, -c, c), -1, 1)``
  with ``eps ~ N(0, target_noise^2)`` and ``c = target_noise_clip``, in the
  normalised ``[-1, 1]`` action units the networks work in;
* **delayed policy updates** — the actor and all three targets move once every
  ``policy_delay`` critic updates (after the ``policy_delay``-th, ``2 *
  policy_delay``-th, ... update, as in the paper and stable-baselines3, so the
  critics have learnt something before the actor first follows them).

As in :class:`~pearl_core.algorithms.ddpg.DDPG`, the ``tanh`` actor's output is
scaled affinely onto the Box, the critics see observations and normalised
actions, and exploration adds Gaussian noise of std ``noise_std`` (normalised
units) clipped into the Box. The critic loss is the importance-weighted sum of
both critics' squared TD errors, ``mean(w * (δ1² + δ2²))`` with ``δi = Qi(s, a) - y``,
so each critic gets the gradient DDPG's single critic would.

Priorities: ``update_policy`` returns ``(|δ1| + |δ2|) / 2`` per sample. Both
critics are trained on every sample and the loss holds both errors, so a sample
is worth replaying as much as it surprises the two together; the error of only
the critic that gave the min would be blind to the other one's surprise and
would switch from critic to critic as the two cross.

Exploration noise draws from a numpy stream and the smoothing noise from a
torch generator on the networks' device, both seeded from ``seed`` and both in
:meth:`TD3.state_dict`, so a resumed run continues the same streams.

Defaults follow rl-baselines3-zoo's ``hyperparams/td3.yml`` entry for
Pendulum-v1 (``gamma: 0.98, buffer_size: 200000, learning_starts: 10000,
noise_type: 'normal', noise_std: 0.1, gradient_steps: 1, train_freq: 1,
learning_rate: 1e-3, net_arch: [400, 300]``) on top of stable-baselines3's TD3
defaults (``batch_size=256, tau=0.005, policy_delay=2, target_policy_noise=0.2,
target_noise_clip=0.5``); the hidden layers are 256-256 (the zoo's are
400-300). The matching run config is ``batch_size=256, learning_starts=10_000,
replay_ratio=1.0`` with ``ReplayConfig(capacity=200_000)`` (one update per env
step, the zoo's ``train_freq=1, gradient_steps=1``; ``train_every=200``, one burst
per Pendulum episode, keeps the ratio with less per-burst overhead), budget 20k
env steps. The zoo's warm-up takes uniform random actions; PEARL's actors
explore with the (untrained) policy and its noise from the first step.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from pearl_core.algorithms.ac_engine import NativeEngineThreads, choose_engine, native_inputs
from pearl_core.algorithms.common import (adam, bootstrap_discount, check_hidden, check_positive, check_unit,
                                          hard_update, mlp, polyak_update, tanh_actor_actions, update_result)
from pearl_core.algorithms.twin_critic import TwinCriticTrainer
from pearl_core.trainer import UpdateResult, is_device_batch

__all__ = ["TD3"]


class TD3(NativeEngineThreads, TwinCriticTrainer):
    """TD3: twin critics, target policy smoothing, delayed actor and target updates.

    Args:
        observation_space: a ``Box`` (observations are flattened).
        action_space: a ``Box`` with finite bounds.
        actor_hidden, critic_hidden: MLP hidden sizes (both critics get ``critic_hidden``).
        actor_lr, critic_lr: Adam learning rates (one critic optimizer holds both critics).
        gamma: discount factor in ``[0, 1]``.
        tau: Polyak rate of the three target networks, applied with each actor update.
        noise_std: exploration noise std in normalised action units (fraction
            of the half-range of each action dimension).
        target_noise: std of the target policy smoothing noise (normalised units).
        target_noise_clip: the smoothing noise is clipped to ``[-target_noise_clip, target_noise_clip]``.
        policy_delay: critic updates per actor (and target) update.
        max_grad_norm: clip the actor's and the critics' gradient norms (``None``: off).
        seed: seeds the exploration and smoothing noise (network init follows torch's global seed).
        device: torch device of the networks.
        engine: how :meth:`update_policy` computes: ``"torch"`` (autograd and torch's Adam),
            ``"native"`` (one call into the ``"td3_mlp"`` kernel from ``learner_kernels``, the same
            math; :mod:`pearl_core.algorithms.ac_engine`) or ``"auto"`` (native when
            ``learner_kernels`` gives the kernel and the networks are ReLU MLPs on the CPU, else torch).
        learner_kernels: ``name -> kernel factory or None``, where native learner steps come from;
            the runtime passes ``pearl_core.plugins.kernel_lookup(<learner device>)``.
    """

    #: Learner kernels this trainer can run (:meth:`pearl_core.backend.Backend.learner_kernel`).
    learner_kernel_names = ("td3_mlp",)
    #: Tensor batches on :attr:`device`: the torch path reads them where they are and returns its TD errors
    #: and metrics there; the native (CPU) step views CPU tensors as numpy arrays.
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
        gamma: float = 0.98,
        tau: float = 0.005,
        noise_std: float = 0.1,
        target_noise: float = 0.2,
        target_noise_clip: float = 0.5,
        policy_delay: int = 2,
        max_grad_norm: float | None = None,
        seed: int | None = None,
        device: str = "cpu",
        engine: str = "auto",
        learner_kernels: Callable[[str], Any | None] | None = None,
    ):
        o = "TD3"
        self._setup(o, observation_space, action_space, device=device, gamma=gamma, tau=tau,
                    max_grad_norm=max_grad_norm, seed=seed)
        self.noise_std = check_unit(noise_std, o, "noise_std", high=10.0)
        self.target_noise = check_unit(target_noise, o, "target_noise", high=10.0)
        self.target_noise_clip = check_unit(target_noise_clip, o, "target_noise_clip", high=10.0)
        self.policy_delay = check_positive(policy_delay, o, "policy_delay", integer=True)
        obs_dim, act_dim = self.box.obs_dim, self.box.act_dim
        a_hidden = check_hidden(actor_hidden, o, "actor_hidden")
        self.actor = nn.Sequential(mlp(obs_dim, a_hidden, act_dim), nn.Tanh()).to(self.device)
        self.actor_target = nn.Sequential(mlp(obs_dim, a_hidden, act_dim), nn.Tanh()).to(self.device)
        self._twin_critics(o, critic_hidden, critic_lr)
        hard_update(self.actor_target, self.actor)
        self.actor_target.requires_grad_(False)
        self._actor_params = list(self.actor.parameters())
        self.actor_optimizer = adam(self._actor_params, check_positive(actor_lr, o, "actor_lr"))
        online = (self.actor, self.critic1, self.critic2)
        targets = (self.actor_target, self.critic1_target, self.critic2_target)
        self._online = [p for net in online for p in net.parameters()]
        self._targets = [p for net in targets for p in net.parameters()]
        self.engine, self._engine = choose_engine(self, o, engine, learner_kernels, "td3_mlp", "td3")

    # -- acting ------------------------------------------------------------------
    def get_action(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        """Actions ``(n, *action_shape)`` ``float32`` inside the Box; Gaussian noise if ``explore``."""
        return tanh_actor_actions(self.actor, self._as_input(obs), self.box, self._rng,
                                  self.noise_std if explore else 0.0)

    # -- learning ----------------------------------------------------------------
    def learner_passes(self) -> dict[str, tuple[float, float, float]]:
        """Per update: both critics' losses (a forward and a backward pass each) and, every
        ``policy_delay`` updates, the actor's loss through the first critic (the actor forward
        and backward, ``critic1`` forward again and back-propagated for its input gradient only).
        The three targets: one forward pass each (the default)."""
        k = 1.0 / self.policy_delay
        return {"actor": (k, k, k), "critic1": (1.0 + k, 1.0, 1.0 + k), "critic2": (1.0, 1.0, 1.0)}

    def target_actions(self, next_obs: torch.Tensor) -> torch.Tensor:
        """Smoothed target actions ``clip(mu'(s') + clip(eps, -c, c), -1, 1)``; draws from the smoothing stream."""
        next_act = self.actor_target(next_obs)
        if self.target_noise > 0:
            eps = torch.randn(next_act.shape, generator=self._gen, device=self.device) * self.target_noise
            next_act = (next_act + eps.clamp_(-self.target_noise_clip, self.target_noise_clip)).clamp_(-1.0, 1.0)
        return next_act

    def update_policy(self, batch, weights: np.ndarray) -> UpdateResult:
        """One step of both critics; every ``policy_delay``-th update also an actor and a Polyak step.

        ``batch`` holds numpy arrays, or torch tensors on :attr:`device` (a device batch: TD errors and
        metrics come back as tensors there, no host synchronisation;
        :attr:`~pearl_core.trainer.Trainer.device_batches`)."""
        device_batch = is_device_batch(batch)
        if self._engine is not None and self._engine.handles():
            return self._update_native(batch, weights, device_batch)
        obs, next_obs, act, rew, done, w = self._inputs(batch, weights)
        with torch.no_grad():
            q_next = self._min_q(next_obs, self.target_actions(next_obs), target=True)
            target = torch.where(done, rew, rew + bootstrap_discount(batch, self.gamma, self.device) * q_next)
        td, metrics = self._critic_step(obs, act, target, w)
        self.updates += 1
        if self.updates % self.policy_delay == 0:
            actor_loss = -self.critic1(torch.cat([obs, self.actor(obs)], dim=1)).mean()
            self._actor_step(actor_loss)
            polyak_update(self._targets, self._online, self.tau)
            metrics["actor_loss"] = actor_loss.detach()
        return update_result(td, metrics, device_batch)

    def _update_native(self, batch, weights: np.ndarray, device_batch: bool) -> UpdateResult:
        """:meth:`update_policy` in the native kernel; the smoothing noise is drawn here, as the torch path draws it."""
        inputs = native_inputs(self, batch, weights)
        noise = None
        if self.target_noise > 0:
            eps = torch.randn((inputs[0].shape[0], self.box.act_dim), generator=self._gen,
                              device=self.device) * self.target_noise
            noise = eps.clamp_(-self.target_noise_clip, self.target_noise_clip).numpy()
        due = (self.updates + 1) % self.policy_delay == 0
        r = self._engine.td3_step(inputs, noise, due)  # type: ignore[union-attr]
        self.updates += 1
        metrics = {"critic_loss": r.critic_loss, "q_mean": r.q_mean}
        if due:
            metrics["actor_loss"] = r.actor_loss
        # a device batch here is on the CPU: its TD errors as a tensor viewing the kernel's array
        return UpdateResult(td_errors=torch.from_numpy(r.td) if device_batch else r.td, metrics=metrics)
