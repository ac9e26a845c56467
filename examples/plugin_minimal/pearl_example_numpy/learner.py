"""The example's learner kernel ``"dqn_mlp"``: one DQN update of a ReLU MLP, in plain numpy.

The math of :meth:`pearl_core.backend.Backend.learner_kernel` (the same as
``DQN(engine="torch")``; :class:`pearl_core.testing.DQNKernelConformance` checks
it against that), with ``k = huber_delta`` and ``B`` the batch size; the names are
the fields of the ``DQNStepArgs`` record ``step`` takes (``pearl_core.sdk``):

1. target: ``y = r + gamma * (1 - done) * Q_target(s')[a*]``, with ``a* = argmax Q_target(s')``,
   or ``argmax Q(s')`` for double DQN; with the optional ``discount`` (n-step returns, float32
   ``gamma ** k`` per sample) in place of ``gamma``;
2. loss: ``delta = Q(s)[a] - y``, ``loss = mean(w * huber(delta))`` with ``huber(d) = d^2 / 2``
   for ``|d| <= k``, else ``k * (|d| - k / 2)``; so ``dloss/dq = clip(delta, -k, k) * w / B``;
3. backward through the layers (the ReLU passes the gradient where its output is > 0);
4. scale the gradients by ``max_grad_norm / (norm + 1e-6)`` when that is below 1
   (torch's ``clip_grad_norm_``; ``max_grad_norm`` 0 means no clipping);
5. Adam as torch computes it, each parameter with its own step counter ``t``:
   ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``,
   ``p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)``.

Every update is written in place into the arrays the factory was given: they
are views of the trainer's torch tensors, which is how the trainer sees it.
"""

import numpy as np

from pearl_core.errors import InvalidValueError
from pearl_core.sdk import DQNStepResult

from pearl_example_numpy import counters


def dqn_mlp(online, target, exp_avgs, exp_avg_sqs, steps, batch):
    """The ``"dqn_mlp"`` factory (:meth:`NumpyExampleBackend.learner_kernel` returns it; a
    ``pearl_core.sdk.DQNKernelFactory``)."""
    return DQNMLPKernel(online, target, exp_avgs, exp_avg_sqs, steps, batch)


def _fail(what, expected, found):
    return InvalidValueError(f"numpy-example dqn_mlp: {what}; expected {expected}, found {found}. Fix: pass the "
                             "trainer's own arrays (DQN(engine='native') does), one batch of the size the kernel "
                             "was made for.")


