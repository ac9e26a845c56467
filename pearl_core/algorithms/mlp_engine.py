"""A hand-written DQN update for ReLU MLPs on the CPU: the same math as the torch path, in numpy.

The update is a dozen BLAS calls and in-place numpy element-wise work, written
into buffers kept between updates (:class:`_Workspace`), with torch's fused
Adam kernel for the optimizer step; it skips eager torch's per-op dispatch and
autograd bookkeeping. ``DQN(engine="numpy")`` runs it; ``benchmarks/learner_step.py``
measures it against the torch path and the native step.

Native step: a backend's ``learner_kernel("dqn_mlp")`` (the CPU plugin, pearl-cpu,
provides one) runs the same math as one call per update: the same BLAS products,
everything between them fused. The trainer hands its factory to
:class:`MLPDQNEngine` (``DQN(learner_kernels=...)``); this module never looks
for a backend itself. Each update it builds one :class:`~pearl_core.kernels.DQNStepArgs`
and the kernel returns one :class:`~pearl_core.kernels.DQNStepResult` (:mod:`pearl_core.kernels`).

Same math, step for step (checked against the torch path in
``tests/algorithms/test_mlp_engine.py``):

1. target: ``y = r + gamma * (1 - done) * Q_target(s')[a*]`` with ``a* = argmax
   Q_target(s')`` (or ``argmax Q(s')`` for double DQN); ``gamma ** k`` per sample for
   n-step transitions (``discount``);
2. ``q = Q(s)[a]``, ``delta = q - y``, per-sample Huber loss times the IS weight,
   averaged: ``dL/dq = clip(delta, -k, k) * w / B``;
3. backward through the layers (``ReLU'`` = activation > 0);
4. global gradient-norm clipping as ``torch.nn.utils.clip_grad_norm_`` (norm + 1e-6);
5. Adam exactly as torch's: ``m = b1 m + (1-b1) g``, ``v = b2 v + (1-b2) g^2``,
   ``p -= lr / (1-b1^t) * m / (sqrt(v) / sqrt(1-b2^t) + eps)`` — by torch's own fused CPU
   kernel (``torch._fused_adam_``, the one ``Adam(fused=True)`` calls) where this torch has it,
   else in numpy.

The parameters are numpy *views* of the torch modules' tensors, and the Adam
moments live in the torch optimizer's own state (created in its layout), so
``state_dict()``, checkpoints, ``get_weights()`` and the target-network copies of
the trainer work unchanged. A trainer whose optimizer is not plain Adam (a user
swapped it) takes the torch path. BLAS threads follow the learner's threads (the
runtime sets them from the plan, :meth:`DQN.use_threads`; else torch's intra-op count)
through threadpoolctl; a native step that runs threads of its own (a ``threads``
attribute, as the CPU backend's) gets the learner's threads and BLAS runs
single-threaded in each.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn as nn

from pearl_core.kernels import AdamHyper, ConvShape, DQNStepArgs

__all__ = ["ConvDQNEngine", "MLPDQNEngine", "conv_front", "supports"]

#: torch's fused CPU Adam kernel (private API); ``None`` -> the same rule in numpy.
_FUSED_ADAM = getattr(torch, "_fused_adam_", None)

def supports(net: nn.Module, device: torch.device) -> bool:
    """The engine can run ``net``: a CPU ``Sequential`` of float32 ``Linear`` layers with ``ReLU`` between."""
    if device.type != "cpu" or not isinstance(net, nn.Sequential) or len(net) == 0:
        return False
    mods = list(net)
    for i, m in enumerate(mods):
        want_linear = i % 2 == 0
        if want_linear and not (isinstance(m, nn.Linear) and m.bias is not None and m.weight.dtype == torch.float32):
            return False
        if not want_linear and type(m) is not nn.ReLU:
            return False
    return isinstance(mods[-1], nn.Linear)


def _layers(net: nn.Sequential) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(m.weight.detach().numpy(), m.bias.detach().numpy()) for m in net if isinstance(m, nn.Linear)]


_BLAS_THREADS: list[int] = []
_ZERO = np.float32(0.0)


def _blas_threads(n: int) -> None:
    """Pin the process's BLAS threads to ``n``; threadpoolctl is asked only when the count changes.
    An idle OpenBLAS thread spins, and must not fight the actors for a core."""
    if _BLAS_THREADS and _BLAS_THREADS[0] == n:
        return
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=n, user_api="blas")
    except Exception:  # noqa: BLE001 - without threadpoolctl numpy keeps its default; still correct
        pass
    _BLAS_THREADS[:] = [n]


class MLPDQNEngine:
    """Runs :meth:`DQN.update_policy`'s math for a trainer whose networks :func:`supports` accepts.

    Args:
        trainer: the DQN whose networks and optimizer the engine updates in place.
        native_factory: a ``"dqn_mlp"`` kernel factory (:class:`~pearl_core.kernels.DQNKernelFactory`);
            each update then runs in that kernel.
            ``None``: the numpy code of this module.
    """

    def __init__(self, trainer: Any, native_factory: Any = None):
        self.t = trainer
        self.native_factory = native_factory
        self.native = native_factory is not None  # the update runs in the native kernel
        self._kernel: Any = None  # that kernel, bound to the current arrays (see _native_kernel)
        # The kernel runs threads of its own (a ``threads`` attribute, set from torch's count): BLAS then
        # runs single-threaded in each of them.
        self._threads_itself = False
        self._kernel_threads: int | None = None  # what the kernel's ``threads`` was last set to
        #: The learner's threads as the runtime gives them (:meth:`DQN.use_threads`); ``None``: torch's count.
        self.threads: int | None = None
        # numpy views of the parameters: valid for the trainer's life (torch updates them in place:
        # load_state_dict and the target copies write into the same storage)
        self._online: list[tuple[np.ndarray, np.ndarray]] | None = None  # made at the first update
        self._target: list[tuple[np.ndarray, np.ndarray]] | None = None
        self._adam: tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]] | None = None
        self._adam_key: object = None
        self._steps: np.ndarray | None = None  # the Adam step counters (set by _adam_state)
        self._ws: _Workspace | None = None  # buffers of the last batch size (see _workspace)

    @staticmethod
    def handles(optimizer: Any) -> bool:
        """The engine implements plain Adam only; any other optimizer (or Adam option) takes the torch path."""
        if type(optimizer) is not torch.optim.Adam or len(optimizer.param_groups) != 1:
            return False
        g = optimizer.param_groups[0]
        return not (g.get("weight_decay") or g.get("amsgrad") or g.get("maximize") or g.get("decoupled_weight_decay"))

    def __deepcopy__(self, memo: dict) -> "MLPDQNEngine":
        import copy

        return MLPDQNEngine(copy.deepcopy(self.t, memo), self.native_factory)

    def __getstate__(self) -> dict:
        # The views, buffers and native kernel point into this process's tensors: a pickled
        # engine (a trainer sent to a worker) rebuilds them over the unpickled trainer.
        return {"t": self.t, "native_factory": self.native_factory}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["t"], state["native_factory"])

    # Adam moments in the torch optimizer's own state, so checkpoints keep working.
    def _adam_state(self) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
        """``(exp_avgs, exp_avg_sqs, steps)`` of the optimizer's state, created in torch's layout if absent."""
        opt = self.t.optimizer
        first = opt.state.get(self.t._params[0])
        key = first.get("exp_avg") if first else None
        if self._adam is not None and key is not None and key is self._adam_key:
            return self._adam  # the same state tensors as last time (a load_state_dict replaces them)
        for p in self.t._params:
            st = opt.state[p]
            if not st:
                st["step"] = torch.zeros((), dtype=torch.float32)
                st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        states = [opt.state[p] for p in self.t._params]
        # Every step counter becomes a 0-dim view of one array: one numpy add per update counts
        # them all (instead of one 0-dim tensor add per parameter). Each keeps its own counter.
        base = torch.tensor([float(st["step"]) for st in states], dtype=torch.float32)
        for i, st in enumerate(states):
            st["step"] = base[i]
        self._steps = base.numpy()
        self._adam = ([st["exp_avg"] for st in states], [st["exp_avg_sq"] for st in states],
                      [st["step"] for st in states])
        self._adam_key = states[0]["exp_avg"]
        return self._adam

    def _views(self) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[tuple[np.ndarray, np.ndarray]]]:
        if self._online is None or self._target is None:
            self._online, self._target = _layers(self.t.q_net), _layers(self.t.target_net)
        return self._online, self._target

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """``Q(obs, .)`` of the online network, ``(n, n_actions)`` float32 (no gradients, no torch ops).

        BLAS threads follow torch's thread count here too: an actor (1 torch thread) must not
        leave an idle OpenBLAS thread spinning on the core the learner needs.
        """
        _blas_threads(self._blas_n())
        return _forward(obs, self._views()[0])

    def _workspace(self, B: int) -> "_Workspace":
        ws = self._ws
        if ws is None or ws.B != B:
            ws = self._ws = _Workspace(self._views()[0], B)
        return ws

    def _native_kernel(self, B: int) -> Any:
        """The native step bound to the current parameters, target and Adam state (rebound when
        the optimizer state is replaced, e.g. by ``load_state_dict``, or the batch size changes)."""
        online, target = self._views()
        self._adam_state()
        k = self._kernel
        if k is None or k[0] is not self._adam_key or k[1].batch != B:
            exp_avgs, exp_avg_sqs, _ = self._adam
            shapes = [a.shape for pair in online for a in pair]  # a moment is seen as its parameter is
            kern = self._make_kernel(online, target, [m.numpy().reshape(sh) for m, sh in zip(exp_avgs, shapes)],
                                     [v.numpy().reshape(sh) for v, sh in zip(exp_avg_sqs, shapes)], B)
            k = self._kernel = (self._adam_key, kern)
            self._threads_itself = hasattr(kern, "threads")
            self._kernel_threads = None  # a new kernel: its threads are set below
        kern = k[1]
        if self._threads_itself:  # the kernel runs the learner's threads itself
            n = self.learner_threads()
            if self._kernel_threads != n:
                kern.threads = self._kernel_threads = n
        return kern

    def _make_kernel(self, online: list, target: list, exp_avgs: list, exp_avg_sqs: list, B: int) -> Any:
        return self.native_factory(online, target, exp_avgs, exp_avg_sqs, self._steps, B)

    def learner_threads(self) -> int:
        """The learner's threads: :attr:`threads` where the runtime set it (``DQN.use_threads``), else
        torch's intra-op count."""
        return max(1, int(self.threads or torch.get_num_threads()))

    def _blas_n(self) -> int:
        # a native step that runs its own threads calls BLAS single-threaded from each of them
        return 1 if self._threads_itself else self.learner_threads()

    def update(self, obs: np.ndarray, act: np.ndarray, rew: np.ndarray, next_obs: np.ndarray, done: np.ndarray,
               w: np.ndarray, discount: np.ndarray | None = None) -> tuple[np.ndarray, float, float]:
        """One step; returns ``(|delta| per sample (float32), loss, mean q)``.

        ``discount``: per-sample ``float32`` factors of the bootstrap term (``gamma ** k`` of n-step
        transitions) in place of ``gamma``; ``None`` keeps the scalar-``gamma`` path."""
        if self.native:
            t = self.t
            kern = self._native_kernel(obs.shape[0])
            _blas_threads(self._blas_n())
            r = kern.step(DQNStepArgs(obs, act, rew, next_obs, done, w, t.gamma, t.huber_delta, t.max_grad_norm or 0.0,
                                      t.double_dqn, AdamHyper.from_optimizer(t.optimizer), discount))
            return r.td, r.loss, r.q_mean
        return self._update_numpy(obs, act, rew, next_obs, done, w, discount)

    def _update_numpy(self, obs: np.ndarray, act: np.ndarray, rew: np.ndarray, next_obs: np.ndarray,
                      done: np.ndarray, w: np.ndarray, discount: np.ndarray | None) -> tuple[np.ndarray, float, float]:
        t = self.t
        _blas_threads(self._blas_n())
        online, target = self._views()
        last = len(online) - 1
        B = obs.shape[0]
        ws = self._workspace(B)
        rows, h, grads = ws.rows, ws.h, ws.grads

        # 1. targets
        q_next_all = _forward(next_obs, target, ws.ht)
        if t.double_dqn:
            a_star = _forward(next_obs, online).argmax(axis=1)
            y = q_next_all[rows, a_star]
        else:
            y = q_next_all.max(axis=1)
        y[done] = 0.0  # y = r + gamma * (1 - done) * q_next, in place (gamma ** k per sample: n-step)
        y *= np.float32(t.gamma) if discount is None else discount
        y += rew

        # 2. online forward; h[i] keeps layer i's output (the input of layer i + 1)
        x = _forward(obs, online, h)
        q = x[rows, act]
        delta = q - y
        ad = np.abs(delta)
        c = np.minimum(ad, np.float32(t.huber_delta))  # |clip(delta, -k, k)|
        # Huber per sample = c * (|delta| - c / 2): 0.5 delta^2 inside k, k (|delta| - k / 2) outside
        loss = float(np.dot(c * (ad - np.float32(0.5) * c), w)) / B

        # 3. backward, every gradient written into one flat buffer (ws.flat)
        dq = np.copysign(c, delta)  # dHuber/ddelta = clip(delta, -k, k); times w / B for the weighted mean
        dq *= w
        dq *= np.float32(1.0 / B)
        g = ws.g[last]
        g.fill(0.0)
        g[rows, act] = dq
        for i in range(last, -1, -1):
            inp = h[i - 1] if i else obs
            np.matmul(g.T, inp, out=grads[2 * i])
            np.dot(ws.ones, g, out=grads[2 * i + 1])  # the bias gradient: column sums, as one BLAS call
            if i:
                gp = ws.g[i - 1]
                np.matmul(g, online[i][0], out=gp)
                np.greater(inp, _ZERO, out=ws.mask[i - 1])  # ReLU' from the layer's output
                gp *= ws.mask[i - 1]
                g = gp

        # 4. clip the global norm (torch's clip_grad_norm_: coef = max / (norm + 1e-6), clamped to 1)
        if t.max_grad_norm is not None:
            norm = float(np.sqrt(np.dot(ws.flat, ws.flat)))
            coef = t.max_grad_norm / (norm + 1e-6)
            if coef < 1.0:
                ws.flat *= np.float32(coef)

        # 5. Adam (torch's update rule and state layout)
        opt = t.optimizer
        group = opt.param_groups[0]
        lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
        exp_avgs, exp_avg_sqs, steps = self._adam_state()
        self._steps += 1  # every parameter's step counter (views of this array, see _adam_state)
        if _FUSED_ADAM is not None:
            # torch's own fused CPU kernel, called as its optimizer calls it (steps first, then one
            # call over every tensor); the numpy branch below is the same rule.
            with torch.no_grad():
                _FUSED_ADAM(t._params, ws.grads_t, exp_avgs, exp_avg_sqs, [], steps,
                            amsgrad=False, lr=float(lr), beta1=float(b1), beta2=float(b2), weight_decay=0.0,
                            eps=float(eps), maximize=False)
        else:
            params = [a for pair in online for a in pair]
            for p, gr, m_t, v_t, step in zip(params, grads, exp_avgs, exp_avg_sqs, steps):
                m, v, s = m_t.numpy(), v_t.numpy(), float(step)
                m *= np.float32(b1)
                m += np.float32(1 - b1) * gr
                v *= np.float32(b2)
                gr *= gr
                v += np.float32(1 - b2) * gr
                bc1, bc2_sqrt = 1 - b1 ** s, (1 - b2 ** s) ** 0.5
                denom = np.sqrt(v)
                denom /= np.float32(bc2_sqrt)
                denom += np.float32(eps)
                np.divide(m, denom, out=denom)
                denom *= np.float32(lr / bc1)
                p -= denom
        return ad, loss, float(q.sum()) / B


