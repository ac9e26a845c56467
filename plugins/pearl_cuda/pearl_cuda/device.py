"""Which GPU a plan's device string names: ``"cuda:N"`` -> ``N``, with clear errors.

The runtime hands a backend the plan's device string (``"cuda:1"``); callers
inside this plugin still pass ordinals (``1``). :func:`cuda_ordinal` accepts
both (and a ``torch.device``), :func:`check_visible` says when the GPU is not
one this process sees. Host logic only: parsing touches no device.
"""

from __future__ import annotations

import operator
import re
from typing import Any

from pearl_core.errors import InvalidDTypeError, InvalidValueError, PlacementError

__all__ = ["check_visible", "cuda_device_string", "cuda_ordinal"]

_CUDA = re.compile(r"cuda(?::(\d+))?")


def cuda_ordinal(device: Any, what: str = "device") -> int:
    """The CUDA ordinal ``device`` names.

    Accepted: an int ``>= 0``, ``"cuda"`` (GPU 0), ``"cuda:N"``, or an object
    with ``type == "cuda"`` and an ``index`` (a ``torch.device``). ``None`` is GPU 0.

    Raises:
        InvalidValueError: a string that is not ``"cuda"``/``"cuda:N"`` (e.g.
            ``"cpu"``, ``"cuda:-1"``, ``"cuda:x"``, ``"gpu:0"``) or a negative int.
        InvalidDTypeError: any other type (a float, a bool, a list).
    """
    if device is None:
        return 0
    if isinstance(device, str):
        m = _CUDA.fullmatch(device.strip())
        if m is None:
            kind = device.strip().split(":", 1)[0]
            if kind == "cuda":
                hint = "write the GPU's ordinal after the colon, e.g. 'cuda:0'"
            elif kind.lower() == "cuda":
                hint = "write the kind in lower case, e.g. 'cuda:0'"
            else:
                hint = f"a {kind!r} device is not a GPU; this backend only places on 'cuda:N'"
            raise InvalidValueError(f"cuda backend: {what} = {device!r} is not a CUDA device string; expected "
                                    f"'cuda' or 'cuda:N' with N >= 0 (e.g. 'cuda:1'). Fix: {hint}.")
        return int(m.group(1) or 0)
    if hasattr(device, "type") and hasattr(device, "index") and not isinstance(device, int):  # torch.device
        if device.type != "cuda":
            raise InvalidValueError(f"cuda backend: {what} = {device!r} is a {device.type!r} device; expected a "
                                    "CUDA device. Fix: pass e.g. device='cuda:0'.")
        return 0 if device.index is None else cuda_ordinal(int(device.index), what)
    if isinstance(device, bool):
        raise InvalidDTypeError(f"cuda backend: {what} = {device!r} is a bool; expected an ordinal or 'cuda:N'. "
                                "Fix: pass e.g. device='cuda:0'.")
    try:
        ordinal = operator.index(device)
    except TypeError:
        raise InvalidDTypeError(f"cuda backend: {what} = {device!r} ({type(device).__name__}); expected an int "
                                "ordinal or a device string 'cuda:N'. Fix: pass e.g. device='cuda:0'.") from None
    if ordinal < 0:
        raise InvalidValueError(f"cuda backend: {what} = {ordinal} is negative; expected a CUDA ordinal >= 0. "
                                "Fix: pass e.g. device='cuda:0'.")
    return ordinal


def cuda_device_string(device: Any, what: str = "device") -> str:
    """``"cuda:N"`` for anything :func:`cuda_ordinal` accepts."""
    return f"cuda:{cuda_ordinal(device, what)}"


def check_visible(ordinal: int, primitive: str) -> None:
    """Raise :class:`PlacementError` if GPU ``ordinal`` is not one this process sees (needs cupy).

    Args:
        ordinal: the CUDA ordinal.
        primitive: what was to be placed there, for the message (``"the sum tree"``).
    """
    import cupy

    count = int(cupy.cuda.runtime.getDeviceCount())
    if ordinal >= count:
        seen = f"cuda:0..cuda:{count - 1}" if count > 1 else ("cuda:0" if count == 1 else "none")
        raise PlacementError(f"cuda backend: {primitive} was placed on cuda:{ordinal}, but this process sees "
                             f"{count} GPU{'s' if count != 1 else ''} ({seen}). Fix: place it on a visible GPU, "
                             "or check CUDA_VISIBLE_DEVICES (it renumbers the GPUs from 0).")