class DQNMLPKernel:
    """One DQN update per :meth:`step`, on the arrays it was made over (a ``pearl_core.sdk.DQNKernel``).

    Args:
        online, target: ``[(W, b), ...]`` float32 arrays per layer (``W`` is ``(out, in)``);
            the online ones are updated in place, the target ones only read.
        exp_avgs, exp_avg_sqs: Adam's moments, one array per parameter (``W0, b0, W1, ...``).
        steps: float32 array of the parameters' Adam step counters (each step adds 1).
        batch: the batch size of every step.
    """

    def __init__(self, online, target, exp_avgs, exp_avg_sqs, steps, batch):
        self.online, self.target = list(online), list(target)
        self.params = [p for layer in self.online for p in layer]
        self.exp_avgs, self.exp_avg_sqs, self.steps = list(exp_avgs), list(exp_avg_sqs), steps
        self.batch = int(batch)
        shapes = [p.shape for p in self.params]
        for what, arrays in (("target", [p for layer in self.target for p in layer]),
                             ("exp_avgs", self.exp_avgs), ("exp_avg_sqs", self.exp_avg_sqs)):
            if [a.shape for a in arrays] != shapes:
                raise _fail(f"{what} do not match the online parameters", shapes, [a.shape for a in arrays])
        if steps.shape != (len(shapes),):
            raise _fail("one Adam step counter per parameter", (len(shapes),), steps.shape)
        if self.batch < 1:
            raise _fail("the batch size", ">= 1", batch)

    def step(self, args):
        """One update; ``args`` is a ``DQNStepArgs``, the result a ``DQNStepResult(|delta| per sample
        (float32), loss, mean q)``."""
        obs, actions, rewards, next_obs, done, weights = (args.obs, args.actions, args.rewards, args.next_obs,
                                                          args.done, args.weights)
        B, rows = self.batch, np.arange(self.batch)
        n_in, n_actions = self.online[0][0].shape[1], self.online[-1][0].shape[0]
        for name, x in (("obs", obs), ("next_obs", next_obs)):
            if x.shape != (B, n_in):
                raise _fail(f"{name}'s shape", (B, n_in), x.shape)
        if actions.shape != (B,) or actions.min() < 0 or actions.max() >= n_actions:
            raise _fail("actions", f"{B} values in [0, {n_actions})", actions)

        # 1. targets, from the target network (no gradient)
        q_next = self._forward(next_obs, self.target)[-1]
        a_star = (self._forward(next_obs, self.online)[-1] if args.double_dqn else q_next).argmax(axis=1)
        # per sample: gamma ** k (n-step returns), else the one-step gamma
        disc = np.float32(args.gamma) if args.discount is None else args.discount
        y = rewards + disc * ~done * q_next[rows, a_star]

        # 2. the importance-weighted Huber loss and its gradient with respect to q
        outs = self._forward(obs, self.online)  # outs[i] is the input of layer i; outs[-1] is Q(s, .)
        q = outs[-1][rows, actions]
        delta = q - y
        k = np.float32(args.huber_delta)
        huber = np.where(np.abs(delta) <= k, 0.5 * delta * delta, k * (np.abs(delta) - 0.5 * k))
        loss = float(np.mean(huber * weights))
        g = np.zeros_like(outs[-1])
        g[rows, actions] = np.clip(delta, -k, k) * weights / np.float32(B)

        # 3. backward: dW = g^T x, db = sum(g), then through W and the ReLU of the layer below
        grads = []  # W0, b0, W1, b1, ... like self.params
        for i in reversed(range(len(self.online))):
            W, _ = self.online[i]
            grads[:0] = [g.T @ outs[i], g.sum(axis=0)]
            if i:
                g = (g @ W) * (outs[i] > 0)

        # 4. global gradient-norm clipping
        if args.max_grad_norm > 0:
            norm = float(np.sqrt(sum(np.sum(gr * gr, dtype=np.float64) for gr in grads)))
            coef = args.max_grad_norm / (norm + 1e-6)
            if coef < 1.0:
                grads = [gr * np.float32(coef) for gr in grads]

        # 5. Adam, in place on the parameters, the moments and the step counters
        lr, beta1, beta2, eps = args.adam.lr, args.adam.beta1, args.adam.beta2, args.adam.eps
        self.steps += 1
        for p, gr, m, v, t in zip(self.params, grads, self.exp_avgs, self.exp_avg_sqs, self.steps):
            m *= np.float32(beta1)
            m += np.float32(1 - beta1) * gr
            v *= np.float32(beta2)
            v += np.float32(1 - beta2) * gr * gr
            bias1, bias2 = 1 - beta1 ** float(t), 1 - beta2 ** float(t)
            p -= np.float32(lr / bias1) * m / (np.sqrt(v) / np.float32(bias2 ** 0.5) + np.float32(eps))

        counters.count("kernel_steps")
        return DQNStepResult(np.abs(delta), loss, float(np.mean(q)))

    @staticmethod
    def _forward(x, layers):
        """``[x, h1, ..., Q]``: the input, then every layer's output (ReLU after all but the last)."""
        outs = [x]
        for i, (W, b) in enumerate(layers):
            h = outs[-1] @ W.T + b
            outs.append(h if i == len(layers) - 1 else np.maximum(h, np.float32(0)))
        return outs
