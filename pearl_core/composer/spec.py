"""Hardware specification: the devices of a machine and the links between them.

A spec is written in TOML (see ``docs/hardware-spec.md``) with explicit units in
every key name (``memory_GiB``, ``latency_us``, ``bandwidth_GBps``, ...). The
loader converts each quantity once, to SI (bytes, seconds, bytes/s, Hz, W,
FLOP/s), and everything downstream works in SI only. This is deliberate: the
authors' composer mixed ms, GB/ms and raw words in one sum.

Typical use::

    spec = HardwareSpec.load("examples/hardware/cpu-gpu-fpga.toml")
    spec.link("h100", "agilex").cost_s(4096)     # seconds to move 4 KiB (two hops via the host)

This module is data: values, parsing and validation. A spec of the devices the
installed backends detect comes from :func:`pearl_core.composer.detect.detect_hardware`.

Validation raises :class:`~pearl_core.errors.SpecError` naming the file, the
device or link, the key as written, the value and what is expected.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from pearl_core.composer.spec_rules import (
    _DEVICE_QUANTITIES, _LINK_QUANTITIES, HUGE, RATE_FLOOR, TINY, UNITS, check_device_count, check_name, check_rates,
    nonneg, positive)
from pearl_core.errors import SpecError
from pearl_core.validation import MAX_THREADS

if TYPE_CHECKING:
    from pearl_core.plugins import PluginRegistry

__all__ = ["BUILTIN_KINDS", "DeviceSpec", "HardwareSpec", "LinkSpec", "UNITS", "known_kinds", "load_spec"]

#: Device kinds the core knows without any plugin.
BUILTIN_KINDS: tuple[str, ...] = ("cpu", "cuda", "fpga")


def known_kinds(registry: "PluginRegistry | None" = None) -> tuple[str, ...]:
    """Device kinds a hardware spec may use: the built-in ones plus every registered backend's.

    ``registry`` defaults to the process-wide plugin registry; no backend is
    created or probed (the kinds are the registered classes' ``device_kind``).
    """
    if registry is None:
        from pearl_core.plugins import default_registry

        registry = default_registry()
    return BUILTIN_KINDS + tuple(k for k in registry.device_kinds() if k not in BUILTIN_KINDS)

_DEVICE_PLAIN = ("name", "kind", "cores", "threads", "index", "description", "dsp_blocks", "ram_blocks",
                 "ram_block_bits", "logic_ram_blocks", "logic_ram_block_bits", "options", "assumed", "backend")
_LINK_PLAIN = ("a", "b", "medium")
_TOP_LEVEL = ("name", "description", "host", "device", "link")

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]*$")

# Rules shared by the file loader and direct construction: (check, what is expected).
_POS = (positive, f"a number > 0 (at least {TINY:g}, at most {HUGE:g})")
_NONNEG = (nonneg, f"a number >= 0 (0 or at least {TINY:g}, at most {HUGE:g})")
_POS_INT = (lambda v: _is_int(v) and v >= 1, "an integer >= 1")
_NONNEG_INT = (lambda v: _is_int(v) and v >= 0, "an integer >= 0")
# Cores and threads size loops and thread pools: beyond MAX_THREADS is a typo (10**18), not a machine.
_THREADS = (lambda v: _is_int(v) and 1 <= v <= MAX_THREADS,
            f"an integer >= 1 and <= {MAX_THREADS} (PEARL plans for at most {MAX_THREADS} cores or threads per "
            "device; fix: write the device's real count)")
_DEVICE_RULES: Mapping[str, tuple[Callable[[Any], bool], str]] = {
    "memory_bytes": _POS, "idle_power_w": _NONNEG, "active_power_w": _NONNEG, "clock_hz": _POS,
    "peak_flops": _POS, "mem_bandwidth_Bps": _POS, "mem_latency_s": _NONNEG, "launch_latency_s": _NONNEG,
    "cores": _THREADS, "threads": _THREADS, "index": _NONNEG_INT, "dsp_blocks": _POS_INT,
    "ram_blocks": _POS_INT, "ram_block_bits": _POS_INT, "logic_ram_blocks": _NONNEG_INT,
    "logic_ram_block_bits": _POS_INT,
}
_LINK_RULES = {"latency_s": _NONNEG, "bandwidth_Bps": _POS}


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _invalid(owner: str, key: str, value: Any, expected: str) -> SpecError:
    return SpecError(f"{owner}: {key} = {value!r} is invalid; expected {expected}.")


def _check_rules(owner: str, values: Mapping[str, Any], rules: Mapping[str, tuple],
                 keys: Mapping[str, str] | None = None, raw: Mapping[str, Any] | None = None) -> None:
    for name, (ok, expected) in rules.items():
        v = values.get(name)
        if v is not None and not ok(v):
            key = (keys or {}).get(name, name)
            raise _invalid(owner, key, (raw or {}).get(name, v), expected)


@dataclass(frozen=True)
class DeviceSpec:
    """One device: what it is, how much it has, how much power it draws.

    Attributes:
        name: unique name in the spec (``"xeon"``, ``"h100"``); letters, digits, ``_.:+-``.
        kind: ``"cpu"``, ``"cuda"``, ``"fpga"`` or any kind a registered backend declares.
        memory_bytes: device memory (host DRAM, GPU HBM, FPGA board DDR).
        idle_power_w: power drawn when idle (W).
        active_power_w: power drawn when fully busy (W), ``>= idle_power_w``.
        cores: physical cores (required for ``cpu``).
        threads: hardware threads (``cpu``; default ``cores``).
        index: position among devices of its kind (``cuda:1``); filled in by order of appearance.
        description: free text (model name).
        dsp_blocks, ram_blocks, ram_block_bits, logic_ram_blocks, logic_ram_block_bits, clock_hz:
            FPGA resources (required for ``fpga``): DSP blocks, on-chip RAM blocks (M20K) and
            their size in bits, logic RAM blocks (MLAB) and their size, kernel clock.
        peak_flops: peak fp32 FLOP/s, for analytic models.
        mem_bandwidth_Bps: device-memory bandwidth, for analytic models and the
            default within-device link.
        mem_latency_s: latency of one dependent random memory access (analytic RM models).
        launch_latency_s: fixed cost of one kernel launch (GPU) or one dispatched
            operation (CPU: a torch op or a batched native call).
        options: kind-specific extras read by the kind's backend (e.g. an FPGA's
            ``initiation_interval``); scalar values only.
        assumed: names of fields filled in by defaults rather than written or measured.
        backend: the backend that drives this device, when several installed
            backends drive its kind (``backend = "cuda"``); ``None``: the one there is.
    """

    name: str
    kind: str
    memory_bytes: int
    idle_power_w: float
    active_power_w: float
    cores: int | None = None
    threads: int | None = None
    index: int | None = None
    description: str = ""
    dsp_blocks: int | None = None
    ram_blocks: int | None = None
    ram_block_bits: int | None = None
    logic_ram_blocks: int | None = None
    logic_ram_block_bits: int | None = None
    clock_hz: float | None = None
    peak_flops: float | None = None
    mem_bandwidth_Bps: float | None = None
    mem_latency_s: float | None = None
    launch_latency_s: float | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    assumed: tuple[str, ...] = ()
    backend: str | None = None

    def __post_init__(self) -> None:
        check_name("device", self.name)
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise _invalid("device", "name", self.name,
                           "a non-empty name of letters, digits and _.:+- such as 'gpu0'")
        owner = f"device {self.name!r}"
        if not isinstance(self.kind, str) or not self.kind.isidentifier():
            raise _invalid(owner, "kind", self.kind, f"one of {list(BUILTIN_KINDS)} or a plugin's kind")
        if _is_num(self.memory_bytes) and not _is_int(self.memory_bytes):
            object.__setattr__(self, "memory_bytes", int(round(self.memory_bytes)))
        _check_rules(owner, {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, _DEVICE_RULES)
        check_rates(owner, {name: getattr(self, name) for name in RATE_FLOOR if hasattr(self, name)})
        for req in ("memory_bytes", "idle_power_w", "active_power_w"):
            if getattr(self, req) is None:
                raise SpecError(f"{owner}: missing field {req!r}.")
        if self.active_power_w < self.idle_power_w:
            raise _invalid(owner, "active_power_w", self.active_power_w,
                           f"a number >= idle_power_w ({self.idle_power_w})")
        if self.kind == "cpu":
            if self.cores is None:
                raise SpecError(f"{owner}: missing field 'cores' (required for kind 'cpu'); expected an integer >= 1.")
            if self.threads is None:
                object.__setattr__(self, "threads", self.cores)
            elif self.threads < self.cores:
                raise _invalid(owner, "threads", self.threads, f"an integer >= cores ({self.cores})")
        if not isinstance(self.options, Mapping) or not all(
                isinstance(k, str) and isinstance(v, (str, int, float, bool)) for k, v in self.options.items()):
            raise _invalid(owner, "options", self.options, "a table of scalar values")
        if self.backend is not None and (not isinstance(self.backend, str) or not self.backend):
            raise _invalid(owner, "backend", self.backend, "the name of an installed backend (`pearl plugins`)")
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        object.__setattr__(self, "assumed", tuple(self.assumed))

    # -- derived ---------------------------------------------------------------
    @property
    def device_string(self) -> str:
        """``"cpu"`` for CPUs (torch has one CPU device), else ``"<kind>:<index>"`` (``"cuda:0"``)."""
        return "cpu" if self.kind == "cpu" else f"{self.kind}:{self.index or 0}"

    @property
    def onchip_ram_bits(self) -> int:
        """FPGA on-chip memory in bits: RAM blocks plus logic RAM (0 for other kinds)."""
        ram = (self.ram_blocks or 0) * (self.ram_block_bits or 0)
        return ram + (self.logic_ram_blocks or 0) * (self.logic_ram_block_bits or 0)

    def to_dict(self) -> dict[str, Any]:
        """SI-unit dict (keys are valid spec keys, so it loads back); ``None`` fields omitted."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None or (f.name in ("options", "assumed", "description") and not v):
                continue
            out[f.name] = dict(v) if f.name == "options" else list(v) if f.name == "assumed" else v
        return out


