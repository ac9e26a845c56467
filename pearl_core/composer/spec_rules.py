"""The units and bounds of a hardware spec's values (:mod:`pearl_core.composer.spec` applies them).

Units: :data:`UNITS` (suffix -> factor to SI, per dimension); a quantity's key in the file is
``<prefix>_<unit>`` (:data:`_DEVICE_QUANTITIES`, :data:`_LINK_QUANTITIES`). Bounds, so that
planning stays finite and fast:

* Quantities are normal floats of at most :data:`HUGE`: a subnormal (``1e-320``) or astronomic
  value is a typo, and the cost model divides by some of them (an infinite cost would reach the
  plan's JSON).
* Rates the cost model divides by (:data:`RATE_FLOOR`) are at least one per second in SI units.
* A device name has at most :data:`MAX_NAME_CHARS` characters (it is repeated in every message,
  grid cell and file of a plan).
* A spec lists at most :data:`MAX_DEVICES` devices: Algorithm 1 scores every replay-manager x
  learner pair (64 devices: 4,096 candidates, about a second), so a larger spec is refused before
  any planning.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Mapping, TypeGuard

from pearl_core.errors import SpecError

#: Unit suffixes accepted in spec keys, per dimension, with their factor to SI.
UNITS: Mapping[str, Mapping[str, float]] = {
    "bytes": {"bytes": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
              "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40},
    "seconds": {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9},
    "bytes/s": {"Bps": 1, "KBps": 1e3, "MBps": 1e6, "GBps": 1e9, "MiBps": 2**20, "GiBps": 2**30},
    "Hz": {"hz": 1, "Hz": 1, "kHz": 1e3, "MHz": 1e6, "GHz": 1e9},
    "W": {"w": 1, "W": 1},
    "FLOP/s": {"flops": 1, "GFLOPS": 1e9, "TFLOPS": 1e12},
}

#: field -> (key prefix in the file, dimension). The key is ``<prefix>_<unit>``.
_DEVICE_QUANTITIES: Mapping[str, tuple[str, str]] = {
    "memory_bytes": ("memory", "bytes"),
    "idle_power_w": ("idle_power", "W"),
    "active_power_w": ("active_power", "W"),
    "clock_hz": ("clock", "Hz"),
    "peak_flops": ("peak", "FLOP/s"),
    "mem_bandwidth_Bps": ("mem_bandwidth", "bytes/s"),
    "mem_latency_s": ("mem_latency", "seconds"),
    "launch_latency_s": ("launch_latency", "seconds"),
}
_LINK_QUANTITIES: Mapping[str, tuple[str, str]] = {
    "latency_s": ("latency", "seconds"),
    "bandwidth_Bps": ("bandwidth", "bytes/s"),
}

__all__ = ["HUGE", "UNITS", "MAX_DEVICES", "MAX_NAME_CHARS", "RATE_FLOOR", "TINY", "check_device_count", "check_name",
           "check_rates", "nonneg", "positive"]

HUGE = 1e30
TINY = sys.float_info.min
RATE_FLOOR: Mapping[str, str] = {"bandwidth_Bps": "byte/s", "mem_bandwidth_Bps": "byte/s", "peak_flops": "FLOP/s",
                                 "clock_hz": "Hz"}
MAX_NAME_CHARS = 64
MAX_DEVICES = 64


def _real(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def positive(v: Any) -> bool:
    """A normal float > 0 and at most :data:`HUGE`."""
    return _real(v) and TINY <= v <= HUGE


def nonneg(v: Any) -> bool:
    """0, or a normal float at most :data:`HUGE`."""
    return _real(v) and (v == 0 or TINY <= v <= HUGE)


def check_rates(owner: str, values: Mapping[str, Any]) -> None:
    """SI rates of at least one per second (checked after unit conversion, on the dataclass fields)."""
    for name, unit in RATE_FLOOR.items():
        v = values.get(name)
        if _real(v) and v < 1:
            raise SpecError(f"{owner}: {name} = {v!r} is invalid; expected at least 1 {unit} (the cost model divides "
                            "by it; a slower rate is a typo, e.g. a unit suffix that does not match the value). "
                            "Fix: write the real rate.")


def check_name(what: str, name: Any) -> None:
    if isinstance(name, str) and len(name) > MAX_NAME_CHARS:
        raise SpecError(f"{what}: name {name[:40]!r}... has {len(name)} characters; expected at most "
                        f"{MAX_NAME_CHARS} (letters, digits and _.:+-). Fix: use a short name such as 'gpu0' (put "
                        "free text in `description`).")


def check_device_count(where: str, n: int) -> None:
    if n > MAX_DEVICES:
        raise SpecError(f"{where}the spec lists {n} devices; PEARL plans for at most {MAX_DEVICES} (it scores every "
                        f"replay-manager x learner pair: {n ** 2:,} here). Fix: list only the devices one run can "
                        f"use, at most {MAX_DEVICES} (one machine, or the nodes of one Ray cluster the run spans).")
