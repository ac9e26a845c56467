"""Hardware detection: a :class:`~pearl_core.composer.spec.HardwareSpec` of the devices the installed backends see.

The spec module is data (values, parsing, validation); building a spec from
what the available backends report lives here::

    from pearl_core.composer.detect import detect_hardware

    spec = detect_hardware()        # every available backend's devices, default links

Fields a backend does not report (power, bandwidth, latencies) come from
conservative defaults and are listed in each device's ``assumed``: the host CPU's are the
core's, an accelerator's are its backend's ``spec_defaults`` (else generic ones). The fields a
backend declares it reads (``spec_fields``, e.g. an FPGA's resources) are taken from the
device's ``details`` when it reports them.
"""

from __future__ import annotations

import os
import platform
import re
import warnings
from typing import TYPE_CHECKING, Any, Mapping

from pearl_core.composer.backends import detected_devices
from pearl_core.composer.spec import DeviceSpec, HardwareSpec, LinkSpec, _is_int, _is_num
from pearl_core.errors import SpecError

if TYPE_CHECKING:
    from pearl_core.plugins import PluginRegistry

__all__ = ["backend_defaults", "cpu_model", "detect_hardware"]


def detect_hardware(registry: "PluginRegistry | None" = None, *, emulated: bool = False) -> HardwareSpec:
    """A spec of the devices the available backends detect, with conservative defaults.

    Every device of every available backend becomes a :class:`DeviceSpec`
    (cores and memory from the backend's ``details``; power, bandwidth and
    latencies from per-kind defaults, listed in ``assumed``). The host is the
    first CPU; if no backend reports one, the host is described from
    ``os.cpu_count()``. Links: the host's memory (5 us, 5 GB/s), each
    accelerator's own memory from its ``mem_bandwidth`` and a host link of
    10 us / 8 GB/s (a modest PCIe link). Devices whose ``details`` say
    ``emulated`` (a functional emulator) are left out unless ``emulated=True``:
    their timings say nothing about the hardware they emulate (an emulated
    FPGA is still modelled analytically, from its resources). A device that cannot be
    described (e.g. an FPGA without its resources) is left out with a warning.

    Args:
        registry: the plugin registry to ask; default the process-wide one.
    """
    devices: list[DeviceSpec] = []
    for bname, obj, info in detected_devices(registry):
        if (info.details or {}).get("emulated") and not emulated:
            continue  # a functional emulator runs kernels but has no speed or resources to plan with
        try:
            devices.append(_device_from_info(info, {d.name for d in devices}, bname, obj))
        except SpecError as exc:
            # e.g. an accelerator the backend cannot fully describe: nothing to plan with.
            warnings.warn(f"hardware detection leaves out {info.name!r} of backend {bname!r}: {exc} "
                          "Fix: describe it in a hardware spec file.", stacklevel=2)
    if not any(d.kind == "cpu" for d in devices):
        devices.insert(0, _default_device("cpu0", "cpu", {"cores": os.cpu_count() or 1}, "host CPU"))
    host = next(d.name for d in devices if d.kind == "cpu")
    links = [LinkSpec(host, host, 5e-6, 5e9, medium="host shared memory (default)")]
    links += [LinkSpec(host, d.name, 10e-6, 8e9, medium="host link (default)") for d in devices if d.name != host]
    return HardwareSpec(tuple(devices), tuple(links), host=host, name="detected", source="detected")


_KIND_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    # Conservative guesses, used only for detected devices; each is listed in DeviceSpec.assumed. The host CPU's
    # are the core's; an accelerator's come from its backend's ``spec_defaults``, else the generic ones.
    "cpu": {"idle_power_w": 2.0, "active_power_w": 6.0, "per_core_power": True,
            "mem_bandwidth_Bps": 5e9, "memory_bytes": 8 * 2**30},
}
_GENERIC_DEFAULT = {"idle_power_w": 20.0, "active_power_w": 75.0, "mem_bandwidth_Bps": 10e9, "memory_bytes": 4 * 2**30}


def backend_defaults(bname: str, backend: Any) -> dict[str, float] | None:
    """A backend's ``spec_defaults`` for the devices it detects (the four figures of :data:`_GENERIC_DEFAULT`,
    numbers > 0), or ``None`` when it declares none.

    Raises:
        SpecError: they are not such a mapping.
    """
    given = getattr(backend, "spec_defaults", None)
    if given is None:
        return None
    if not isinstance(given, Mapping) or set(given) != set(_GENERIC_DEFAULT) or not all(
            _is_num(v) and v > 0 for v in given.values()):
        raise SpecError(f"backend {bname!r}: spec_defaults = {given!r:.200} is invalid; expected numbers > 0 for "
                        f"exactly {sorted(_GENERIC_DEFAULT)}.")
    return dict(given)


def _default_device(name: str, kind: str, details: Mapping[str, Any], description: str,
                    kind_defaults: Mapping[str, Any] | None = None, fields: tuple[str, ...] = ()) -> DeviceSpec:
    defaults = dict(kind_defaults or _KIND_DEFAULTS.get(kind, _GENERIC_DEFAULT))
    per_core = defaults.pop("per_core_power", False)
    values: dict[str, Any] = {"name": name, "kind": kind, "description": description}
    # The fields the backend reads to model its device (its ``spec_fields``), as its details give them.
    values.update({f: details[f] for f in fields if details.get(f) is not None})
    assumed = []
    cores = details.get("cores")
    if _is_int(cores) and cores >= 1:
        values["cores"] = cores
    elif kind == "cpu":
        values["cores"], _ = os.cpu_count() or 1, assumed.append("cores")
    mem = details.get("memory_bytes")
    if _is_num(mem) and mem > 0:
        values["memory_bytes"] = int(mem)
    else:
        values["memory_bytes"] = defaults["memory_bytes"]
        assumed.append("memory_bytes")
    for key in ("idle_power_w", "active_power_w"):
        scale = values.get("cores", 1) if per_core else 1
        values[key] = defaults[key] * scale
        assumed.append(key)
    values["mem_bandwidth_Bps"] = defaults["mem_bandwidth_Bps"] * (values.get("cores", 1) if kind == "cpu" else 1)
    assumed.append("mem_bandwidth_Bps")
    return DeviceSpec(**values, assumed=tuple(assumed))


def _device_from_info(info: Any, taken: set[str], bname: str = "", backend: Any = None) -> DeviceSpec:
    name = re.sub(r"[^A-Za-z0-9_.:+-]", "_", str(info.name)) or str(info.kind)
    base, n = name, 1
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    fields = getattr(backend, "spec_fields", ())
    fields = tuple(f for f in fields if isinstance(f, str)) if isinstance(fields, (tuple, list)) else ()
    defaults = None if info.kind == "cpu" else backend_defaults(bname, backend)
    return _default_device(name, info.kind, dict(info.details or {}), info.description, defaults, fields)


def cpu_model() -> str:
    """This machine's CPU model (``/proc/cpuinfo``'s first model name, else the platform's)."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            model = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), model)
    except OSError:
        pass
    return model
