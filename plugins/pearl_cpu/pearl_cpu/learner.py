"""Native learner steps of the CPU backend (``pearl_cpu._learner``, ``pearl_cpu._learner_ac``).

:class:`~pearl_cpu._learner.DQNMLPKernel` runs one DQN update of a ReLU MLP in a
single call: the matrix products go to the same BLAS numpy uses, everything
between them is fused C++ (see ``csrc/dqn_mlp.cpp``). pearl-core's numpy engine
(:mod:`pearl_core.algorithms.mlp_engine`) runs it when the trainer is given it
(``DQN(learner_kernels=pearl_core.plugins.kernel_lookup("cpu"))``, which asks
:meth:`CpuBackend.learner_kernel`) and keeps its own path otherwise.

:class:`~pearl_cpu._learner_ac.TD3MLPKernel` (TD3 with twin critics, DDPG with one) and
:class:`~pearl_cpu._learner_ac.SACMLPKernel` run one actor-critic update of ReLU MLPs the same
way (``csrc/ac_mlp.cpp``); pearl-core's TD3, DDPG and SAC
(:mod:`pearl_core.algorithms.ac_engine`) run them when given them.

The compiled steps are positional (``csrc/``); the factories here return subclasses of them
whose ``step`` takes the typed record of :mod:`pearl_core.kernels` (``DQNStepArgs``,
``ACStepArgs``, ``SACStepArgs``, from :mod:`pearl_core.sdk`) and returns its result record: the
record is unpacked into the compiled call: microseconds against the step's hundreds.

The kernels link no BLAS of its own: :func:`find_sgemm` takes ``cblas_sgemm``
from the BLAS library numpy has loaded (found by threadpoolctl), so thread limits
set on numpy's BLAS (the runtime pins them) hold for the kernel as well.
"""

from __future__ import annotations

import ctypes
from typing import Any

from pearl_core.errors import DeviceRuntimeError
from pearl_core.sdk import ACStepResult, DQNStepResult, SACStepResult

__all__ = ["find_sgemm", "dqn_cnn_kernel", "dqn_mlp_kernel", "sac_mlp_kernel", "td3_mlp_kernel"]

# cblas_sgemm under the names BLAS builds export it, with whether its integers are 64-bit.
_SGEMM_SYMBOLS = (
    ("scipy_cblas_sgemm64_", True),  # numpy's wheels: scipy-openblas, ILP64
    ("cblas_sgemm64_", True),        # OpenBLAS ILP64 builds with the 64_ suffix
    ("cblas_sgemm", False),          # reference CBLAS, OpenBLAS, MKL (LP64)
)

_FOUND: list[tuple[int, bool] | None] = []


def find_sgemm() -> tuple[int, bool] | None:
    """``(address of cblas_sgemm, ilp64)`` in the BLAS numpy uses, or ``None`` if it cannot be found.

    Cached per process. ``ilp64`` says the library takes 64-bit integers.
    """
    if _FOUND:
        return _FOUND[0]
    found = None
    try:
        import numpy  # noqa: F401 - loads numpy's BLAS, so threadpoolctl sees it
        from threadpoolctl import threadpool_info

        for info in threadpool_info():
            if info.get("user_api") != "blas" or not info.get("filepath"):
                continue
            lib = ctypes.CDLL(info["filepath"])
            for name, ilp64 in _SGEMM_SYMBOLS:
                fn = getattr(lib, name, None)
                if fn is not None:
                    found = (ctypes.cast(fn, ctypes.c_void_p).value, ilp64)
                    break
            if found:
                break
    except Exception:  # noqa: BLE001 - no BLAS found: the caller keeps its numpy path
        found = None
    _FOUND.append(found)
    return found


# The compiled kernels with the typed step (pearl_core.kernels' records), made once the extension
# imports (this module must import without it: CpuBackend.learner_kernel then returns None).
_TYPED: dict[str, type] = {}


def _hp(h: Any) -> tuple[float, float, float, float]:
    return (h.lr, h.beta1, h.beta2, h.eps)


