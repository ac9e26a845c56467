"""Which NVIDIA GPUs are here, and how much power they draw.

:func:`probe` says why CUDA cannot be used (or ``None``); :func:`list_gpus`
describes each visible GPU from cupy's runtime API (name, memory, compute
capability, SMs, clocks); :func:`gpu_info` turns one property dict into a
:class:`~pearl_core.backend.DeviceInfo` (host logic, tested on plain dicts).
:class:`PowerMeter` reads board power from NVML (``nvidia-ml-py``) when it is
importable, else returns the spec's figure.
"""

from __future__ import annotations

from typing import Any, Mapping

from pearl_core.sdk import DeviceInfo

__all__ = ["PowerMeter", "gpu_info", "list_gpus", "probe"]


def probe() -> str | None:
    """Why no CUDA device can be used here, or ``None`` when one can."""
    try:
        import cupy
    except ImportError as exc:
        return f"cupy is not installed ({exc}); install it with `pip install pearl-cuda[cuda12]` (or [cuda13])"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - cupy raises its own error types
        return f"no usable CUDA driver or device ({type(exc).__name__}: {exc})"
    if count == 0:
        return "no CUDA device is visible"
    return None


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        value = value.split(b"\0", 1)[0].decode("utf-8", "replace")
    return str(value).strip()


def gpu_info(ordinal: int, props: Mapping[str, Any]) -> DeviceInfo:
    """A :class:`DeviceInfo` named ``cuda:<ordinal>`` from cupy's ``getDeviceProperties`` dict."""
    major, minor = int(props.get("major", 0)), int(props.get("minor", 0))
    name = _text(props.get("name", "NVIDIA GPU")) or "NVIDIA GPU"
    mem = int(props.get("totalGlobalMem", 0)) or None
    details = {
        "memory_bytes": mem,
        "compute_capability": f"{major}.{minor}",
        "multiprocessors": int(props.get("multiProcessorCount", 0)),
        "clock_khz": int(props.get("clockRate", 0)) or None,
        "memory_clock_khz": int(props.get("memoryClockRate", 0)) or None,
        "memory_bus_bits": int(props.get("memoryBusWidth", 0)) or None,
        "cooperative_launch": bool(props.get("cooperativeLaunch", 0)),
        "ordinal": ordinal,
    }
    gib = f", {mem / 2**30:.0f} GiB" if mem else ""
    return DeviceInfo(f"cuda:{ordinal}", "cuda", "cuda", f"{name} (sm_{major}{minor}{gib})", details)


def list_gpus() -> list[DeviceInfo]:
    """Every visible GPU, or ``[]`` when CUDA is unusable (never raises)."""
    if probe() is not None:
        return []
    import cupy

    out = []
    for i in range(cupy.cuda.runtime.getDeviceCount()):
        try:
            out.append(gpu_info(i, cupy.cuda.runtime.getDeviceProperties(i)))
        except Exception:  # noqa: BLE001 - a device that cannot be queried is left out
            continue
    return out


class PowerMeter:
    """Board power of one GPU: NVML when available, else a fixed figure.

    Args:
        ordinal: CUDA device ordinal (NVML's index; equal unless CUDA_VISIBLE_DEVICES reorders).
        fallback_w: watts to report without NVML (the spec's ``active_power_w``).
    """

    def __init__(self, ordinal: int, fallback_w: float):
        self.fallback_w = float(fallback_w)
        self.source = "spec"
        self._nvml = None
        self._handle = None
        try:
            import pynvml  # from nvidia-ml-py

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(ordinal)
            self._nvml = pynvml
            self.source = "nvml"
        except Exception:  # noqa: BLE001 - no NVML: fall back to the spec
            self._nvml = None

    def watts(self) -> float:
        """Current board power (W), or the fallback."""
        if self._nvml is None:
            return self.fallback_w
        try:
            return self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0
        except Exception:  # noqa: BLE001
            return self.fallback_w
