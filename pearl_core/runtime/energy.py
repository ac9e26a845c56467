"""Energy of a measured window: measured where a meter exists, modelled (and labelled so) where not.

:class:`EnergyMeter` brackets a window (``start()`` ... ``stop()``, or ``with``) and returns an
:class:`EnergyReading`: the window's seconds, joules in total and per part, and for each part how it was
obtained::

    with EnergyMeter(cpu_watts=(40.0, 150.0)) as meter:
        train()
    meter.reading.per_joule(env_steps)      # env steps per joule, None when no joules were counted
    meter.reading.sources                   # {"gpu:0": "measured: NVML total-energy counter", "cpu": ...}

The parts:

* ``gpu:N`` — GPU ``N`` (an NVML index) from NVML's total-energy counter
  (``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver loaded), its difference across the
  window. No NVML (``pynvml``, from ``nvidia-ml-py``, not importable, or ``nvmlInit`` failing: no driver, no
  GPU) means no GPU parts, never zeros; ``sources["gpu"]`` then says why. A GPU whose counter cannot be read
  at the start, or fails during the window, is ``"unavailable: <why>"`` in ``sources`` with no number in
  ``parts``: the run goes on, and :attr:`EnergyReading.complete` is ``False``.
* ``cpu`` — measured from RAPL where readable: the sum of the ``package-*`` zones under
  ``/sys/class/powercap`` (``intel-rapl:N/energy_uj``; the whole packages, every process on them), each
  counter's wrap at ``max_energy_range_uj`` undone, and read every ``poll_s`` seconds during the window so
  that a long window cannot hide a wrap. Otherwise (no powercap, or ``energy_uj`` readable only by root,
  as on most kernels since 2020) **modelled**: the CPU seconds of this process tree over the window
  (this process and its descendants from ``/proc``, reaped children included; ``getrusage`` of this
  process and its reaped children where there is no ``/proc``) give ``utilisation = cpu_s / (wall_s *
  cores)``, ``watts = idle + (active - idle) * utilisation`` and ``joules = watts * wall_s``. The watts are
  ``cpu_watts`` (the hardware spec's idle and active power of the host) or, when none is given,
  :data:`DEFAULT_CPU_WATTS_PER_CORE` times the cores (the composer's own assumption for a detected CPU),
  labelled as a generic default.
"""

from __future__ import annotations

import logging
import os
import resource
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

from pearl_core.errors import InvalidValueError

__all__ = ["DEFAULT_CPU_WATTS_PER_CORE", "EnergyMeter", "EnergyReading", "NvmlCounters", "RaplCounters", "RunEnergy",
           "process_tree_cpu_s"]

log = logging.getLogger(__name__)

#: (idle W, active W) per core of a CPU no spec describes: the figures the composer assumes for a detected host
#: CPU (``pearl_core.composer.detect``), so a modelled part and the composer's power model agree.
DEFAULT_CPU_WATTS_PER_CORE = (2.0, 6.0)
#: Seconds between RAPL reads during a window: a package would need over 4 kW to wrap a typical counter
#: (``max_energy_range_uj`` about 262 kJ) twice in that time.
RAPL_POLL_S = 30.0