def _typed(name: str) -> type:
    cls = _TYPED.get(name)
    if cls is not None:
        return cls
    if name == "dqn":
        from pearl_cpu._learner import DQNMLPKernel

        native_dqn = DQNMLPKernel.step

        class DQNKernel(DQNMLPKernel):
            """:class:`~pearl_cpu._learner.DQNMLPKernel` with ``step(DQNStepArgs) -> DQNStepResult``."""

            def step(self, a):  # pearl_core.kernels.DQNKernel's
                h = a.adam
                td, loss, q_mean = native_dqn(self, a.obs, a.actions, a.rewards, a.next_obs, a.done, a.weights,
                                              a.gamma, a.huber_delta, a.max_grad_norm, a.double_dqn, h.lr, h.beta1,
                                              h.beta2, h.eps, a.discount)
                return DQNStepResult(td, loss, q_mean)

        cls = DQNKernel
    elif name == "td3":
        from pearl_cpu._learner_ac import TD3MLPKernel

        native_td3 = TD3MLPKernel.step

        class TD3Kernel(TD3MLPKernel):
            """:class:`~pearl_cpu._learner_ac.TD3MLPKernel` with ``step(ACStepArgs) -> ACStepResult``."""

            def step(self, a):  # pearl_core.kernels.TD3Kernel's
                return ACStepResult(*native_td3(self, a.obs, a.actions, a.rewards, a.next_obs, a.done, a.weights,
                                                a.discount, a.noise, a.actor_update, a.max_grad_norm, a.tau,
                                                _hp(a.critic_adam), _hp(a.actor_adam)))

        cls = TD3Kernel
    else:
        from pearl_cpu._learner_ac import SACMLPKernel

        native_sac = SACMLPKernel.step

        class SACKernel(SACMLPKernel):
            """:class:`~pearl_cpu._learner_ac.SACMLPKernel` with ``step(SACStepArgs) -> SACStepResult``."""

            def step(self, a):  # pearl_core.kernels.SACKernel's
                alpha = a.alpha_adam
                return SACStepResult(*native_sac(self, a.obs, a.actions, a.rewards, a.next_obs, a.done, a.weights,
                                                 a.discount, a.eps_next, a.eps_pi, a.max_grad_norm, a.tau,
                                                 a.target_entropy, _hp(a.critic_adam), _hp(a.actor_adam),
                                                 None if alpha is None else _hp(alpha)))

        cls = SACKernel
    _TYPED[name] = cls
    return cls


def dqn_mlp_kernel(online: list, target: list, exp_avgs: list, exp_avg_sqs: list, steps: Any, batch: int) -> Any:
    """A :class:`~pearl_cpu._learner.DQNMLPKernel` over these arrays, its ``step`` taking a ``DQNStepArgs``
    (``pearl_core.kernels.DQNKernelFactory``).

    Args:
        online, target: ``[(W, b), ...]`` float32 C-contiguous arrays per layer (``W`` is
            ``(out, in)``), written in place (online) or read (target) by every step.
        exp_avgs, exp_avg_sqs: Adam moments, one array per parameter (``W0, b0, W1, ...``).
        steps: float32 array of the per-parameter Adam step counters (incremented by each step).
        batch: the batch size every step takes.

    Raises:
        DeviceRuntimeError: numpy's BLAS exposes no ``cblas_sgemm`` (see :func:`find_sgemm`).
        ValueError: an array has the wrong shape, dtype or layout.
    """
    found = find_sgemm()
    if found is None:
        raise DeviceRuntimeError("pearl_cpu: no cblas_sgemm in numpy's BLAS library (threadpoolctl found none); "
                                 "expected numpy linked to OpenBLAS, MKL or a reference CBLAS. Fix: use "
                                 "DQN(engine='numpy'), or a numpy build whose BLAS exports cblas_sgemm.")
    address, ilp64 = found
    return _typed("dqn")(address, ilp64, list(online), list(target), list(exp_avgs), list(exp_avg_sqs), steps, batch)


def dqn_cnn_kernel(conv: Any, online: list, target: list, exp_avgs: list, exp_avg_sqs: list, steps: Any,
                   batch: int) -> Any:
    """A :class:`~pearl_cpu._learner.DQNMLPKernel` whose layer 0 is one convolution (``csrc/dqn_mlp.cpp``),
    its ``step`` taking a ``DQNStepArgs`` (``pearl_core.kernels.DQNConvKernelFactory``).

    Args:
        conv: a ``ConvShape`` (``channels, height, width, kernel, stride``; a 5-tuple works too) of layer 0,
            an unpadded ``Conv2d`` followed by ReLU and a flatten in torch's ``(out_channels, OH, OW)`` order.
        online, target: ``[(W, b), ...]`` as :func:`dqn_mlp_kernel`'s; layer 0's ``W`` is the convolution's
            weight seen 2-D, ``(out_channels, channels * kernel * kernel)``.
        exp_avgs, exp_avg_sqs, steps, batch: as :func:`dqn_mlp_kernel`'s (layer 0's moments seen 2-D too).

    The step takes observations as float32 ``(B, channels * height * width)`` rows (the image
    flattened, scaled as the network expects).

    Raises:
        DeviceRuntimeError: numpy's BLAS exposes no ``cblas_sgemm`` (see :func:`find_sgemm`).
        ValueError: an array has the wrong shape, dtype or layout, or ``conv`` is not a valid convolution.
    """
    address, ilp64 = _sgemm("DQN")
    return _typed("dqn")(address, ilp64, list(online), list(target), list(exp_avgs), list(exp_avg_sqs), steps, batch,
                        [int(v) for v in conv])