def conv_front(trainer: Any) -> tuple[int, int, int, int, int] | None:
    """``(C, H, W, kernel, stride)`` when ``trainer.q_net`` is one unpadded ``Conv2d``, ReLU and a flatten
    (the small image encoder of :mod:`pearl_core.algorithms.cnn`) before a head :func:`supports` takes, on
    channels-first images on the CPU; else ``None`` (the torch path)."""
    image, net = getattr(trainer, "_image", None), trainer.q_net
    if image is None or image.channels_last or trainer.device.type != "cpu":
        return None
    if not (isinstance(net, nn.Sequential) and len(net) == 2 and isinstance(net[0], nn.Sequential)
            and len(net[0]) == 3):
        return None
    conv, relu, flat = net[0]
    c, h, w = image.chw
    ok = (type(conv) is nn.Conv2d and conv.bias is not None and conv.weight.dtype == torch.float32
          and conv.in_channels == c and conv.groups == 1 and conv.dilation == (1, 1)
          and conv.padding in ((0, 0), "valid") and conv.kernel_size[0] == conv.kernel_size[1]
          and conv.stride[0] == conv.stride[1] and type(relu) is nn.ReLU and type(flat) is nn.Flatten
          and flat.start_dim == 1 and flat.end_dim == -1 and supports(net[1], trainer.device))
    return (c, h, w, conv.kernel_size[0], conv.stride[0]) if ok else None