@dataclass(frozen=True)
class EnergyReading:
    """The energy of one window.

    Attributes:
        seconds: the window's wall time.
        joules: the total over ``parts``.
        parts: joules per part, e.g. ``{"gpu:0": 812.0, "cpu": 301.5}``.
        sources: how each part was obtained (``"measured: ..."``, ``"modelled: ..."``), and
            ``"unavailable: <why>"`` for a part with no number (then not in ``parts``); ``"gpu"`` says why
            no GPU was metered, when none was.
    """

    seconds: float
    joules: float
    parts: Mapping[str, float] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", MappingProxyType(dict(self.parts)))
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    @property
    def complete(self) -> bool:
        """Whether every part that was to be metered has a number (none is ``"unavailable: ..."``)."""
        return not any(s.startswith("unavailable") for s in self.sources.values())

    @property
    def watts(self) -> float | None:
        """Average power over the window, ``None`` for an empty window."""
        return self.joules / self.seconds if self.seconds > 0 else None

    def per_joule(self, count: float) -> float | None:
        """``count / joules`` (e.g. env steps per joule), ``None`` when no joules were counted."""
        return count / self.joules if self.joules > 0 else None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: seconds, joules, watts, parts, sources, complete."""
        return {"seconds": self.seconds, "joules": self.joules, "watts": self.watts, "parts": dict(self.parts),
                "sources": dict(self.sources), "complete": self.complete}


# --------------------------------------------------------------------------- RAPL
class RaplCounters:
    """The ``package-*`` RAPL zones under ``root`` (``/sys/class/powercap``): joules since :meth:`start`.

    Raises (from the constructor):
        OSError: no package zone, or its counter cannot be read (the message says which and why).
    """

    def __init__(self, root: str | os.PathLike[str] = "/sys/class/powercap"):
        base = Path(root)
        zones = []
        for zone in sorted(base.glob("intel-rapl:*")) if base.is_dir() else ():
            if zone.name.count(":") != 1:  # sub-zones (core, uncore, dram) are not packages
                continue
            try:
                name = (zone / "name").read_text().strip()
            except OSError:
                continue
            if name.startswith("package"):
                zones.append((name, zone))
        if not zones:
            raise OSError(f"no RAPL package zone under {str(base)!r}")
        self.names = tuple(n for n, _ in zones)
        self._files = [z / "energy_uj" for _, z in zones]
        self._ranges = [int((z / "max_energy_range_uj").read_text()) for _, z in zones]
        self._last = self._read()  # an unreadable counter (root-only on most kernels) fails here
        self._total_uj = 0
        self._lock = threading.Lock()

    def _read(self) -> list[int]:
        return [int(f.read_text()) for f in self._files]

    def start(self) -> None:
        with self._lock:
            self._last, self._total_uj = self._read(), 0

    def poll(self) -> None:
        """Add what each counter advanced since the last read (a counter that wrapped past its range included)."""
        with self._lock:
            now = self._read()
            for i, (prev, cur) in enumerate(zip(self._last, now)):
                self._total_uj += cur - prev if cur >= prev else cur + self._ranges[i] - prev
            self._last = now

    def joules(self) -> float:
        """Joules from :meth:`start` to the last :meth:`poll`."""
        return self._total_uj / 1e6

    @property
    def label(self) -> str:
        return "measured: RAPL " + ",".join(self.names)


# --------------------------------------------------------------------------- NVML
class NvmlCounters:
    """NVML's total-energy counters of some GPUs (``nvml``: the ``pynvml`` module or an object like it).

    ``gpus=None``: every GPU NVML sees (``nvmlDeviceGetCount``). Calls ``nvmlInit`` here and ``nvmlShutdown``
    in :meth:`close`. A GPU whose counter cannot be read is left out, its reason in :attr:`unavailable`.

    Raises (from the constructor):
        Exception: ``nvmlInit`` (or counting the GPUs) failed: no driver or no GPU.
    """

    def __init__(self, nvml: Any, gpus: Sequence[int] | None = None):
        self.nvml = nvml
        nvml.nvmlInit()
        try:
            indices = list(range(int(nvml.nvmlDeviceGetCount()))) if gpus is None else [int(g) for g in gpus]
        except Exception:
            nvml.nvmlShutdown()
            raise
        self.handles: dict[str, Any] = {}
        self.start_mj: dict[str, float] = {}
        self.unavailable: dict[str, str] = {}
        for i in indices:
            key = f"gpu:{i}"
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                self.start_mj[key] = float(nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
                self.handles[key] = handle
            except Exception as exc:  # noqa: BLE001 - NVMLError (not supported, GPU lost, ...): this GPU is out
                self.unavailable[key] = f"unavailable: NVML total-energy counter not readable ({_why(exc)})"

    def joules(self) -> dict[str, float | str]:
        """Joules per GPU since the constructor, or ``"unavailable: <why>"`` for one that failed since."""
        out: dict[str, float | str] = {}
        for key, handle in self.handles.items():
            try:
                end = float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
            except Exception as exc:  # noqa: BLE001 - a meter never stops a run
                out[key] = f"unavailable: NVML total-energy counter failed during the window ({_why(exc)})"
                continue
            out[key] = max(0.0, end - self.start_mj[key]) / 1000.0
        return out

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down a library that failed is not worth a failed run
            pass


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _import_nvml() -> Any:
    import pynvml  # nvidia-ml-py

    return pynvml


# --------------------------------------------------------------------------- CPU time
def process_tree_cpu_s(pid: int | None = None, proc: str | os.PathLike[str] = "/proc") -> float:
    """User + system CPU seconds of process ``pid`` (default: this one) and its live descendants, each with its
    reaped children's: what the tree has used so far. Without ``/proc``: ``getrusage`` of this process and its
    reaped children."""
    root = Path(proc)
    pid = os.getpid() if pid is None else pid
    if not (root / str(pid) / "stat").is_file():
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    stats: dict[int, tuple[int, float]] = {}  # pid -> (parent, ticks)
    for entry in root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
            rest = text[text.rfind(")") + 2:].split()  # after "pid (comm) ": state ppid ... utime stime cutime cstime
            stats[int(entry.name)] = (int(rest[1]), sum(float(v) for v in rest[11:15]))
        except (OSError, ValueError, IndexError):  # gone since listed, or not a stat line this parser knows
            continue
    children: dict[int, list[int]] = {}
    for p, (parent, _) in stats.items():
        children.setdefault(parent, []).append(p)
    ticks, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        if p in stats:
            ticks += stats[p][1]
            todo.extend(children.get(p, ()))
    return ticks / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- the meter
class EnergyMeter:
    """Meters a window: GPUs by NVML, the CPU by RAPL or a labelled model (see the module docstring).

    Args:
        gpus: NVML indices to meter; ``None``: every GPU NVML sees.
        cpu_watts: ``(idle W, active W)`` of the host CPU for the modelled CPU part (the hardware spec's);
            ``None``: :data:`DEFAULT_CPU_WATTS_PER_CORE` times ``cores``, labelled as a generic default.
        cores: logical CPUs the modelled utilisation is relative to (default ``os.cpu_count()``).
        nvml: the NVML module (default: ``import pynvml`` at :meth:`start`; not importable: no GPU parts).
        rapl_root: where the RAPL zones are (``/sys/class/powercap``).
        poll_s: seconds between RAPL reads during the window (a thread; ``None``: only at start and stop).
        clock: wall clock (default ``time.perf_counter``); cpu_seconds: the process tree's CPU seconds so far
            (default :func:`process_tree_cpu_s`). Both for tests.
        cpu_watts_note: where ``cpu_watts`` came from, added to the modelled part's label.

    Raises:
        InvalidValueError: ``cpu_watts`` not two numbers ``0 <= idle <= active``, ``cores`` < 1, or ``gpus`` not
            integers >= 0.
    """

    def __init__(self, *, gpus: Sequence[int] | None = None, cpu_watts: tuple[float, float] | None = None,
                 cores: int | None = None, nvml: Any = None, rapl_root: str = "/sys/class/powercap",
                 poll_s: float | None = RAPL_POLL_S, clock: Callable[[], float] = time.perf_counter,
                 cpu_seconds: Callable[[], float] = process_tree_cpu_s, cpu_watts_note: str = ""):
        self.cores = int(os.cpu_count() or 1) if cores is None else cores
        if isinstance(self.cores, bool) or not isinstance(self.cores, int) or self.cores < 1:
            raise InvalidValueError(f"EnergyMeter: cores = {cores!r} is invalid; expected an integer >= 1 (the "
                                    "logical CPUs the utilisation is relative to). Fix: pass e.g. cores=16, or "
                                    "leave it out for os.cpu_count().")
        if cpu_watts is None:
            idle, active = (w * self.cores for w in DEFAULT_CPU_WATTS_PER_CORE)
            self._watts_label = (f"generic default watts (idle {idle:g} W, active {active:g} W: "
                                 f"{DEFAULT_CPU_WATTS_PER_CORE[0]:g} and {DEFAULT_CPU_WATTS_PER_CORE[1]:g} W per core "
                                 f"x {self.cores}; no spec given)")
        else:
            try:
                idle, active = (float(w) for w in cpu_watts)
            except (TypeError, ValueError):
                idle = active = float("nan")
            if not (0 <= idle <= active < float("inf")):
                raise InvalidValueError(f"EnergyMeter: cpu_watts = {cpu_watts!r} is invalid; expected (idle W, "
                                        "active W) with 0 <= idle <= active. Fix: pass the host's idle_power_w and "
                                        "active_power_w from its hardware spec, or leave it out for the default.")
            note = f"; {cpu_watts_note}" if cpu_watts_note else ""
            self._watts_label = f"spec watts (idle {idle:g} W, active {active:g} W{note})"
        self.cpu_watts = (idle, active)
        if gpus is not None and (isinstance(gpus, (str, bytes)) or not all(
                isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gpus)):
            raise InvalidValueError(f"EnergyMeter: gpus = {gpus!r} is invalid; expected NVML indices (integers >= 0). "
                                    "Fix: pass e.g. gpus=[0], or leave it out to meter every GPU NVML sees.")
        self.gpus = None if gpus is None else list(gpus)
        self.nvml, self.rapl_root, self.poll_s = nvml, rapl_root, poll_s
        self._clock, self._cpu_seconds = clock, cpu_seconds
        self.reading: EnergyReading | None = None
        self._t0 = self._cpu0 = 0.0
        self._nvml: NvmlCounters | None = None
        self._no_gpu = ""
        self._rapl: RaplCounters | None = None
        self._no_rapl = ""
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self._running = False

    # -- window ---------------------------------------------------------------------------
    def start(self) -> None:
        """Open the window: read every counter now (a meter that cannot be read is noted, never raised)."""
        if self._running:
            self.stop()
        self.reading, self._no_gpu, self._no_rapl = None, "", ""
        self._nvml = self._rapl = None
        try:
            nvml = self.nvml if self.nvml is not None else _import_nvml()
            self._nvml = NvmlCounters(nvml, self.gpus)
        except Exception as exc:  # noqa: BLE001 - no NVML, no driver, no GPU: no GPU parts
            self._no_gpu = f"none metered: NVML not usable ({_why(exc)})"
        try:
            self._rapl = RaplCounters(self.rapl_root)
            self._rapl.start()
        except (OSError, ValueError) as exc:
            self._no_rapl = f"RAPL not readable: {_why(exc)}"
        self._stop.clear()
        if self._rapl is not None and self.poll_s:
            self._poller = threading.Thread(target=self._poll_rapl, name="pearl-energy-rapl", daemon=True)
            self._poller.start()
        try:
            self._t0, self._cpu0 = self._clock(), self._cpu_seconds()
        except BaseException:
            self._end_poller()
            if self._nvml is not None:
                self._nvml.close()
            raise
        self._running = True

    def _end_poller(self) -> None:
        self._stop.set()
        if self._poller is not None:
            self._poller.join()
            self._poller = None

    def _poll_rapl(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                if self._rapl is not None:
                    self._rapl.poll()
            except (OSError, ValueError):  # read again at stop(), which decides
                pass

    def stop(self) -> EnergyReading:
        """Close the window and return its :class:`EnergyReading` (also kept as :attr:`reading`)."""
        if not self._running:
            if self.reading is not None:
                return self.reading
            raise InvalidValueError("EnergyMeter.stop() was called before start(). Fix: call start() when the "
                                    "window opens (or use the meter as a context manager).")
        seconds, cpu_s = self._clock() - self._t0, self._cpu_seconds() - self._cpu0
        self._running = False
        self._end_poller()
        parts: dict[str, float] = {}
        sources: dict[str, str] = {}
        if self._nvml is not None:
            got = {**self._nvml.joules(), **self._nvml.unavailable}
            self._nvml.close()
            for key in sorted(got, key=lambda k: int(k.split(":")[1])):
                value = got[key]
                if isinstance(value, str):
                    sources[key] = value
                else:
                    parts[key], sources[key] = value, "measured: NVML total-energy counter"
            if not got:
                sources["gpu"] = "none metered: NVML sees no GPU"
        else:
            sources["gpu"] = self._no_gpu
        cpu_j, cpu_source = self._cpu_part(seconds, cpu_s)
        parts["cpu"], sources["cpu"] = cpu_j, cpu_source
        self.reading = EnergyReading(seconds, sum(parts.values()), parts, sources)
        return self.reading

    def _cpu_part(self, seconds: float, cpu_s: float) -> tuple[float, str]:
        why = self._no_rapl
        if self._rapl is not None:
            try:
                self._rapl.poll()
                return self._rapl.joules(), self._rapl.label
            except (OSError, ValueError) as exc:
                why = f"RAPL failed during the window: {_why(exc)}"
        idle, active = self.cpu_watts
        util = min(1.0, max(0.0, cpu_s) / (seconds * self.cores)) if seconds > 0 else 0.0
        watts = idle + (active - idle) * util
        return watts * max(0.0, seconds), (
            f"modelled: utilisation x {self._watts_label}; utilisation {util:.3f} = {max(0.0, cpu_s):.2f} CPU s of "
            f"this process tree / ({seconds:.2f} s x {self.cores} cores); {why}")

    def __enter__(self) -> "EnergyMeter":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._running:
            self.stop()


# --------------------------------------------------------------------------- a run's window
class RunEnergy:
    """A run's callback (:mod:`pearl_core.callbacks`) metering it from ``on_start`` to ``on_end``.

    ``on_start`` comes once the run holds its log directory: for the parallel runtime that is before its
    worker processes start, so the window holds their start-up as well as the run clock's time (the window's
    ``seconds`` against the result's ``startup_s`` and ``wall_time_s`` says how much). The CPU's watts for a
    modelled part are the host's in ``spec`` (a :meth:`HardwareSpec.to_dict`, e.g. the composed plan's), else
    the generic default.
    """

    def __init__(self, spec: Mapping[str, Any] | None = None, **meter_kw: Any):
        host = _host_device(spec)
        if host is not None and "cpu_watts" not in meter_kw:
            assumed = set(host.get("assumed", ()))
            meter_kw["cpu_watts"] = (host["idle_power_w"], host["active_power_w"])
            meter_kw.setdefault("cores", host.get("threads") or host.get("cores") or None)
            meter_kw.setdefault("cpu_watts_note", f"host {host.get('name')!r} of the plan's hardware spec" + (
                ", figures assumed by detection" if assumed & {"idle_power_w", "active_power_w"} else ""))
        self.meter = EnergyMeter(**meter_kw)
        self.env_steps_at_start = 0

    def on_start(self, run: Any) -> None:
        self.env_steps_at_start = int(run.env_steps)
        try:
            self.meter.start()
        except Exception as exc:  # noqa: BLE001 - metering never stops a run: it goes unmetered, said so
            log.warning("the run's energy is not metered: starting the meter failed (%s)", _why(exc))

    def on_end(self, run: Any, result: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop the meter if it runs (a run that failed or stopped its callbacks leaves it running); never raises."""
        try:
            if self.meter._running:
                self.meter.stop()
        except Exception as exc:  # noqa: BLE001 - as above
            log.warning("the run's energy is not metered: stopping the meter failed (%s)", _why(exc))

    def fields(self, env_steps: int) -> dict[str, Any]:
        """``result.json``'s ``energy`` (the reading, the window and the env steps in it) and
        ``env_steps_per_joule`` (``None`` when nothing was metered), for a run that ended at ``env_steps``."""
        reading = self.meter.reading
        if reading is None:
            return {"energy": None, "env_steps_per_joule": None}
        steps = int(env_steps) - self.env_steps_at_start
        return {"energy": {**reading.to_json(), "env_steps": steps,
                           "window": "from when the run held its log directory to its end: the run clock's time "
                                     "and the workers' start-up (see startup_s)"},
                "env_steps_per_joule": reading.per_joule(steps)}

    def summary(self, env_steps: int) -> str:
        """One line for people: joules, how each part was obtained, env steps per joule."""
        reading = self.meter.reading
        if reading is None:
            return "energy: not metered"
        rate = reading.per_joule(int(env_steps) - self.env_steps_at_start)
        how = ", ".join(f"{k} {v.split(':')[0]}" for k, v in reading.sources.items() if k != "gpu")
        return (f"energy: {reading.joules:,.0f} J over {reading.seconds:,.1f} s ({how})"
                + (f", {rate:,.1f} env steps/J" if rate is not None else ""))


def _host_device(spec: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if not spec:
        return None
    for device in spec.get("device", ()):
        if device.get("name") == spec.get("host") and "idle_power_w" in device and "active_power_w" in device:
            return device
    return None
