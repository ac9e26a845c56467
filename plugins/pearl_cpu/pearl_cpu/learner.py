"""Native learner steps of the CPU backend (``pearl_cpu._learner``).

:class:`~pearl_cpu._learner.DQNMLPKernel` runs one DQN update of a ReLU MLP in a
single call: the matrix products go to the same BLAS numpy uses, everything
between them is fused C++ (see ``csrc/dqn_mlp.cpp``). pearl-core's numpy engine
(:mod:`pearl_core.algorithms.mlp_engine`) runs it when the trainer is given it
(``DQN(learner_kernels=pearl_core.plugins.kernel_lookup("cpu"))``, which asks
:meth:`CpuBackend.learner_kernel`) and keeps its own path otherwise.

The kernel links no BLAS of its own: :func:`find_sgemm` takes ``cblas_sgemm``
from the BLAS library numpy has loaded (found by threadpoolctl), so thread limits
set on numpy's BLAS (the runtime pins them) hold for the kernel as well.
"""

from __future__ import annotations

import ctypes
from typing import Any

from pearl_core.errors import DeviceRuntimeError

__all__ = ["find_sgemm", "dqn_mlp_kernel"]

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


def dqn_mlp_kernel(online: list, target: list, exp_avgs: list, exp_avg_sqs: list, steps: Any, batch: int) -> Any:
    """A :class:`~pearl_cpu._learner.DQNMLPKernel` over these arrays.

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
    from pearl_cpu._learner import DQNMLPKernel

    found = find_sgemm()
    if found is None:
        raise DeviceRuntimeError("pearl_cpu: no cblas_sgemm in numpy's BLAS library (threadpoolctl found none); "
                                 "expected numpy linked to OpenBLAS, MKL or a reference CBLAS. Fix: use "
                                 "DQN(engine='numpy'), or a numpy build whose BLAS exports cblas_sgemm.")
    address, ilp64 = found
    return DQNMLPKernel(address, ilp64, list(online), list(target), list(exp_avgs), list(exp_avg_sqs), steps, batch)
