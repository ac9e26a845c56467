"""Deep Q-learning (DQN, optionally double DQN) for ``Discrete`` action spaces.

The defaults reproduce stable-baselines3's tuned CartPole-v1 DQN (rl-baselines3-zoo)
once the run config carries the matching runtime settings:

==========================  =====================================  ================================
SB3 / zoo setting            PEARL                                  where
==========================  =====================================  ================================
net_arch [256, 256], ReLU    ``hidden_sizes=(256, 256)``            DQN hparam (default)
learning_rate 2.3e-3, Adam   ``lr=2.3e-3``                          DQN hparam (default)
gamma 0.99                   ``gamma=0.99``                         DQN hparam (default)
smooth L1 loss, grad clip 10 ``huber_delta=1.0, max_grad_norm=10``  DQN hparam (default)
exploration 1 -> 0.04 over   ``eps_start=1.0, eps_final=0.04,       DQN hparam (default);
the first 16% of the run     eps_fraction=0.16``; the runtime       ``total_env_steps`` comes from
                             passes ``total_env_steps``             ``stop.max_env_steps``
target_update_interval 10    ``target_update_every=128, tau=1.0``   DQN hparam (default), see below
env steps, tau 1.0
batch_size 64                ``batch_size=64``                      RunConfig (default)
buffer_size 100k             ``replay.capacity=100_000``            ReplayConfig (default)
learning_starts 1000         ``learning_starts=1000``               RunConfig (default)
train_freq 256,              ``train_every=256,                     RunConfig (default): bursts of
gradient_steps 128           replay_ratio=0.5``                     256 * 0.5 = 128 updates
uniform replay               ``replay.kind="uniform"``              ReplayConfig (default is PER)
==========================  =====================================  ================================

Exploration: SB3 decays ε over ``exploration_fraction * total_timesteps``; the
zoo runs CartPole for ``n_timesteps = 5e4``, i.e. over 8k env steps. Here the
runtime passes ``total_env_steps = stop.max_env_steps`` unless the run config
sets it, so with a 100k budget ε would decay over 16k steps; pass
``total_env_steps=50_000`` (or ``eps_decay_steps=8_000``) to match the zoo run
exactly. Both solve CartPole; the zoo's shorter decay solves it sooner.

Target network: SB3 counts ``target_update_interval`` in *env steps* and copies
the online net into the target during collection, when the online net does not
change; so with ``train_freq=256`` every burst of 128 gradient steps starts with
the target equal to the online net and keeps it fixed for the burst. Counting in
learner updates, that is a hard copy before update 0, 128, 256, ... — which is
``target_update_every=128`` here (aligned with bursts of 128). ``tau < 1`` turns
each copy into a Polyak step ``target <- (1 - tau) target + tau online``.

Per-sample TD errors ``|Q(s, a) - y|`` with ``y = r + gamma * (1 - done) * Q'(s', a*)``
are returned for prioritized replay; the Huber loss of each sample is
multiplied by its importance weight before averaging.

Dueling heads (``dueling=True``, Wang et al. 2016): the hidden layers are shared and
end in two linear heads, a state value ``V(s)`` and advantages ``A(s, a)``, combined as
``Q(s, a) = V(s) + A(s, a) - mean_a A(s, a)`` (the mean keeps ``V`` and ``A``
identifiable); the target network has the same shape. It combines with double DQN.
Dueling networks train with the torch engine (the numpy and native engines run plain
ReLU MLPs).

Image observations (a 3-D ``Box``, e.g. ``ALE/...`` with the ``"atari"`` preset's
``(4, 84, 84)`` frames or MinAtar's ``(C, 10, 10)`` grids) get a convolutional
encoder (``encoder="auto"`` or ``"cnn"``, :mod:`pearl_core.algorithms.cnn`): the
Nature-DQN stack for images of 36x36 and larger, the MinAtar paper's one 3x3
convolution for smaller ones, then the fully connected ``hidden_sizes`` (default
512, resp. 128). Observations stay ``uint8`` in storage and are converted and
scaled on the learner's device. Convolutional networks train with the torch engine.
Values for Atari (rl-baselines3-zoo's ``atari`` DQN entry): ``lr=1e-4,
target_update_every=250`` (the zoo's copy every 1000 env steps, counted here in updates
at one update per 4 env steps), ``eps_final=0.01, eps_fraction=0.1``, batch 32,
``replay_ratio=0.25`` (train_freq 4), buffer 100k, learning_starts 100k.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pearl_core.algorithms.cnn import ImageInput, conv_encoder, default_head
from pearl_core.algorithms.common import (CountedTrainer, adam, batch_tensor, bootstrap_discount, check_hidden,
                                          check_positive, check_unit, hard_update, host_array, host_discounts, mlp,
                                          polyak_update, update_result)
from pearl_core.errors import InvalidValueError, KernelUnavailableError, SpecError
from pearl_core.replay.storage import TRANSITION_FIELDS
from pearl_core.trainer import GraphHooks, UpdateResult, is_device_batch

__all__ = ["DQN", "DuelingQNet"]

ENGINES = ("auto", "native", "numpy", "torch")


class DuelingQNet(nn.Module):
    """Shared ReLU hidden layers, then a value head and an advantage head: ``Q = V + A - mean(A)``."""

    def __init__(self, in_features: int, hidden: Sequence[int], n_actions: int):
        super().__init__()
        self.trunk = nn.Sequential(*mlp(in_features, hidden[:-1], hidden[-1]), nn.ReLU())
        self.value = nn.Linear(hidden[-1], 1)
        self.advantage = nn.Linear(hidden[-1], n_actions)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.trunk(x)
        a = self.advantage(h)
        return self.value(h) + a - a.mean(dim=1, keepdim=True)


class DQN(CountedTrainer):
    """DQN with a target network, optional double-DQN targets and an ε-greedy schedule.

    Args:
        observation_space: a ``Box`` (flattened into an MLP, or an image into a CNN: ``encoder``).
        action_space: a ``Discrete`` space.
        hidden_sizes: hidden layer sizes of the MLP, or of the fully connected head after a
            convolutional encoder (``None``: 256-256 for an MLP, 512 after the Nature-DQN
            encoder, 128 after the small one).
        encoder: ``"auto"`` (a CNN for 3-D observations, else an MLP), ``"mlp"`` or ``"cnn"``.
        lr: Adam learning rate.
        adam_eps: Adam epsilon.
        gamma: discount factor in ``[0, 1]``.
        double_dqn: pick ``a*`` with the online net and evaluate it with the target
            net (van Hasselt et al.); ``False`` uses ``max_a Q_target(s', a)``.
        dueling: dueling heads (value and advantage streams, :class:`DuelingQNet`)
            after the hidden layers; trains with the torch engine.
        huber_delta: Huber (smooth L1) threshold.
        max_grad_norm: clip the global gradient norm to this (``None``: no clipping).
        target_update_every: learner updates between target updates.
        tau: target update rate; ``1.0`` is a hard copy.
        eps_start, eps_final: ε at env step 0 and after the decay.
        eps_fraction: decay over ``eps_fraction * total_env_steps`` env steps ...
        eps_decay_steps: ... unless this is given (env steps).
        total_env_steps: length of the run in env steps (the runtime passes
            ``stop.max_env_steps``).
        seed: seeds the ε-greedy random stream (network init follows torch's global seed).
        device: torch device of the networks.
        engine: how :meth:`update_policy` computes: ``"torch"`` (autograd and
            torch's Adam), ``"numpy"`` (the same math hand-written over BLAS,
            :mod:`pearl_core.algorithms.mlp_engine`), ``"native"`` (that math as
            one call into the ``"dqn_mlp"`` kernel from ``learner_kernels``; for the
            small image encoder, one conv layer, the ``"dqn_cnn"`` kernel) or
            ``"auto"`` (native when ``learner_kernels`` gives the kernel, else
            numpy, for a ReLU MLP on the CPU; native for the small image encoder
            when given ``"dqn_cnn"``; torch otherwise).
        learner_kernels: ``name -> kernel factory or None``, where native
            learner steps come from; the runtime passes
            ``pearl_core.plugins.kernel_lookup(<learner device>)``. ``None``: no
            native step (``engine="auto"`` then runs the numpy engine).

    Exploration reads :attr:`env_steps`, which the runtime sets before each
    ``get_action``: ``ε = eps_start + (eps_final - eps_start) * min(1, env_steps / decay_steps)``.
    """

    action_kind = "discrete"
    acting_net = "q_net"
    supports_n_step = True  # the target bootstraps with gamma ** batch.steps (bootstrap_discount)
    #: Tensor batches on :attr:`device` (MLP or image observations): the torch path reads them where they
    #: are and returns its TD errors and metrics there; the CPU engines view CPU tensors as numpy arrays.
    device_batches = True
    #: Learner kernels this trainer can run (:meth:`pearl_core.backend.Backend.learner_kernel`): a
    #: backend whose device runs no torch can still host the learner if it offers one of them.
    learner_kernel_names = ("dqn_mlp", "dqn_cnn")

    def __init__(
        self,
        observation_space,
        action_space,
        *,
        hidden_sizes: Sequence[int] | None = None,
        encoder: str = "auto",
        lr: float = 2.3e-3,
        adam_eps: float = 1e-8,
        gamma: float = 0.99,
        double_dqn: bool = False,
        dueling: bool = False,
        huber_delta: float = 1.0,
        max_grad_norm: float | None = 10.0,
        target_update_every: int = 128,
        tau: float = 1.0,
        eps_start: float = 1.0,
        eps_final: float = 0.04,
        eps_fraction: float = 0.16,
        eps_decay_steps: int | None = None,
        total_env_steps: int = 100_000,
        seed: int | None = None,
        device: str = "cpu",
        engine: str = "auto",
        learner_kernels: Callable[[str], Any | None] | None = None,
    ):
        import gymnasium.spaces as spaces

        o = "DQN"
        if not isinstance(action_space, spaces.Discrete):
            raise SpecError(
                f"DQN needs a Discrete action space; found {action_space}. "
                "Fix: use SAC, TD3 or DDPG for Box action spaces."
            )
        if not isinstance(observation_space, spaces.Box):
            raise SpecError(f"DQN needs a Box observation space; found {observation_space}.")
        self.input_shape = tuple(int(d) for d in observation_space.shape)
        self.n_actions = int(action_space.n)
        self.action_start = int(action_space.start)
        if encoder not in ("auto", "mlp", "cnn"):
            raise SpecError(f"DQN: encoder = {encoder!r}; expected 'auto', 'mlp' or 'cnn'.")
        self.encoder = ("cnn" if len(self.input_shape) == 3 else "mlp") if encoder == "auto" else encoder
        self._image = ImageInput(observation_space, o) if self.encoder == "cnn" else None
        conv_kind = None
        if self._image is not None:
            #: the (C, H, W) shape the network sees (the composer's workload model reads it)
            self.image_shape = self._image.chw
            conv_kind = conv_encoder(self.image_shape)[2]
        self.hidden_sizes = check_hidden(
            hidden_sizes if hidden_sizes is not None else (default_head(conv_kind) if conv_kind else (256, 256)), o)
        self.gamma = check_unit(gamma, o, "gamma")
        self.tau = check_unit(tau, o, "tau", open_low=True)
        self.eps_start = check_unit(eps_start, o, "eps_start")
        self.eps_final = check_unit(eps_final, o, "eps_final")
        self.eps_fraction = check_unit(eps_fraction, o, "eps_fraction")
        self.huber_delta = check_positive(huber_delta, o, "huber_delta")
        self.max_grad_norm = check_positive(max_grad_norm, o, "max_grad_norm", allow_none=True)
        self.target_update_every = check_positive(target_update_every, o, "target_update_every", integer=True)
        self.total_env_steps = check_positive(total_env_steps, o, "total_env_steps", integer=True)
        eps_decay_steps = check_positive(eps_decay_steps, o, "eps_decay_steps", allow_none=True, integer=True)
        self.eps_decay_steps = (
            eps_decay_steps if eps_decay_steps is not None else max(1, int(self.eps_fraction * self.total_env_steps))
        )
        self.double_dqn = bool(double_dqn)
        self.dueling = bool(dueling)
        self.device = torch.device(device)

        self.q_net = self._network().to(self.device)
        self.target_net = self._network().to(self.device)
        hard_update(self.target_net, self.q_net)
        self.target_net.requires_grad_(False)
        self.optimizer = adam(self.q_net.parameters(), check_positive(lr, o, "lr"), adam_eps)
        self._params = list(self.q_net.parameters())
        self.engine, self._engine = _choose_engine(self, engine, learner_kernels, device)
        self._target_params = list(self.target_net.parameters())
        self._rng = np.random.default_rng(seed)
        self.updates = 0
        self.env_steps = 0

    def _network(self) -> nn.Module:
        """The Q-network: an MLP over the flattened observation, or a convolutional encoder and an MLP head."""
        head = DuelingQNet if self.dueling else mlp
        if self._image is None:
            return head(int(np.prod(self.input_shape)), self.hidden_sizes, self.n_actions)
        encoder, features, _ = conv_encoder(self.image_shape)
        return nn.Sequential(encoder, head(features, self.hidden_sizes, self.n_actions))

    def _as_input(self, obs) -> torch.Tensor:
        """The network's input: ``(n, features)`` for an MLP, ``(n, C, H, W)`` scaled for a CNN."""
        if self._image is not None:
            return self._image.tensor(obs, self.device)
        return super()._as_input(obs)

    # -- acting ------------------------------------------------------------------
    @property
    def epsilon(self) -> float:
        """ε at the current :attr:`env_steps`."""
        frac = min(1.0, self.env_steps / self.eps_decay_steps)
        return self.eps_start + frac * (self.eps_final - self.eps_start)

    def _greedy(self, obs: np.ndarray) -> np.ndarray:
        if self._engine is not None:  # the numpy engine's forward: no torch dispatch for an actor's few rows
            return self._engine.q_values(_flat32(obs)).argmax(axis=1)
        with torch.inference_mode():
            q = self.q_net(self._as_input(obs))
            return q.argmax(dim=1).cpu().numpy()

    def get_action(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        """ε-greedy (``explore``) or greedy actions, ``(n,)`` ``int64``."""
        obs = np.asarray(obs)
        n = obs.shape[0]
        if not explore:
            return self._greedy(obs).astype(np.int64) + self.action_start
        eps = self.epsilon
        explore_mask = self._rng.random(n) < eps
        random_actions = self._rng.integers(0, self.n_actions, size=n, dtype=np.int64)
        if explore_mask.all():  # no forward pass when every action is random
            actions = random_actions
        else:
            actions = np.where(explore_mask, random_actions, self._greedy(obs))
        return actions.astype(np.int64, copy=False) + self.action_start

    # -- learning ----------------------------------------------------------------
    def learner_passes(self) -> dict[str, tuple[float, float, float]]:
        """The online net: one forward pass on ``s`` (and one on ``s'`` for double DQN) and one
        backward pass; the target net: one forward pass on ``s'`` (the default)."""
        return {"q_net": (2.0 if self.double_dqn else 1.0, 1.0, 1.0)}

    def device_batch_slot(self, storage, batch_size: int) -> dict[str, Any] | None:
        """Destinations on this DQN's torch device for batches sampled from ``storage``, or ``None``.

        The runtime's learner step asks for it where the trainer and the replay share a process
        (serial, setting 2) and samples into what it returns
        (:class:`~pearl_core.runtime.step.LearnerStep`). ``None`` (host batches, as before) unless the
        networks are off the CPU (the torch engine) and the storage offers destinations there: an
        optional ``storage.device_out(batch_size, torch_device)`` returning one tensor per transition
        field on that device, or ``None`` (the host :class:`~pearl_core.replay.storage.DataStorage`
        has no such method). The slot is that mapping plus a host ``float32`` ``"weights"`` array;
        :meth:`update_policy` reads the tensors where they are (no copy).

        Raises:
            InvalidValueError: ``device_out`` returned a mapping without every transition field.
        """
        if self.device.type == "cpu" or self._engine is not None:
            return None
        make = getattr(storage, "device_out", None)
        if not callable(make):
            return None
        out = make(int(batch_size), self.device)
        if out is None:
            return None
        missing = [name for name in TRANSITION_FIELDS if name not in out]
        if missing:
            raise InvalidValueError(
                f"DQN.device_batch_slot: {type(storage).__name__}.device_out({int(batch_size)}, {self.device}) "
                f"returned no {missing}; expected one destination per transition field {list(TRANSITION_FIELDS)}. "
                "Fix: return every field, or None (host batches).")
        slot = dict(out)
        slot["weights"] = np.empty(int(batch_size), np.float32)
        return slot

    def _batch_input(self, obs) -> torch.Tensor:
        """The network's input on :attr:`device`: ``(n, features)`` float32 for an MLP, a tensor reshaped and
        converted on its device (no copy when it is float32 there already); ``(n, C, H, W)`` scaled float32
        for a CNN, a ``uint8`` tensor converted and scaled on its device (:meth:`ImageInput.tensor`); host
        arrays go as before."""
        return self._as_input(obs)

    def _batch_field(self, values, dtype: torch.dtype, np_dtype) -> torch.Tensor:
        """One batch field as ``dtype`` on :attr:`device` (a tensor already there and of that dtype: itself)."""
        return batch_tensor(values, self.device, dtype, np_dtype)

    @property
    def threads_yield(self) -> bool:  # type: ignore[override]
        """With the native step: its helper thread is help-first (``pearl_cpu``'s ``csrc/dqn_mlp.cpp``)."""
        return self._engine is not None and self._engine.native

    def use_threads(self, n: int) -> None:
        """The plan's learner threads. With the native step they are its own (the CPU backend's runs
        a help-first helper thread next to the caller), and torch's pool stays at one thread, so no
        OpenMP thread spins against the actors between updates; otherwise torch's intra-op threads."""
        eng = self._engine
        if eng is not None and eng.native and eng.handles(self.optimizer):
            eng.threads = int(n)
            torch.set_num_threads(1)
        else:
            super().use_threads(n)

    def update_policy(self, batch, weights: np.ndarray) -> UpdateResult:
        """One Adam step on the importance-weighted Huber loss; returns ``|δ|`` per sample.

        ``batch`` holds numpy arrays, or torch tensors on :attr:`device` (a device batch,
        :attr:`~pearl_core.trainer.Trainer.device_batches`, e.g. from :meth:`device_batch_slot`): the torch
        engine reads them where they are and returns ``|δ|`` and the metrics as tensors there, with no host
        synchronisation, the same values as the same batch in numpy arrays gives."""
        device_batch = is_device_batch(batch)
        self._sync_target()
        if self._engine is not None and self._engine.handles(self.optimizer):
            return self._update_numpy(batch, weights, device_batch)
        result = self._torch_update(batch, weights, device_batch)
        self.updates += 1
        return result

    def _sync_target(self) -> None:
        """The target network's update, due before every ``target_update_every``-th update."""
        if self.updates % self.target_update_every == 0:
            if self.tau >= 1.0:
                hard_update(self.target_net, self.q_net)
            else:
                polyak_update(self._target_params, self._params, self.tau)

    def _advance(self, count: int) -> None:
        self.updates += int(count)

    def graph_hooks(self) -> GraphHooks | None:
        """The torch engine's update as :class:`~pearl_core.trainer.GraphHooks`: the loss and the Adam step
        in the graph, the target network's copy before the launch that starts at its update (``None`` while
        the numpy/native engine runs the update)."""
        if self._engine is not None and self._engine.handles(self.optimizer):
            return None
        return GraphHooks(update=lambda batch, weights: self._torch_update(batch, weights, True),
                          before=self._sync_target, advance=self._advance, period=self.target_update_every,
                          optimizers=(self.optimizer,))

    def _torch_update(self, batch, weights, device_batch: bool) -> UpdateResult:
        """One update in torch, without the target network's update and the counter (the graph's part)."""
        obs = self._batch_input(batch.obs)
        next_obs = self._batch_input(batch.next_obs)
        act = self._batch_field(batch.action, torch.int64, np.int64).reshape(-1)
        if self.action_start:
            act = act - self.action_start  # a new tensor: a device batch's buffers are never written here
        rew = self._batch_field(batch.reward, torch.float32, np.float32)
        done = self._batch_field(batch.done, torch.bool, np.bool_)
        w = self._batch_field(weights, torch.float32, np.float32)

        with torch.no_grad():
            q_next_all = self.target_net(next_obs)
            if self.double_dqn:
                a_star = self.q_net(next_obs).argmax(dim=1, keepdim=True)
                q_next = q_next_all.gather(1, a_star).squeeze(1)
            else:
                q_next = q_next_all.max(dim=1).values
            target = torch.where(done, rew, rew + bootstrap_discount(batch, self.gamma, self.device) * q_next)
        q = self.q_net(obs).gather(1, act.unsqueeze(1)).squeeze(1)
        per_sample = F.huber_loss(q, target, reduction="none", delta=self.huber_delta)
        loss = (per_sample * w).mean()

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self._params, self.max_grad_norm, foreach=True)
        self.optimizer.step()

        td = (q.detach() - target).abs_()
        return update_result(td, {"loss": loss, "q_mean": q.detach().mean()}, device_batch)

    def _update_numpy(self, batch, weights: np.ndarray, device_batch: bool) -> UpdateResult:
        """The numpy/native engine's step (CPU only): a device batch's CPU tensors are read as the arrays
        they view, and its TD errors come back as a tensor viewing the engine's array (float metrics: on
        the CPU reading them costs no synchronisation)."""
        act = _vec(batch.action, np.int64)
        if self.action_start:
            act = act - self.action_start
        td, loss, q_mean = self._engine.update(  # type: ignore[union-attr]
            _flat32(batch.obs), act, _vec(batch.reward, np.float32), _flat32(batch.next_obs),
            _vec(batch.done, np.bool_), _vec(weights, np.float32), host_discounts(batch, self.gamma))
        self.updates += 1
        return UpdateResult(td_errors=torch.from_numpy(td) if device_batch else td,
                            metrics={"loss": loss, "q_mean": q_mean})



def _choose_engine(trainer: DQN, engine: str, learner_kernels: Any, device: str) -> tuple[str, Any]:
    """``(engine name, MLPDQNEngine or None)`` for ``DQN(engine=...)``; see the class docstring."""
    from pearl_core.algorithms.mlp_engine import ConvDQNEngine, MLPDQNEngine, conv_front, supports

    if engine not in ENGINES:
        raise SpecError(f"DQN: engine = {engine!r}; expected 'auto', 'native', 'numpy' or 'torch'.")
    if learner_kernels is not None and not callable(learner_kernels):
        raise SpecError(f"DQN: learner_kernels = {learner_kernels!r}; expected a function name -> kernel factory "
                        "or None, e.g. pearl_core.plugins.kernel_lookup('cpu').")
    conv = conv_front(trainer) if learner_kernels is not None and engine in ("auto", "native") else None
    cnn_kernel = learner_kernels("dqn_cnn") if conv is not None else None
    if cnn_kernel is not None:  # the small image encoder's native step (a backend's "dqn_cnn")
        return "native", ConvDQNEngine(trainer, cnn_kernel, conv)
    fits = supports(trainer.q_net, trainer.device)
    if engine in ("numpy", "native") and not fits:
        what = ("a convolutional encoder" if trainer._image is not None else
                "dueling heads" if trainer.dueling else f"device={device!r}")
        also = (" or, for native, the small image encoder with a 'dqn_cnn' kernel from learner_kernels"
                if engine == "native" else "")
        raise SpecError(f"DQN: engine={engine!r} needs a ReLU MLP on the CPU{also} (found {what}). "
                        "Fix: engine='torch' or 'auto'.")
    wants_native = learner_kernels is not None and fits and engine in ("auto", "native")
    native = learner_kernels("dqn_mlp") if wants_native else None
    if engine == "native" and native is None:
        found = "none was given (learner_kernels=None)" if learner_kernels is None else \
            f"{learner_kernels!r} has none"
        raise KernelUnavailableError(
            f"DQN: engine='native' needs the native 'dqn_mlp' learner kernel, and {found}. Fix: build the trainer "
            "through the runtime (it passes the learner device's kernels), or install pearl-cpu "
            "(pip install ./plugins/pearl_cpu) and pass learner_kernels=pearl_core.plugins.kernel_lookup('cpu'), "
            "or use engine='auto' (it falls back to the numpy engine).")
    if not fits or engine == "torch":
        return "torch", None
    name = engine if engine != "auto" else ("native" if native is not None else "numpy")
    return name, MLPDQNEngine(trainer, native if name == "native" else None)


def _flat32(obs) -> np.ndarray:
    """``(n, *shape)`` observations (an array or a CPU tensor) as one contiguous ``(n, features)`` float32
    block (the MLP's input)."""
    arr = host_array(obs)
    return np.ascontiguousarray(arr.reshape(arr.shape[0], -1), dtype=np.float32)


def _vec(values, dtype) -> np.ndarray:
    """A contiguous 1-D array of ``dtype`` (no copy when it already is one, or a CPU tensor viewing one): the
    engines' per-sample input."""
    return np.ascontiguousarray(np.asarray(host_array(values), dtype=dtype).reshape(-1))
