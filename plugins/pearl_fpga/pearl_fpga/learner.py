"""The MLP learner pipeline (``kernels/learner.cl``) and a DQN trainer that trains through it.

:class:`MLPPipeline` runs an ``nn.Linear``/ReLU stack as the paper's learner
pipeline: forward stages per layer, a loss stage, backward (BW) and weight
gradient (WA) stages per layer in reverse, a reduction of the ``dp`` pipelines'
gradient accumulators, gradient clipping and the weight update (Adam or SGD).
``dp`` is the number of parallel pipelines (global dimension 0 of every stage),
``uf`` the per-stage unroll (``-DUF``); the analytic model
(:func:`pearl_fpga.model.learner_design`) says which values an FPGA would fit.

:class:`pearl_fpga.dqn.FpgaDQN` is the DQN trainer that trains through it.
This module imports no torch (the oclgrind/pocl checks run it without).

All of it is functional emulation on the OpenCL device chosen by
:mod:`pearl_fpga.runtime`; its timings are not FPGA timings.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from pearl_core.errors import InvalidValueError, SpecError

from pearl_fpga.runtime import Runtime, kernel_source

__all__ = ["MLPPipeline", "linear_relu_dims", "stage_unrolls"]

F32 = np.float32


def linear_relu_dims(module) -> list[int]:
    """``[in, h1, ..., out]`` of an ``nn.Sequential`` of ``Linear, ReLU, ..., Linear``, or raise SpecError."""
    import torch.nn as nn

    mods = list(module.children()) if isinstance(module, nn.Sequential) else [module]
    dims: list[int] = []
    for k, m in enumerate(mods):
        want_linear = k % 2 == 0
        if want_linear and isinstance(m, nn.Linear) and m.bias is not None:
            if dims and dims[-1] != m.in_features:
                raise SpecError(f"layer {k} takes {m.in_features} inputs; the previous layer gives {dims[-1]}.")
            dims = dims or [m.in_features]
            dims.append(m.out_features)
        elif not want_linear and isinstance(m, nn.ReLU):
            continue
        else:
            raise SpecError(
                f"the FPGA learner pipeline maps Linear(bias=True) -> ReLU -> ... -> Linear stacks; module {k} "
                f"is {type(m).__name__}. Fix: use the CPU or CUDA learner for this network."
            )
    if len(dims) < 2 or not isinstance(mods[-1], nn.Linear):
        raise SpecError("the FPGA learner pipeline needs a stack that ends with nn.Linear.")
    return dims


KERNELS = ("fw_linear", "dqn_loss", "bw_linear", "wa_linear", "grad_reduce", "sqnorm_partial", "clip_coef",
           "adam_step", "sgd_step", "polyak")
STAGE_KERNEL = {"FW": "fw_linear", "BW": "bw_linear", "WA": "wa_linear"}


def unrolled_source(unrolls) -> str:
    """``learner.cl`` once per unroll ``u``, its kernels renamed ``<name>_uf<u>`` and built with ``UF = u``."""
    body = kernel_source("learner.cl")
    parts = []
    for u in unrolls:
        names = "".join(f"#define {k} {k}_uf{int(u)}\n" for k in KERNELS)
        undefs = "".join(f"#undef {k}\n" for k in KERNELS)
        parts.append(f"#define UF {int(u)}\n{names}{body}\n{undefs}#undef UF\n")
    return "\n".join(parts)


def stage_unrolls(uf, layers: int) -> dict[tuple[str, int], int]:
    """``{("FW"|"BW"|"WA", layer): unroll}`` from one int, or from per-stage values (a sequence or a plan's
    comma-separated ``learner_uf`` string) in the analytic model's stage order
    (:func:`pearl_fpga.model.learner_stages`): ``FW`` of each layer, then from the last layer to the first
    its ``BW`` (not the first layer's) and ``WA`` — ``3 * layers - 1`` values — or, for a DQN workload
    that also lists the target network, ``FW`` of its layers after the online ones (``4 * layers - 1``
    values; the target's forward runs on the same FW stages, so each gets the larger unroll)."""
    back = []
    for k in reversed(range(layers)):
        back += ([("BW", k)] if k > 0 else []) + [("WA", k)]
    values = [v.strip() for v in uf.split(",")] if isinstance(uf, str) else uf
    if isinstance(values, (list, tuple)):
        try:
            values = [int(v) for v in values]
        except (TypeError, ValueError):
            values = None
    if not isinstance(values, bool) and isinstance(values, int):
        values = [values] * (3 * layers - 1)
    if isinstance(values, list) and len(values) == 4 * layers - 1:
        values = [max(a, b) for a, b in zip(values[:layers], values[layers:2 * layers])] + values[2 * layers:]
    if not isinstance(values, list) or len(values) != 3 * layers - 1 or min(values, default=0) < 1:
        order = [f"FW {k}" for k in range(layers)] + [f"{s} {k}" for s, k in back]
        raise InvalidValueError(
            f"MLPPipeline uf = {uf!r}; expected an integer >= 1, or {3 * layers - 1} of them (one per stage: "
            f"{', '.join(order)}; or {4 * layers - 1} with the target network's FW stages). Fix: pass the "
            "plan's learner_uf for this network.")
    return dict(zip([("FW", k) for k in range(layers)] + back, values))


class MLPPipeline:
    """Forward, loss, backward and weight update of a ReLU MLP as OpenCL pipeline stages.

    Args:
        dims: ``[in, hidden..., out]`` (ReLU after every layer but the last).
        dp: parallel pipelines (each keeps its own gradient accumulators).
        uf: per-stage unroll factor (compile-time ``-DUF``): one int for every
            stage, or one per stage in the analytic model's order
            (:func:`pearl_fpga.model.learner_stages`: ``FW`` of each layer, then
            from the last layer to the first its ``BW`` (not the first layer's)
            and ``WA``), i.e. ``3 * layers - 1`` values, as a plan's
            ``learner_uf`` gives them.
        runtime: OpenCL runtime (default: :meth:`pearl_fpga.runtime.DpctlRuntime.default`).
    """

    NORM_CHUNK = 256

    def __init__(self, dims: Sequence[int], *, dp: int = 1, uf: int = 1, runtime: Runtime | None = None):
        dims = [int(d) for d in dims]
        if len(dims) < 2 or min(dims) < 1:
            raise InvalidValueError(f"MLP dims must be >= 2 positive sizes; found {dims}.")
        if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
            raise InvalidValueError(f"MLPPipeline dp must be an integer >= 1; found {dp!r}.")
        stage_uf = stage_unrolls(uf, len(dims) - 1)
        if runtime is None:
            from pearl_fpga.runtime import DpctlRuntime

            runtime = DpctlRuntime.default()
        self.rt, self.dims, self.dp, self.uf = runtime, dims, dp, uf
        self.offsets: list[int] = []
        n = 0
        for a, b in zip(dims, dims[1:]):
            self.offsets.append(n)
            n += a * b + b
        self.n_params = n
        self.stage_uf = stage_uf
        # Each layer stage is built with its own unroll, as the plan's design gives it one: one program
        # holds a copy of the kernels per distinct unroll (one build, not one per value).
        src, unrolls = unrolled_source(sorted(set(stage_uf.values()))), max(stage_uf.values())
        self.k = {name: runtime.kernel(src, f"{name}_uf{unrolls}") for name in KERNELS}
        self.k_stage = {(st, k): runtime.kernel(src, f"{STAGE_KERNEL[st]}_uf{u}") for (st, k), u in stage_uf.items()}
        self.params = self.new_params()
        self.grad = runtime.alloc(4 * n)
        self.grad_part = runtime.alloc(4 * n * dp)
        self.m, self.v = self.new_params(), self.new_params()
        self.n_parts = -(-n // self.NORM_CHUNK)
        self.norm_part = runtime.alloc(4 * self.n_parts)
        self.coef = runtime.alloc(8)
        self._scratch: dict[tuple, list] = {}

    # -- parameters ---------------------------------------------------------------------------
    @property
    def layers(self) -> int:
        return len(self.dims) - 1

    def new_params(self, arrays: Sequence[tuple[np.ndarray, np.ndarray]] | None = None):
        """A zeroed (or loaded) parameter buffer in the flat layout."""
        buf = self.rt.alloc(4 * self.n_params)
        self.write_params(buf, arrays)
        return buf

    def flatten(self, arrays: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        if len(arrays) != self.layers:
            raise InvalidValueError(f"expected {self.layers} (weight, bias) pairs; found {len(arrays)}.")
        parts = []
        for k, (w, b) in enumerate(arrays):
            a, o = self.dims[k], self.dims[k + 1]
            if np.shape(w) != (o, a) or np.shape(b) != (o,):
                raise InvalidValueError(f"layer {k}: expected weight ({o}, {a}) and bias ({o},); "
                                        f"found {np.shape(w)} and {np.shape(b)}.")
            parts += [np.asarray(w, F32).ravel(), np.asarray(b, F32).ravel()]
        return np.concatenate(parts)

    def unflatten(self, flat: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for k, off in enumerate(self.offsets):
            a, o = self.dims[k], self.dims[k + 1]
            out.append((flat[off:off + o * a].reshape(o, a).copy(), flat[off + o * a:off + o * a + o].copy()))
        return out

    def write_params(self, buf, arrays=None) -> None:
        flat = np.zeros(self.n_params, F32) if arrays is None else self.flatten(arrays)
        self.rt.write(buf, flat)

    def read_flat(self, buf) -> np.ndarray:
        return self.rt.read(buf, np.empty(self.n_params, F32))

    def read_params(self, buf=None) -> list[tuple[np.ndarray, np.ndarray]]:
        return self.unflatten(self.read_flat(self.params if buf is None else buf))

    # -- stages ---------------------------------------------------------------------------------
    def _acts(self, role: str, batch: int) -> list:
        """Activation buffers ``[input, layer 1 out, ..., layer L out]`` for ``batch`` samples."""
        key = (role, batch)
        if key not in self._scratch:
            self._scratch[key] = [self.rt.alloc(4 * batch * d) for d in self.dims]
        return self._scratch[key]

    def _dp(self, batch: int) -> int:
        return max(1, min(self.dp, batch))

    def enqueue_forward(self, params, acts: list, batch: int) -> None:
        """FW stages: ``acts[0]`` holds the input; ``acts[l+1]`` receives layer ``l``'s output."""
        dp = self._dp(batch)
        for k, off in enumerate(self.offsets):
            a, o = self.dims[k], self.dims[k + 1]
            relu = np.int32(k < self.layers - 1)
            self.rt.launch(self.k_stage["FW", k], [dp * o], [acts[k], np.int64(a), params, np.int64(off),
                                                           acts[k + 1], np.int64(o), np.int64(batch), relu,
                                                           np.int64(dp)])

    def enqueue_backward(self, acts: list, grads: list, batch: int) -> None:
        """WA and BW stages in reverse layer order, then the reduction over pipelines into ``self.grad``.

        ``grads[L]`` holds dloss/d(output); ``grads[l]`` (``l >= 1``) receives dloss/d(acts[l]).
        """
        dp = self._dp(batch)
        n = np.int64(self.n_params)
        for k in reversed(range(self.layers)):
            a, o, off = self.dims[k], self.dims[k + 1], self.offsets[k]
            self.rt.launch(self.k_stage["WA", k], [dp * o], [grads[k + 1], np.int64(o), acts[k], np.int64(a),
                                                           self.grad_part, n, np.int64(off), np.int64(batch),
                                                           np.int64(dp)])
            if k > 0:
                self.rt.launch(self.k_stage["BW", k], [dp * a], [grads[k + 1], np.int64(o), self.params,
                                                               np.int64(off), acts[k], grads[k], np.int64(a),
                                                               np.int64(batch), np.int64(dp)])
        self.rt.launch(self.k["grad_reduce"], [self.n_params], [self.grad_part, np.int64(dp), n, self.grad])

    def enqueue_clip(self, max_norm: float | None) -> None:
        """Norm of ``self.grad`` and torch's clip coefficient (1 when ``max_norm`` is None)."""
        self.rt.launch(self.k["sqnorm_partial"], [self.n_parts], [self.grad, np.int64(self.n_params),
                                                                   np.int64(self.NORM_CHUNK), self.norm_part])
        self.rt.launch(self.k["clip_coef"], [1], [self.norm_part, np.int64(self.n_parts),
                                                  F32(max_norm or 0.0), self.coef])

    def enqueue_adam(self, step: int, lr: float, betas=(0.9, 0.999), eps: float = 1e-8) -> None:
        b1, b2 = betas
        step_size = lr / (1.0 - b1 ** step)
        bc2_sqrt = math.sqrt(1.0 - b2 ** step)
        self.rt.launch(self.k["adam_step"], [self.n_params], [
            self.params, self.grad, self.coef, self.m, self.v, np.int64(self.n_params),
            F32(b1), F32(b2), F32(eps), F32(step_size), F32(bc2_sqrt)])

    def enqueue_sgd(self, lr: float) -> None:
        self.rt.launch(self.k["sgd_step"], [self.n_params], [self.params, self.grad, self.coef,
                                                             np.int64(self.n_params), F32(lr)])

    def enqueue_polyak(self, target, tau: float) -> None:
        self.rt.launch(self.k["polyak"], [self.n_params], [target, self.params, np.int64(self.n_params), F32(tau)])

    # -- convenience (tests, users) ----------------------------------------------------------------
    def forward(self, x: np.ndarray, params=None) -> np.ndarray:
        """Network output for a ``(batch, in)`` array."""
        x = np.ascontiguousarray(x, F32).reshape(len(x), -1)
        acts = self._acts("forward", len(x))
        self.rt.write(acts[0], x)
        self.enqueue_forward(self.params if params is None else params, acts, len(x))
        return self.rt.read(acts[-1], np.empty((len(x), self.dims[-1]), F32))

    def dqn_loss_and_grads(self, obs, action, reward, next_obs, done, weights, *, target_params, gamma: float,
                           huber_delta: float = 1.0, double_dqn: bool = False):
        """Run every stage up to the reduced gradient; return ``(loss, td, q, grad arrays)`` (no update)."""
        q, td, loss = self.enqueue_dqn(obs, action, reward, next_obs, done, weights, target_params=target_params,
                                       gamma=gamma, huber_delta=huber_delta, double_dqn=double_dqn)
        return loss, td, q, self.unflatten(self.rt.read(self.grad, np.empty(self.n_params, F32)))

    def batch_buffers(self, batch: int) -> dict:
        """The device buffers a batch of ``batch`` samples is read from: ``obs`` and ``next_obs``
        (float32 rows), ``action`` (int64), ``reward`` and ``done`` (float32). A Data Storage on the
        same device can gather straight into them (then call :meth:`enqueue_dqn` with ``obs=None``)."""
        io = self._io(batch)
        return {"obs": self._acts("online", batch)[0], "next_obs": self._acts("target", batch)[0],
                "action": io["act"], "reward": io["rew"], "done": io["done"]}

    def enqueue_dqn(self, obs, action, reward, next_obs, done, weights, *, target_params, gamma: float,
                    huber_delta: float, double_dqn: bool, batch: int | None = None):
        """Upload a batch and run FW (target and online), the DQN loss, WA/BW and the reduction.

        ``obs=None`` (with ``batch`` = its size): the batch is already in :meth:`batch_buffers`
        (gathered there on the device); only the importance weights are uploaded.

        Returns host arrays ``(q(s, .), td, loss)`` read after the loss stage.
        """
        rt, n_act = self.rt, self.dims[-1]
        batch = len(obs) if obs is not None else int(batch)
        online, target = self._acts("online", batch), self._acts("target", batch)
        io = self._io(batch)
        if obs is not None:
            rt.write(online[0], np.ascontiguousarray(obs, F32).reshape(batch, -1))
            rt.write(target[0], np.ascontiguousarray(next_obs, F32).reshape(batch, -1))
            rt.write(io["act"], np.ascontiguousarray(action, np.int64).reshape(-1))
            rt.write(io["rew"], np.ascontiguousarray(reward, F32).reshape(-1))
            rt.write(io["done"], np.ascontiguousarray(done, F32).reshape(-1))
        rt.write(io["w"], np.ascontiguousarray(weights, F32).reshape(-1))
        self.enqueue_forward(target_params, target, batch)
        q_sel = target[-1]
        if double_dqn:
            nxt = self._acts("online_next", batch)
            rt.copy(nxt[0], target[0], 4 * batch * self.dims[0])
            self.enqueue_forward(self.params, nxt, batch)
            q_sel = nxt[-1]
        self.enqueue_forward(self.params, online, batch)
        grads = self._acts("grads", batch)
        rt.launch(self.k["dqn_loss"], [batch], [
            online[-1], target[-1], q_sel, np.int64(n_act), io["act"], io["rew"], io["done"], io["w"],
            F32(gamma), F32(huber_delta), np.int64(batch), grads[-1], io["td"], io["loss"]])
        self.enqueue_backward(online, grads, batch)
        q = rt.read(online[-1], np.empty((batch, n_act), F32))
        td = rt.read(io["td"], np.empty(batch, F32))
        loss = rt.read(io["loss"], np.empty(batch, F32))
        return q, td, float(loss.astype(np.float64).sum() / batch)

    def _io(self, batch: int) -> dict:
        key = ("io", batch)
        if key not in self._scratch:
            self._scratch[key] = {name: self.rt.alloc((8 if name == "act" else 4) * batch)
                                  for name in ("act", "rew", "done", "w", "td", "loss")}
        return self._scratch[key]
