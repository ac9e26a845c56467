"""Device arrays in and out: cupy arrays, torch CUDA tensors (DLPack) and anything with
``__cuda_array_interface__``, without host round trips.

:func:`as_device_array` turns an input into a 1-D contiguous cupy array of the
wanted dtype (zero-copy when it already is one; a dtype conversion runs on the
device) and says which library it came from; :func:`like_input` hands a result
back as that library's type (torch via ``torch.from_dlpack``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pearl_core.errors import InvalidDTypeError, InvalidValueError

__all__ = ["as_device_array", "is_torch_tensor", "like_input"]


def is_torch_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "is_cuda")


def as_device_array(x: Any, dtype: np.dtype | type, what: str) -> tuple[Any, str]:
    """``(cupy array, "cupy" | "torch")`` for a device array ``x``.

    Raises:
        InvalidValueError: ``x`` is a host array (use the host API), or not 1-D.
        InvalidDTypeError: integer indices / real values expected.
    """
    import cupy as cp

    origin = "cupy"
    if isinstance(x, cp.ndarray):
        arr = x
    elif is_torch_tensor(x):
        if not x.is_cuda:
            raise InvalidValueError(f"{what} is a CPU torch tensor; the device API takes CUDA tensors. "
                                    "Fix: tensor.cuda(), or call the host API (update/get/sample) with numpy.")
        arr, origin = cp.from_dlpack(x.contiguous()), "torch"
    elif hasattr(x, "__cuda_array_interface__"):
        arr = cp.asarray(x)
    else:
        raise InvalidValueError(f"{what} is a {type(x).__name__}, not a device array; the device API takes cupy "
                                "arrays or CUDA tensors. Fix: call the host API (update/get/sample) with numpy.")
    if arr.ndim != 1:
        raise InvalidValueError(f"{what} must be a 1-D array; found shape {arr.shape}. Fix: pass a flat array.")
    if arr.size and arr.dtype.kind not in ("iu" if what == "indices" else "iuf"):
        raise InvalidDTypeError(f"{what} must be {'integers' if what == 'indices' else 'real numbers'}; "
                                f"found dtype {arr.dtype}.")
    if arr.dtype != np.dtype(dtype) or not arr.flags.c_contiguous:
        arr = cp.ascontiguousarray(arr, dtype=dtype)
    return arr, origin


def like_input(arr: Any, origin: str) -> Any:
    """``arr`` (cupy) as the caller's library type: a torch tensor sharing the memory, or ``arr``."""
    if origin == "torch":
        import torch

        return torch.from_dlpack(arr)
    return arr
