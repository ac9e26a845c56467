"""Deep deterministic policy gradient (DDPG) for ``Box`` action spaces.

The actor maps an observation to a ``tanh`` output in ``[-1, 1]^d`` which is
scaled affinely onto the Box ``[low, high]``; the critic sees observations and
actions in that normalised ``[-1, 1]`` form, so one set of hyper-parameters
works whatever the bounds. Exploration adds Gaussian noise of standard
deviation ``noise_std`` in normalised units — ``noise_std * (high - low) / 2``
in the environment's units — and clips the result into the Box, so every action
is continuous and inside the bounds (the authors' prototype sent discrete
``argmax``/``{0, 1}`` actions to continuous environments).

Both networks have Polyak-averaged targets (``tau``); the critic minimises the
importance-weighted squared TD error and returns ``|Q(s, a) - y|`` per sample,
``y = r + gamma * (1 - done) * Q'(s', mu'(s'))``, for prioritized replay.

Defaults (Adam 1e-3 for both nets, gamma 0.98, tau 0.005, noise 0.1) follow
rl-baselines3-zoo's Pendulum-v1 DDPG/TD3 settings; the hidden layers are
256-256 (the zoo's are 400-300). The matching run config is ``batch_size=128,
learning_starts=1000, replay_ratio=1.0, train_every=200`` (one burst of 200
updates per Pendulum episode, like the zoo's ``train_freq=(1, "episode"),
gradient_steps=-1``); ``benchmarks/learning_serial.py`` measures how it learns.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from pearl_core.algorithms.ac_engine import NativeEngineThreads, choose_engine, native_inputs
from pearl_core.algorithms.common import (BoxActions, CountedTrainer, adam, bootstrap_discount, check_hidden,
                                          check_positive, check_unit, hard_update, mlp, polyak_update,
                                          reward_done_weights, tanh_actor_actions, update_result)
from pearl_core.trainer import UpdateResult, is_device_batch

__all__ = ["DDPG"]


class DDPG(NativeEngineThreads, CountedTrainer):
    """DDPG with target networks, Gaussian exploration and per-sample TD errors.

    Args:
        observation_space: a ``Box`` (observations are flattened).
        action_space: a ``Box`` with finite bounds.
        actor_hidden, critic_hidden: MLP hidden sizes.
        actor_lr, critic_lr: Adam learning rates.
        gamma: discount factor in ``[0, 1]``.
        tau: Polyak rate of both target networks, applied after every update.
        noise_std: exploration noise std in normalised action units (fraction
            of the half-range of each action dimension).
        noise_final, noise_decay_steps: if both are given, the noise std decays
            linearly from ``noise_std`` to ``noise_final`` over that many env steps.
        policy_delay: critic updates per actor (and target) update (1 = DDPG).
        max_grad_norm: clip both networks' gradient norms (``None``: off).
        seed: seeds the exploration noise (network init follows torch's global seed).
        device: torch device of the networks.
        engine: how :meth:`update_policy` computes: ``"torch"`` (autograd and torch's Adam),
            ``"native"`` (one call into the ``"td3_mlp"`` kernel from ``learner_kernels`` with one
            critic and no smoothing, the same math; :mod:`pearl_core.algorithms.ac_engine`) or
            ``"auto"`` (native when ``learner_kernels`` gives the kernel and the networks are ReLU
            MLPs on the CPU, else torch).
        learner_kernels: ``name -> kernel factory or None``, where native learner steps come from;
            the runtime passes ``pearl_core.plugins.kernel_lookup(<learner device>)``.
    """

    action_kind = "continuous"
    #: Its tanh actor is scaled onto the Box bounds: build_trainer checks them (check_action_bounds) first.
    scales_action_bounds = True
    acting_net = "actor"
    supports_n_step = True  # the target bootstraps with gamma ** batch.steps (bootstrap_discount)
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
        noise_final: float | None = None,
        noise_decay_steps: int | None = None,
        policy_delay: int = 1,
        max_grad_norm: float | None = None,
        seed: int | None = None,
        device: str = "cpu",
        engine: str = "auto",
        learner_kernels: Callable[[str], Any | None] | None = None,
    ):
        o = "DDPG"
        self.device = torch.device(device)
        self.box = BoxActions.of(observation_space, action_space, o, self.device)
        self.input_shape, self.action_shape = self.box.input_shape, self.box.action_shape
        self.action_low, self.action_high = self.box.low, self.box.high
        self.gamma = check_unit(gamma, o, "gamma")
        self.tau = check_unit(tau, o, "tau", open_low=True)
        self.noise_std = check_unit(noise_std, o, "noise_std", high=10.0)
        self.noise_final = None if noise_final is None else check_unit(noise_final, o, "noise_final", high=10.0)
        self.noise_decay_steps = check_positive(noise_decay_steps, o, "noise_decay_steps", allow_none=True,
                                                integer=True)
        self.policy_delay = check_positive(policy_delay, o, "policy_delay", integer=True)
        self.max_grad_norm = check_positive(max_grad_norm, o, "max_grad_norm", allow_none=True)

        obs_dim, act_dim = self.box.obs_dim, self.box.act_dim
        a_hidden = check_hidden(actor_hidden, o, "actor_hidden")
        c_hidden = check_hidden(critic_hidden, o, "critic_hidden")
        self.actor = nn.Sequential(mlp(obs_dim, a_hidden, act_dim), nn.Tanh()).to(self.device)
        self.actor_target = nn.Sequential(mlp(obs_dim, a_hidden, act_dim), nn.Tanh()).to(self.device)
        self.critic = mlp(obs_dim + act_dim, c_hidden, 1).to(self.device)
        self.critic_target = mlp(obs_dim + act_dim, c_hidden, 1).to(self.device)
        for target, source in ((self.actor_target, self.actor), (self.critic_target, self.critic)):
            hard_update(target, source)
            target.requires_grad_(False)
        self.actor_optimizer = adam(self.actor.parameters(), check_positive(actor_lr, o, "actor_lr"))
        self.critic_optimizer = adam(self.critic.parameters(), check_positive(critic_lr, o, "critic_lr"))
        self._actor_params = list(self.actor.parameters())
        self._critic_params = list(self.critic.parameters())
        self._online = self._actor_params + self._critic_params
        self._targets = list(self.actor_target.parameters()) + list(self.critic_target.parameters())
        self._rng = np.random.default_rng(seed)
        self.updates = 0
        self.env_steps = 0
        self.engine, self._engine = choose_engine(self, o, engine, learner_kernels, "td3_mlp", "ddpg")

    # -- acting ------------------------------------------------------------------
    @property
    def current_noise_std(self) -> float:
        """Exploration noise std (normalised units) at the current :attr:`env_steps`."""
        if self.noise_final is None or self.noise_decay_steps is None:
            return self.noise_std
        frac = min(1.0, self.env_steps / self.noise_decay_steps)
        return self.noise_std + frac * (self.noise_final - self.noise_std)

    def get_action(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        """Actions ``(n, *action_shape)`` ``float32`` inside the Box; Gaussian noise if ``explore``."""
        return tanh_actor_actions(self.actor, self._as_input(obs), self.box, self._rng,
                                  self.current_noise_std if explore else 0.0)

    # -- learning ----------------------------------------------------------------
    def learner_passes(self) -> dict[str, tuple[float, float, float]]:
        """Per update: the critic's loss (a forward and a backward pass) and, every ``policy_delay``
        updates, the actor's loss: the actor forward and backward, the critic forward again and
        back-propagated for its input gradient only. The targets: one forward pass each (default)."""
        k = 1.0 / self.policy_delay
        return {"actor": (k, k, k), "critic": (1.0 + k, 1.0, 1.0 + k)}

    def update_policy(self, batch, weights: np.ndarray) -> UpdateResult:
        """One critic step (and every ``policy_delay`` updates an actor step and a Polyak step).

        ``batch`` holds numpy arrays, or torch tensors on :attr:`device` (a device batch: TD errors and
        metrics come back as tensors there, no host synchronisation;
        :attr:`~pearl_core.trainer.Trainer.device_batches`)."""
        device_batch = is_device_batch(batch)
        if self._engine is not None and self._engine.handles():
            return self._update_native(batch, weights, device_batch)
        obs = self._as_input(batch.obs)
        next_obs = self._as_input(batch.next_obs)
        n = obs.shape[0]
        act = self.box.normalise(batch.action, n)
        rew, done, w = reward_done_weights(batch, weights, self.device)

        with torch.no_grad():
            next_act = self.actor_target(next_obs)
            q_next = self.critic_target(torch.cat([next_obs, next_act], dim=1)).squeeze(1)
            target = torch.where(done, rew, rew + bootstrap_discount(batch, self.gamma, self.device) * q_next)
        q = self.critic(torch.cat([obs, act], dim=1)).squeeze(1)
        td = q - target
        critic_loss = (w * td.square()).mean()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self._critic_params, self.max_grad_norm, foreach=True)
        self.critic_optimizer.step()

        metrics = {"critic_loss": critic_loss.detach(), "q_mean": q.detach().mean()}
        if self.updates % self.policy_delay == 0:
            actor_loss = -self.critic(torch.cat([obs, self.actor(obs)], dim=1)).mean()
            # Gradients for the actor only: the critic's weight gradients are never needed here.
            grads = torch.autograd.grad(actor_loss, self._actor_params)
            for p, g in zip(self._actor_params, grads):
                p.grad = g
            if self.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(self._actor_params, self.max_grad_norm, foreach=True)
            self.actor_optimizer.step()
            polyak_update(self._targets, self._online, self.tau)
            metrics["actor_loss"] = actor_loss.detach()
        self.updates += 1
        return update_result(td.detach().abs_(), metrics, device_batch)

    def _update_native(self, batch, weights: np.ndarray, device_batch: bool) -> UpdateResult:
        """:meth:`update_policy` in the native kernel (one critic, no smoothing noise)."""
        due = self.updates % self.policy_delay == 0
        r = self._engine.td3_step(native_inputs(self, batch, weights), None, due)  # type: ignore[union-attr]
        self.updates += 1
        metrics = {"critic_loss": r.critic_loss, "q_mean": r.q_mean}
        if due:
            metrics["actor_loss"] = r.actor_loss
        # a device batch here is on the CPU: its TD errors as a tensor viewing the kernel's array
        return UpdateResult(td_errors=torch.from_numpy(r.td) if device_batch else r.td, metrics=metrics)
