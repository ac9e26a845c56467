"""DQN whose gradient step runs on the FPGA learner pipeline (:class:`pearl_fpga.learner.MLPPipeline`).

:class:`FpgaDQN` is :class:`pearl_core.algorithms.dqn.DQN` with ``update_policy``
executed by the pipeline's stages: same hyper-parameters, same loss
(importance-weighted Huber, or MSE with ``huber_delta=0``), same target-network
schedule, same clipping and Adam. The weights, target weights and Adam moments
live in device buffers; after each step the new weights are copied into the torch
``q_net`` so that acting, ``get_weights`` and checkpoints see them, and
``state_dict`` mirrors the Adam moments into the torch optimizer.

Use it wherever a ``DQN`` is accepted (``composer.set_train_function(FpgaDQN, ...)``,
``dp=``/``uf=`` as trainer keyword arguments). It is functional emulation on the
OpenCL device chosen by :mod:`pearl_fpga.runtime`; its timings are not FPGA timings.
"""

from __future__ import annotations

import copy

import numpy as np

from pearl_core.errors import SpecError
from pearl_core.sdk import DQN

from pearl_fpga.learner import F32, MLPPipeline, linear_relu_dims
from pearl_fpga.runtime import Runtime

__all__ = ["FpgaDQN"]


class FpgaDQN(DQN):
    """DQN whose gradient step runs on the FPGA learner pipeline (emulated; see the module docstring).

    Args: those of :class:`~pearl_core.algorithms.dqn.DQN` (``device`` must stay ``"cpu"``), plus
        dp: parallel learner pipelines; uf: per-stage unroll, one int or one per stage
            (:class:`~pearl_fpga.learner.MLPPipeline`; a plan's ``"4,4,2,..."`` string too);
        runtime: OpenCL runtime.

    The runtime builds it for a plan that places DQN's learner on the FPGA
    (:meth:`pearl_fpga.backend.FpgaBackend.device_trainer` passes the plan's ``dp``/``uf``).
    """

    #: The pipeline's target stage takes one scalar ``gamma`` (no per-sample ``gamma ** k``): a run with
    #: n-step returns (``ReplayConfig.n_step > 1``) is refused rather than bootstrapped wrongly.
    supports_n_step = False
    #: Its batches are the FPGA storage's (through :meth:`device_batch_slot`) or host arrays, and its TD errors
    #: come back as numpy: not the torch device batches :class:`~pearl_core.algorithms.dqn.DQN` declares.
    device_batches = False

    def __init__(self, observation_space, action_space, *, dp: int = 1, uf: int | str | tuple = 1,
                 runtime: Runtime | None = None, **kwargs):
        if kwargs.get("device", "cpu") != "cpu":
            raise SpecError(f"FpgaDQN keeps its torch copy on the CPU; found device={kwargs['device']!r}.")
        super().__init__(observation_space, action_space, **kwargs)
        self.pipeline = MLPPipeline(linear_relu_dims(self.q_net), dp=dp, uf=uf, runtime=runtime)
        self.target_params = self.pipeline.new_params()
        group = self.optimizer.param_groups[0]
        self._lr, self._betas, self._adam_eps = float(group["lr"]), tuple(group["betas"]), float(group["eps"])
        self._adam_steps = 0
        self._push()

    def __deepcopy__(self, memo):
        """A copy with its own device buffers (on the same runtime): params, target, Adam moments."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            if key not in ("pipeline", "target_params"):
                setattr(new, key, copy.deepcopy(value, memo))
        p = self.pipeline
        new.pipeline = q = MLPPipeline(p.dims, dp=p.dp, uf=p.uf, runtime=p.rt)
        new.target_params = q.new_params()
        for dst, src in ((q.params, p.params), (new.target_params, self.target_params), (q.m, p.m), (q.v, p.v)):
            p.rt.copy(dst, src, 4 * p.n_params)
        p.rt.finish()
        return new

    # -- host <-> device ---------------------------------------------------------------------------
    @staticmethod
    def _pairs(net) -> list[tuple[np.ndarray, np.ndarray]]:
        import torch.nn as nn

        return [(m.weight.detach().numpy(), m.bias.detach().numpy()) for m in net if isinstance(m, nn.Linear)]

    def _copy_into(self, net, pairs) -> None:
        import torch
        import torch.nn as nn

        with torch.no_grad():
            for m, (w, b) in zip([m for m in net if isinstance(m, nn.Linear)], pairs):
                m.weight.copy_(torch.from_numpy(w))
                m.bias.copy_(torch.from_numpy(b))

    def _push(self) -> None:
        """Upload q_net, target_net and the Adam moments (from the torch optimizer's state, if any)."""
        p = self.pipeline
        p.write_params(p.params, self._pairs(self.q_net))
        p.write_params(self.target_params, self._pairs(self.target_net))
        state = [self.optimizer.state.get(t, {}) for t in self._params]
        if all("exp_avg" in s for s in state):
            for buf, key in ((p.m, "exp_avg"), (p.v, "exp_avg_sq")):
                p.rt.write(buf, np.concatenate([s[key].detach().numpy().ravel() for s in state]).astype(F32))
            self._adam_steps = int(float(state[0]["step"]))
        else:
            p.write_params(p.m)
            p.write_params(p.v)
            self._adam_steps = 0

    def _pull_optimizer(self) -> None:
        """Mirror the device's Adam moments into the torch optimizer (for checkpoints)."""
        import torch

        if self._adam_steps == 0:
            return
        p = self.pipeline
        m, v = p.unflatten(p.read_flat(p.m)), p.unflatten(p.read_flat(p.v))
        tensors = iter(self._params)
        for (mw, mb), (vw, vb) in zip(m, v):
            for mm, vv in ((mw, vw), (mb, vb)):
                t = next(tensors)
                self.optimizer.state[t] = {"step": torch.tensor(float(self._adam_steps)),
                                           "exp_avg": torch.from_numpy(mm), "exp_avg_sq": torch.from_numpy(vv)}

    # -- learning ------------------------------------------------------------------------------------
    def device_batch_slot(self, storage, batch_size: int):
        """Where a batch from ``storage`` should be sampled to: the pipeline's own input buffers when the
        storage is an :class:`~pearl_fpga.storage.FpgaStorage` on this runtime with a layout the pipeline
        reads as it is (then the batch never leaves the device), else ``None`` (host arrays).

        The runtime's learner step asks for it (setting 2 with RM, Data Storage and learner on the FPGA)."""
        from pearl_core.sdk import TRANSITION_FIELDS
        from pearl_fpga.storage import DeviceRows, FpgaStorage

        p = self.pipeline
        if not (isinstance(storage, FpgaStorage) and storage.rt is p.rt and self.action_start == 0
                and storage.device_rows_fit(p.dims[0])):
            return None
        bufs, b = p.batch_buffers(batch_size), int(batch_size)
        slot = {name: DeviceRows(bufs[name], (b,), as_float=name == "done") for name in bufs}
        # Fields the pipeline does not read (the transition's steps: this trainer takes one-step rows
        # only, supports_n_step is False) are gathered into host arrays, so every field has a destination.
        layout = storage.spec.fields()
        for name in TRANSITION_FIELDS:
            if name not in slot:
                shape, dtype = layout[name]
                slot[name] = np.empty((b, *shape), dtype=dtype)
        slot["weights"] = np.empty(b, np.float32)
        return slot

    def update_policy(self, batch, weights: np.ndarray):
        from pearl_core.sdk import UpdateResult

        from pearl_fpga.storage import DeviceRows

        p = self.pipeline
        if self.updates % self.target_update_every == 0:
            p.enqueue_polyak(self.target_params, 1.0 if self.tau >= 1.0 else self.tau)
        opts = dict(target_params=self.target_params, gamma=self.gamma, huber_delta=self.huber_delta,
                    double_dqn=self.double_dqn)
        if isinstance(batch.obs, DeviceRows):  # gathered into the pipeline's buffers: nothing to upload
            n = batch.obs.shape[0]
            q, td, loss = p.enqueue_dqn(None, None, None, None, None, weights, batch=n, **opts)
            action = p.rt.read(batch.action.buf, np.empty(n, np.int64))  # 8 B per sample, for the q metric
        else:
            action = np.asarray(batch.action, dtype=np.int64).reshape(-1) - self.action_start
            obs = np.asarray(batch.obs).reshape(len(action), -1)
            next_obs = np.asarray(batch.next_obs).reshape(len(action), -1)
            q, td, loss = p.enqueue_dqn(obs, action, batch.reward, next_obs, np.asarray(batch.done, np.float32),
                                        weights, **opts)
        p.enqueue_clip(self.max_grad_norm)
        self._adam_steps += 1
        p.enqueue_adam(self._adam_steps, self._lr, self._betas, self._adam_eps)
        self._copy_into(self.q_net, p.read_params())
        if self.updates % self.target_update_every == 0:
            self._copy_into(self.target_net, p.read_params(self.target_params))
        self.updates += 1
        q_sa = q[np.arange(len(action)), action]
        return UpdateResult(td_errors=td.astype(np.float32), metrics={"loss": loss, "q_mean": float(q_sa.mean())})

    # -- weights and state -----------------------------------------------------------------------------
    def set_weights(self, weights) -> None:
        super().set_weights(weights)
        self.pipeline.write_params(self.pipeline.params, self._pairs(self.q_net))

    def state_dict(self):
        self._pull_optimizer()
        return super().state_dict()

    def load_state_dict(self, state) -> None:
        super().load_state_dict(state)
        self._push()
