"""What TD3 and SAC share: a Box task, twin critics with frozen Polyak targets, two seeded random streams.

:class:`TwinCriticTrainer` sets up the spaces (:class:`~pearl_core.algorithms.common.BoxActions`),
``gamma``/``tau``/``max_grad_norm``, the critics ``critic1``/``critic2`` over ``(s, a)`` with their
targets and one Adam optimizer over both, and two random streams spawned from ``seed``: a numpy one
for the actors' exploration (``_rng``) and a torch generator for the learner's draws (``_gen``, TD3's
smoothing noise, SAC's reparameterisation); both streams are in the checkpoint. Its update helpers
are the twin critic step (``mean(w * (δ1² + δ2²))``, one backward pass, clipping, Adam) and the
actor step (gradients for the actor's parameters only).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch

from pearl_core.algorithms.common import (BoxActions, CountedTrainer, adam, check_hidden, check_positive, check_unit,
                                          hard_update, mlp, reward_done_weights)

__all__ = ["TwinCriticTrainer"]


class TwinCriticTrainer(CountedTrainer):
    """Base of :class:`~pearl_core.algorithms.td3.TD3` and :class:`~pearl_core.algorithms.sac.SAC`."""

    action_kind = "continuous"
    #: Its tanh actor is scaled onto the Box bounds: build_trainer checks them (check_action_bounds) first.
    scales_action_bounds = True
    acting_net = "actor"
    supports_n_step = True  # the target bootstraps with gamma ** batch.steps (bootstrap_discount)

    def _setup(self, owner: str, observation_space, action_space, *, device: str, gamma: float, tau: float,
               max_grad_norm: float | None, seed: int | None, actor: str = "tanh actor") -> None:
        """Spaces, discount, Polyak rate, clipping and both random streams (raises ``SpecError`` on bad values)."""
        self.device = torch.device(device)
        self.box = BoxActions.of(observation_space, action_space, owner, self.device, actor=actor)
        self.input_shape, self.action_shape = self.box.input_shape, self.box.action_shape
        self.action_low, self.action_high = self.box.low, self.box.high
        self.gamma = check_unit(gamma, owner, "gamma")
        self.tau = check_unit(tau, owner, "tau", open_low=True)
        self.max_grad_norm = check_positive(max_grad_norm, owner, "max_grad_norm", allow_none=True)
        act_seed, learn_seed = np.random.SeedSequence(seed).spawn(2)
        self._rng = np.random.default_rng(act_seed)
        self._gen = torch.Generator(device=self.device)
        self._gen.manual_seed(int(learn_seed.generate_state(1, np.uint64)[0]))
        self.updates = 0
        self.env_steps = 0

    def _twin_critics(self, owner: str, hidden: Sequence[int], lr: float) -> None:
        """``critic1``, ``critic2`` over ``(s, a)``, their frozen targets (copies), one Adam over both."""
        c_hidden = check_hidden(hidden, owner, "critic_hidden")
        width = self.box.obs_dim + self.box.act_dim
        self.critic1 = mlp(width, c_hidden, 1).to(self.device)
        self.critic2 = mlp(width, c_hidden, 1).to(self.device)
        self.critic1_target = mlp(width, c_hidden, 1).to(self.device)
        self.critic2_target = mlp(width, c_hidden, 1).to(self.device)
        for target, online in ((self.critic1_target, self.critic1), (self.critic2_target, self.critic2)):
            hard_update(target, online)
            target.requires_grad_(False)
        self._critic_params = list(self.critic1.parameters()) + list(self.critic2.parameters())
        self.critic_optimizer = adam(self._critic_params, check_positive(lr, owner, "critic_lr"))

    def _inputs(self, batch, weights) -> tuple[torch.Tensor, ...]:
        """``obs, next_obs, act`` (normalised), ``rew, done, w`` of a batch, on the networks' device (numpy
        arrays, or a device batch's tensors read where they are and never written)."""
        obs = self._as_input(batch.obs)
        next_obs = self._as_input(batch.next_obs)
        act = self.box.normalise(batch.action, obs.shape[0])
        return (obs, next_obs, act, *reward_done_weights(batch, weights, self.device))

    def _min_q(self, obs: torch.Tensor, act: torch.Tensor, target: bool) -> torch.Tensor:
        """``min(Q1, Q2)(s, a)`` of the online critics or of their targets, ``(B,)``."""
        q1, q2 = (self.critic1_target, self.critic2_target) if target else (self.critic1, self.critic2)
        sa = torch.cat([obs, act], dim=1)
        return torch.minimum(q1(sa), q2(sa)).squeeze(1)

    def _critic_step(self, obs: torch.Tensor, act: torch.Tensor, target: torch.Tensor,
                     w: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One step of both critics on ``mean(w * (δ1² + δ2²))``; returns ``(|δ1| + |δ2|) / 2`` and metrics,
        as detached tensors (read only by :func:`~pearl_core.algorithms.common.update_result`: no host
        synchronisation here).

        The priority is the mean of the two errors: both critics train on every sample and the loss
        holds both, so a sample is worth replaying as much as it surprises the two together.
        """
        sa = torch.cat([obs, act], dim=1)
        q1 = self.critic1(sa).squeeze(1)
        q2 = self.critic2(sa).squeeze(1)
        td1, td2 = q1 - target, q2 - target
        loss = (w * (td1.square() + td2.square())).mean()
        self.critic_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self._critic_params, self.max_grad_norm, foreach=True)
        self.critic_optimizer.step()
        td = (td1.detach().abs() + td2.detach().abs()).mul_(0.5)
        return td, {"critic_loss": loss.detach(), "q_mean": q1.detach().mean()}

    def _actor_step(self, loss: torch.Tensor) -> None:
        """Adam on the actor from ``loss``; gradients for the actor only (the critics' are never needed)."""
        params = self._actor_params
        for p, g in zip(params, torch.autograd.grad(loss, params)):
            p.grad = g
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm, foreach=True)
        self.actor_optimizer.step()

    # -- checkpoints -------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Networks, optimizers, counters, the exploration stream and the learner's generator."""
        out = super().state_dict()
        out["learner_rng"] = self._gen.get_state()
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        if "learner_rng" in state:
            self._gen.set_state(state["learner_rng"])