@dataclass(frozen=True)
class LinkSpec:
    """A link between two devices, or within one (``a == b``: its memory or on-chip queues).

    Moving ``n`` bytes over it costs ``latency_s + n / bandwidth_Bps`` seconds.

    Attributes:
        a, b: device names (order does not matter).
        latency_s: fixed cost of one message (s).
        bandwidth_Bps: bytes per second.
        medium: free text (``"PCIe 4.0 x16"``, ``"DDR4"``).
        via: intermediate devices of a derived route (``("xeon",)`` for two hops
            through the host); empty for a link written in the spec.
    """

    a: str
    b: str
    latency_s: float
    bandwidth_Bps: float
    medium: str = ""
    via: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for end in ("a", "b"):
            if not isinstance(getattr(self, end), str) or not getattr(self, end):
                raise _invalid("link", end, getattr(self, end), "a device name")
        _check_rules(f"link {self.a!r}-{self.b!r}", {"latency_s": self.latency_s, "bandwidth_Bps": self.bandwidth_Bps},
                     _LINK_RULES)
        check_rates(f"link {self.a!r}-{self.b!r}", {"bandwidth_Bps": self.bandwidth_Bps})
        object.__setattr__(self, "via", tuple(self.via))

    @property
    def key(self) -> frozenset[str]:
        return frozenset((self.a, self.b))

    @property
    def crossings(self) -> int:
        """Device boundaries a message crosses: 0 within a device, 1 direct, 2 via the host."""
        return 0 if self.a == self.b else 1 + len(self.via)

    def cost_s(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` bytes: ``latency_s + nbytes / bandwidth_Bps``."""
        return self.latency_s + nbytes / self.bandwidth_Bps

    def to_dict(self) -> dict[str, Any]:
        out = {"a": self.a, "b": self.b, "latency_s": self.latency_s, "bandwidth_Bps": self.bandwidth_Bps}
        if self.medium:
            out["medium"] = self.medium
        return out


def _detected_index(d: DeviceSpec) -> DeviceSpec:
    """``d`` with the index its ``options.detected_as`` names (``"cuda:1"`` -> 1) when it gives none (not CPUs)."""
    alias = d.options.get("detected_as")
    if d.index is not None or d.kind == "cpu" or not isinstance(alias, str):
        return d
    kind, sep, number = alias.partition(":")
    if sep and kind == d.kind and number.isdecimal():
        return dataclasses.replace(d, index=int(number))
    return d


@dataclass(frozen=True)
class HardwareSpec:
    """Devices and links of one machine, validated as a whole.

    Attributes:
        devices: the devices, in file order (that order breaks final ties).
        links: links as written (undirected; at most one per pair).
        host: name of the host CPU, where the runtime loop, the actors and by
            default the Data Storage run. Default: the first ``cpu`` device.
        name: a label for reports.
        source: the file it came from, or ``"detected"``; not part of equality.

    Raises:
        SpecError: duplicate device names, a link to an unknown device, two links
            for one pair, no CPU host, a device with no link to the host, or a
            device with neither a within-device link nor ``mem_bandwidth_Bps``.
    """

    devices: tuple[DeviceSpec, ...]
    links: tuple[LinkSpec, ...] = ()
    host: str | None = None
    name: str = ""
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        where = f"{self.source}: " if self.source else ""
        devices = tuple(self.devices)
        if not devices:
            raise SpecError(f"{where}the spec has no devices; expected at least one [[device]] of kind 'cpu' "
                            "(the host).")
        check_device_count(where, len(devices))
        seen: dict[str, int] = {}
        for i, d in enumerate(devices):
            if d.name in seen:
                raise SpecError(f"{where}device #{i + 1}: name {d.name!r} is already used by "
                                f"device #{seen[d.name] + 1}; expected unique names.")
            seen[d.name] = i
        # Fill indices per kind, then check (kind, index) is unique. A device's detected_as ("cuda:1") is its index
        # first: identity from detection, not spec order (a what-if device listed first takes no real one's index).
        devices = tuple(_detected_index(d) for d in devices)
        counters: dict[str, int] = {}
        taken: dict[tuple[str, int], str] = {(d.kind, d.index): d.name for d in devices
                                             if d.index is not None and d.options.get("detected_as")}
        filled = []
        for d in devices:
            idx = d.index
            if idx is None or taken.get((d.kind, idx)) != d.name or not d.options.get("detected_as"):
                if idx is None:
                    idx = counters.get(d.kind, 0)
                    while (d.kind, idx) in taken:
                        idx += 1
                    d = dataclasses.replace(d, index=idx)
                if (d.kind, idx) in taken and d.kind != "cpu":
                    raise SpecError(f"{where}device {d.name!r}: index = {idx} is already used by "
                                    f"{taken[(d.kind, idx)]!r}; expected a unique index per kind.")
                taken[(d.kind, idx)] = d.name
            counters[d.kind] = max(counters.get(d.kind, 0), idx + 1)
            filled.append(d)
        object.__setattr__(self, "devices", tuple(filled))
        host = self.host
        if host is None:
            host = next((d.name for d in filled if d.kind == "cpu"), None)
            if host is None:
                raise SpecError(f"{where}no device of kind 'cpu'; expected one host CPU (the runtime loop and the "
                                "actors run there). Fix: add a [[device]] with kind = 'cpu'.")
        elif host not in seen:
            raise _invalid(f"{where}spec", "host", host, f"the name of a device, one of {list(seen)}")
        elif filled[seen[host]].kind != "cpu":
            raise _invalid(f"{where}spec", "host", host, "a device of kind 'cpu'")
        object.__setattr__(self, "host", host)
        links = tuple(self.links)
        pairs: dict[frozenset[str], int] = {}
        for i, ln in enumerate(links):
            for end in (ln.a, ln.b):
                if end not in seen:
                    raise SpecError(f"{where}link #{i + 1} ({ln.a!r}-{ln.b!r}): device {end!r} is not in the spec; "
                                    f"expected one of {list(seen)}.")
            if ln.key in pairs:
                raise SpecError(f"{where}link #{i + 1} ({ln.a!r}-{ln.b!r}) repeats link #{pairs[ln.key] + 1}; "
                                "expected one link per device pair (links are undirected).")
            pairs[ln.key] = i
        object.__setattr__(self, "links", links)
        for d in filled:
            if frozenset((d.name,)) not in pairs and d.mem_bandwidth_Bps is None:
                raise SpecError(f"{where}device {d.name!r} has no within-device link; expected a [[link]] with "
                                f"a = b = {d.name!r} (latency_us, bandwidth_GBps), or mem_bandwidth_GBps "
                                "on the device.")
            if d.name != host and frozenset((d.name, host)) not in pairs:
                raise SpecError(f"{where}device {d.name!r} has no link to the host {host!r}; expected a [[link]] with "
                                f"a = {host!r}, b = {d.name!r} (every device talks to the host runtime).")

    # -- queries -----------------------------------------------------------------
    @functools.cached_property
    def _links_by_pair(self) -> dict[frozenset[str], LinkSpec]:
        """The written links by device pair (a planning search asks for O(devices^2) routes)."""
        return {ln.key: ln for ln in self.links}

    @property
    def host_device(self) -> DeviceSpec:
        return self.device(self.host)  # type: ignore[arg-type]

    def device(self, name: str) -> DeviceSpec:
        """The device called ``name``; SpecError naming the known devices otherwise."""
        for d in self.devices:
            if d.name == name:
                return d
        raise SpecError(f"no device named {name!r} in the spec; known devices: {[d.name for d in self.devices]}.")

    def link(self, a: str, b: str) -> LinkSpec:
        """The route from ``a`` to ``b`` as one :class:`LinkSpec`.

        * a link written in the spec, if any;
        * ``a == b`` without one: derived from the device's ``mem_bandwidth_Bps``
          (latency ``mem_latency_s`` or 0);
        * otherwise two hops through the host, store-and-forward:
          ``latency = lat(a,h) + lat(h,b)``, ``1/bandwidth = 1/bw(a,h) + 1/bw(h,b)``,
          so ``cost_s(n) = [lat(a,h) + n/bw(a,h)] + [lat(h,b) + n/bw(h,b)]`` exactly.
        """
        self.device(a), self.device(b)
        ln = self._links_by_pair.get(frozenset((a, b)))
        if ln is not None:
            return ln if (ln.a, ln.b) == (a, b) else dataclasses.replace(ln, a=a, b=b)
        if a == b:
            d = self.device(a)
            return LinkSpec(a, a, d.mem_latency_s or 0.0, d.mem_bandwidth_Bps,  # type: ignore[arg-type]
                            medium="device memory (from mem_bandwidth)")
        h = self.host
        first, second = self.link(a, h), self.link(h, b)  # type: ignore[arg-type]
        return LinkSpec(a, b, first.latency_s + second.latency_s,
                        1.0 / (1.0 / first.bandwidth_Bps + 1.0 / second.bandwidth_Bps),
                        medium=f"{first.medium or 'link'} + {second.medium or 'link'} via {h}", via=(h,))  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        """SI-unit dict; :meth:`from_dict` loads it back to an equal spec."""
        return {"name": self.name, "host": self.host, "device": [d.to_dict() for d in self.devices],
                "link": [ln.to_dict() for ln in self.links]}

    def summary(self) -> str:
        """One line per device, for reports."""
        lines = [f"{self.name or 'hardware'} (host {self.host}; {self.source or 'in memory'})"]
        for d in self.devices:
            extra = f", {d.cores} cores" if d.cores else ""
            lines.append(f"  {d.name}: {d.kind} ({d.device_string}){extra}, {d.memory_bytes / 2**30:.1f} GiB, "
                         f"{d.idle_power_w:g}-{d.active_power_w:g} W{' - ' + d.description if d.description else ''}")
        return "\n".join(lines)

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<dict>",
                  kinds: Iterable[str] | None = None, registry: "PluginRegistry | None" = None) -> "HardwareSpec":
        """Build a spec from parsed TOML (keys with explicit units), validating everything.

        Args:
            data: top-level table: ``name``, ``description``, ``host``, ``device`` (list of tables),
                ``link`` (list of tables).
            source: file name for error messages.
            kinds: allowed device kinds; default :data:`BUILTIN_KINDS` plus every
                registered backend's ``device_kind``.
            registry: plugin registry for the default kinds.
        """
        from pearl_core.composer.specfields import check_resource_fields

        allowed = tuple(kinds) if kinds is not None else known_kinds(registry)
        if not isinstance(data, Mapping):
            raise SpecError(f"{source}: expected a table at the top level; found {type(data).__name__}.")
        _unknown_keys(f"{source}: top level", data, _TOP_LEVEL)
        devices = []
        raw_devices = data.get("device", [])
        if not isinstance(raw_devices, list):
            raise SpecError(f"{source}: 'device' must be an array of tables ([[device]] sections).")
        for i, raw in enumerate(raw_devices):
            devices.append(_parse_device(raw, i, source, allowed))
            check_resource_fields(devices[-1], registry)
        raw_links = data.get("link", [])
        if not isinstance(raw_links, list):
            raise SpecError(f"{source}: 'link' must be an array of tables ([[link]] sections).")
        links = [_parse_link(raw, i, source) for i, raw in enumerate(raw_links)]
        for key in ("name", "host"):
            if key in data and not isinstance(data[key], str):
                raise _invalid(f"{source}: top level", key, data[key], "a string")
        return cls(tuple(devices), tuple(links), host=data.get("host"), name=data.get("name", ""), source=source)

    @classmethod
    def from_toml(cls, text: str, *, source: str = "<string>", **kw: Any) -> "HardwareSpec":
        """Parse TOML text (see :meth:`from_dict` for keyword arguments)."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SpecError(f"{source}: not valid TOML ({exc}). Fix the syntax; see docs/hardware-spec.md.") from exc
        return cls.from_dict(data, source=source, **kw)

    @classmethod
    def load(cls, path: str | os.PathLike[str], **kw: Any) -> "HardwareSpec":
        """Read a spec file (see :meth:`from_dict` for keyword arguments)."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SpecError(f"hardware spec {str(p)!r} does not exist. Fix: pass a TOML file such as "
                            "examples/hardware/this-machine.toml, or omit it to detect the devices.") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise SpecError(f"hardware spec {str(p)!r} cannot be read ({exc}).") from exc
        return cls.from_toml(text, source=str(p), **kw)


def load_spec(path: str | os.PathLike[str], **kw: Any) -> HardwareSpec:
    """Shorthand for :meth:`HardwareSpec.load`."""
    return HardwareSpec.load(path, **kw)


# --------------------------------------------------------------------------- parsing helpers
def _unknown_keys(owner: str, table: Mapping[str, Any], allowed: Iterable[str]) -> None:
    allowed = list(allowed)
    for key in table:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; expected one of {allowed}."
            raise SpecError(f"{owner}: unknown field {key!r}{hint}")


def _unit_keys(quantities: Mapping[str, tuple[str, str]]) -> dict[str, tuple[str, float]]:
    out = {}
    for fname, (prefix, dim) in quantities.items():
        for unit, factor in UNITS[dim].items():
            out[f"{prefix}_{unit}"] = (fname, factor)
    return out


_DEVICE_UNIT_KEYS = _unit_keys(_DEVICE_QUANTITIES)
_LINK_UNIT_KEYS = _unit_keys(_LINK_QUANTITIES)


def _convert(owner: str, table: Mapping[str, Any], plain: tuple[str, ...], unit_keys: Mapping[str, tuple[str, float]],
             rules: Mapping[str, tuple]) -> dict[str, Any]:
    """Keys with units -> SI field values; checks each value against its rule, naming the key as written."""
    _unknown_keys(owner, table, list(plain) + list(unit_keys))
    values: dict[str, Any] = {}
    written: dict[str, str] = {}
    raw: dict[str, Any] = {}
    for key, value in table.items():
        if key in plain:
            values[key] = value
            written[key], raw[key] = key, value
            continue
        fname, factor = unit_keys[key]
        if fname in written:
            raise SpecError(f"{owner}: {written[fname]!r} and {key!r} give the same quantity twice; keep one.")
        ok, expected = rules[fname]
        if not _is_num(value) or not ok(value):
            raise _invalid(owner, key, value, expected)
        # Divide by the integer reciprocal for sub-unit factors: 10 / 1e6 is exactly 1e-05; 10 * 1e-6 is not.
        values[fname] = value if factor == 1 else value * factor if factor > 1 else value / round(1 / factor)
        if not ok(values[fname]):  # e.g. memory_GiB = 1e29 is over 1e30 bytes: name the key as written
            raise _invalid(owner, key, value, f"{expected} whose value in {fname} ({values[fname]!r}) is also "
                           "valid (it overflows or underflows). Fix: write the real quantity")
        written[fname], raw[fname] = key, value
    # Rules on the plain (unitless) fields, still naming the key as written.
    _check_rules(owner, values, {k: r for k, r in rules.items() if k in plain}, written, raw)
    return values


def _parse_device(raw: Any, i: int, source: str, kinds: tuple[str, ...]) -> DeviceSpec:
    if not isinstance(raw, Mapping):
        raise SpecError(f"{source}: device #{i + 1} must be a table ([[device]] section).")
    name = raw.get("name")
    owner = f"{source}: device {name!r}" if isinstance(name, str) and name else f"{source}: device #{i + 1} (no name)"
    values = _convert(owner, raw, _DEVICE_PLAIN, _DEVICE_UNIT_KEYS, _DEVICE_RULES)
    required = [("name", "name", "a unique string such as 'gpu0'"), ("kind", "kind", f"one of {list(kinds)}"),
                ("memory_bytes", "memory", "memory_GiB (or memory_bytes, memory_GB, ...)"),
                ("idle_power_w", "idle_power", "idle_power_W"), ("active_power_w", "active_power", "active_power_W")]
    for fname, shown, expected in required:
        if fname not in values:
            raise SpecError(f"{owner}: missing field {shown!r}; expected {expected}.")
        if fname == "kind" and values["kind"] not in kinds:
            close = difflib.get_close_matches(str(values["kind"]), kinds, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else " Fix: install the plugin for that kind."
            raise SpecError(f"{owner}: kind = {values['kind']!r} is unknown; expected one of {list(kinds)} "
                            f"(built-in kinds and those of installed backends).{hint}")
    if "options" in values and not isinstance(values["options"], Mapping):
        raise _invalid(owner, "options", values["options"], "a table ([device.options])")
    try:
        return DeviceSpec(**values)
    except SpecError as exc:
        raise SpecError(f"{source}: {exc}") from None
    except TypeError as exc:
        raise SpecError(f"{owner}: {exc}") from None


def _parse_link(raw: Any, i: int, source: str) -> LinkSpec:
    if not isinstance(raw, Mapping):
        raise SpecError(f"{source}: link #{i + 1} must be a table ([[link]] section).")
    a, b = raw.get("a"), raw.get("b")
    owner = f"{source}: link #{i + 1} ({a!r}-{b!r})"
    values = _convert(owner, raw, _LINK_PLAIN, _LINK_UNIT_KEYS, _LINK_RULES)
    for fname, shown, expected in (
            ("a", "a", "a device name"), ("b", "b", "a device name (equal to a for a within-device link)"),
            ("latency_s", "latency", "latency_us (or latency_s, latency_ms, latency_ns)"),
            ("bandwidth_Bps", "bandwidth", "bandwidth_GBps (or bandwidth_Bps, bandwidth_MBps, ...)")):
        if fname not in values:
            raise SpecError(f"{owner}: missing field {shown!r}; expected {expected}.")
    try:
        return LinkSpec(**values)
    except SpecError as exc:
        raise SpecError(f"{source}: {exc}") from None