class ConvDQNEngine(MLPDQNEngine):
    """The native DQN step of a ``"dqn_cnn"`` kernel, for a network :func:`conv_front` takes.

    Layer 0 is the convolution, its weight (and Adam moments) seen 2-D ``(out, C * k * k)``; the
    kernel runs the rest as :class:`MLPDQNEngine`'s native step does. Native only: without the
    kernel the trainer keeps its torch path (there is no numpy convolution here).

    Args:
        trainer: the DQN whose networks and optimizer the engine updates in place.
        native_factory: the ``"dqn_cnn"`` kernel factory (:class:`~pearl_core.kernels.DQNConvKernelFactory`).
        conv: what :func:`conv_front` returned for the trainer.
    """

    def __init__(self, trainer: Any, native_factory: Any, conv: tuple[int, int, int, int, int]):
        super().__init__(trainer, native_factory)  # reads nothing of the trainer: a deepcopy may be half-built
        self.conv = tuple(int(v) for v in conv)

    @property
    def _scale(self) -> np.float32:
        """The network's input scale (``1 / high`` for ``uint8`` frames, 1 for 0/1 grids)."""
        return np.float32(self.t._image.scale)

    def __deepcopy__(self, memo: dict) -> "ConvDQNEngine":
        import copy

        return ConvDQNEngine(copy.deepcopy(self.t, memo), self.native_factory, self.conv)

    def __getstate__(self) -> dict:
        return {"t": self.t, "native_factory": self.native_factory, "conv": self.conv}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["t"], state["native_factory"], state["conv"])

    def _views(self) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[tuple[np.ndarray, np.ndarray]]]:
        if self._online is None or self._target is None:
            def layers(net: nn.Sequential) -> list[tuple[np.ndarray, np.ndarray]]:
                conv = net[0][0]
                w = conv.weight.detach().numpy()
                return [(w.reshape(w.shape[0], -1), conv.bias.detach().numpy()), *_layers(net[1])]

            self._online, self._target = layers(self.t.q_net), layers(self.t.target_net)
        return self._online, self._target

    def _make_kernel(self, online: list, target: list, exp_avgs: list, exp_avg_sqs: list, B: int) -> Any:
        return self.native_factory(ConvShape(*self.conv), online, target, exp_avgs, exp_avg_sqs, self._steps, B)

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """``Q(obs, .)`` of the online network from flattened observations (the torch forward)."""
        x = torch.from_numpy(np.ascontiguousarray(obs, dtype=np.float32)).reshape(-1, *self.conv[:3])
        with torch.inference_mode():
            return self.t.q_net(x * float(self._scale) if self._scale != 1 else x).numpy()

    def update(self, obs: np.ndarray, act: np.ndarray, rew: np.ndarray, next_obs: np.ndarray, done: np.ndarray,
               w: np.ndarray, discount: np.ndarray | None = None) -> tuple[np.ndarray, float, float]:
        if self._scale != 1:  # the network's input scale (1/255 for uint8 frames), applied once here
            obs, next_obs = obs * self._scale, next_obs * self._scale
        return super().update(obs, act, rew, next_obs, done, w, discount)