def _sgemm(owner: str) -> tuple[int, bool]:
    found = find_sgemm()
    if found is None:
        raise DeviceRuntimeError(f"pearl_cpu: no cblas_sgemm in numpy's BLAS library (threadpoolctl found none); "
                                 f"expected numpy linked to OpenBLAS, MKL or a reference CBLAS. Fix: use "
                                 f"{owner}(engine='torch'), or a numpy build whose BLAS exports cblas_sgemm.")
    return found


def td3_mlp_kernel(actor: list, actor_target: list, critics: list, critic_targets: list, actor_adam: tuple,
                   critic_adam: tuple, batch: int) -> Any:
    """A :class:`~pearl_cpu._learner_ac.TD3MLPKernel` over these arrays (TD3: two critics; DDPG: one), its
    ``step`` taking an ``ACStepArgs`` (``pearl_core.kernels.TD3KernelFactory``).

    Args:
        actor, actor_target: ``[(W, b), ...]`` float32 C-contiguous arrays per layer of the actor's
            ReLU MLP (``W`` is ``(out, in)``; the ``tanh`` on its output is the kernel's).
        critics, critic_targets: one such list per critic (1 or 2), over ``[obs | action]``, 1 output.
        actor_adam, critic_adam: ``(exp_avgs, exp_avg_sqs, steps)`` of each optimizer: one moment
            array per parameter in the optimizer's order (the critics': critic 1's, then critic 2's)
            and a float32 array of its per-parameter step counters.
        batch: the batch size every step takes.

    Every array is held and written in place (targets: by the Polyak steps).

    Raises:
        DeviceRuntimeError: numpy's BLAS exposes no ``cblas_sgemm`` (see :func:`find_sgemm`).
        ValueError: an array has the wrong shape, dtype or layout.
    """
    address, ilp64 = _sgemm("TD3")
    return _typed("td3")(address, ilp64, list(actor), list(actor_target), [list(c) for c in critics],
                        [list(c) for c in critic_targets], tuple(actor_adam), tuple(critic_adam), batch)


def sac_mlp_kernel(actor: list, critics: list, critic_targets: list, actor_adam: tuple, critic_adam: tuple,
                   log_alpha: Any, alpha_adam: tuple | None, batch: int) -> Any:
    """A :class:`~pearl_cpu._learner_ac.SACMLPKernel` over these arrays, its ``step`` taking a ``SACStepArgs``
    (``pearl_core.kernels.SACKernelFactory``).

    Args:
        actor: ``[(W, b), ...]`` of the actor's ReLU MLP, ``2 * |A|`` outputs (mean, log_std).
        critics, critic_targets: two lists each, as for :func:`td3_mlp_kernel`.
        actor_adam, critic_adam: as for :func:`td3_mlp_kernel`.
        log_alpha: float32 array of shape ``(1,)`` (read; written when ``alpha_adam`` is given).
        alpha_adam: ``(exp_avg, exp_avg_sq, step)`` float32 ``(1,)`` arrays of ``log_alpha``'s
            Adam (automatic entropy tuning), or ``None`` (a fixed ``alpha``).
        batch: the batch size every step takes.

    Raises:
        DeviceRuntimeError: numpy's BLAS exposes no ``cblas_sgemm`` (see :func:`find_sgemm`).
        ValueError: an array has the wrong shape, dtype or layout.
    """
    address, ilp64 = _sgemm("SAC")
    return _typed("sac")(address, ilp64, list(actor), [list(c) for c in critics], [list(c) for c in critic_targets],
                        tuple(actor_adam), tuple(critic_adam), log_alpha,
                        None if alpha_adam is None else tuple(alpha_adam), batch)