class _Workspace:
    """The buffers of one batch size, reused by every update: activations, backward signals,
    ReLU masks and the gradients, which live in one flat array (one dot product for the norm,
    one multiply for the clip). No allocation in the hot loop: a fresh 256x256 gradient per
    update costs page faults and cold cache lines."""

    def __init__(self, online: list[tuple[np.ndarray, np.ndarray]], B: int):
        self.B = B
        self.rows = np.arange(B)
        self.ones = np.ones(B, np.float32)
        widths = [W.shape[0] for W, _ in online]
        self.h = [np.empty((B, n), np.float32) for n in widths]   # online layer outputs (the last: Q)
        self.ht = [np.empty((B, n), np.float32) for n in widths]  # target layer outputs
        self.g = [np.empty((B, n), np.float32) for n in widths]   # dL/d(pre-activation) of each layer
        self.mask = [np.empty((B, n), np.bool_) for n in widths[:-1]]
        self.flat = np.zeros(sum(W.size + b.size for W, b in online), np.float32)
        self.grads: list[np.ndarray] = []  # W0, b0, W1, b1, ... as the optimizer's parameters
        off = 0
        for W, b in online:
            for p in (W, b):
                self.grads.append(self.flat[off:off + p.size].reshape(p.shape))
                off += p.size
        self.grads_t = [torch.from_numpy(g) for g in self.grads]


def _forward(x: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]],
             outs: list[np.ndarray] | None = None) -> np.ndarray:
    """``Q(x, .)`` through the ReLU layers; with ``outs``, layer ``i``'s output is written into
    ``outs[i]`` (no allocation), else fresh arrays. Returns the last layer's output."""
    last = len(layers) - 1
    for i, (W, b) in enumerate(layers):
        x = np.matmul(x, W.T, out=None if outs is None else outs[i])
        x += b
        if i < last:
            np.maximum(x, _ZERO, out=x)
    return x
