"""How the composer asks the plugin registry about device kinds, backends and the devices they see.

:func:`pearl_core.composer.detect.detect_hardware` turns :func:`detected_devices`
into a hardware spec; the spec module itself reads no registry beyond the
device kinds it accepts (:func:`~pearl_core.composer.spec.known_kinds`, re-exported here).

The composer plans for devices that may be absent (a hardware spec is allowed to
describe a server you do not have), so it needs a backend's *object* even when
the backend reports itself unavailable here: an FPGA backend without dpctl can
still model an FPGA analytically. :meth:`PluginRegistry.get_backend` refuses
unavailable backends, so this module reads the registry's lazily created
instances instead. Creating an instance is cheap and touches no device (the
:class:`~pearl_core.backend.Backend` contract), so this is safe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

from pearl_core.backend import Backend, DeviceInfo
from pearl_core.composer.spec import BUILTIN_KINDS, known_kinds
from pearl_core.errors import SpecError

if TYPE_CHECKING:
    from pearl_core.composer.spec import HardwareSpec
    from pearl_core.plugins import PluginRegistry

__all__ = ["BUILTIN_KINDS", "backend_for_kind", "backend_objects", "detected_devices", "known_kinds",
           "resolve_registry", "spec_backends"]

def resolve_registry(registry: "PluginRegistry | None") -> "PluginRegistry":
    """``registry`` or the process-wide default registry."""
    if registry is not None:
        return registry
    from pearl_core.plugins import default_registry

    return default_registry()


def backend_objects(registry: "PluginRegistry | None" = None, *,
                    check_availability: bool = True) -> list[tuple[str, Backend, bool]]:
    """Every registered backend as ``(name, object, available_here)``, sorted by name.

    Backends whose class cannot even be instantiated are skipped (``pearl plugins``
    shows them). With ``check_availability=False`` no backend is probed (no
    device library is imported) and ``available_here`` is ``False``.
    """
    reg = resolve_registry(registry)
    available = {s.name: s.available for s in reg.status()} if check_availability else {}
    out: list[tuple[str, Backend, bool]] = []
    for name in reg.backend_names():
        try:
            # No public accessor returns an unavailable backend's object; see module docstring.
            obj = reg._instance(name)
        except Exception:  # noqa: BLE001 - a broken backend class is reported elsewhere
            continue
        out.append((name, obj, bool(available.get(name, False))))
    return out


def backend_for_kind(kind: str, registry: "PluginRegistry | None" = None,
                     choice: str | None = None) -> tuple[str, Backend | None]:
    """The backend that drives devices of ``kind``: ``(backend name, object or None)``.

    ``choice`` (a spec device's ``backend`` field) names it. Otherwise the one
    available backend of the kind; two or more available ones raise
    :class:`SpecError` naming them (the user chooses, never the name order). With
    none available, an unavailable one of the kind is named (a what-if plan can
    still be modelled); without any backend for the kind, the name is the kind
    itself (the built-in backends are named after their kinds) and the object is ``None``.

    Raises:
        SpecError: ``choice`` is not a backend of ``kind``, or the kind is ambiguous.
    """
    matches = [(not avail, name, obj) for name, obj, avail in backend_objects(registry)
               if getattr(obj, "device_kind", None) == kind]
    if choice is not None:
        for _, name, obj in matches:
            if name == choice:
                return name, obj
        raise SpecError(f"backend = {choice!r} was chosen for kind {kind!r}, but the backends of that kind are "
                        f"{sorted(n for _, n, _ in matches)}. Fix: name one of them (`pearl plugins` lists them).")
    available = sorted(name for unavail, name, _ in matches if not unavail)
    if len(available) > 1:
        raise SpecError(f"backends {available} all drive devices of kind {kind!r}; PEARL does not pick one silently. "
                        f"Fix: add `backend = \"<name>\"` to the device's table in the hardware spec, e.g. "
                        f"backend = {available[0]!r}.")
    if not matches:
        return kind, None
    _, name, obj = min(matches, key=lambda m: (m[0], m[1]))
    return name, obj


def detected_devices(registry: "PluginRegistry | None" = None) -> Iterator[tuple[str, Backend, DeviceInfo]]:
    """Every device of every *available* backend as ``(backend name, backend, device)``.

    A backend whose ``devices()`` raises contributes nothing (``pearl devices`` shows its error).
    """
    for name, obj, available in backend_objects(registry):
        if not available:
            continue
        try:
            infos = obj.devices()
        except Exception:  # noqa: BLE001 - a backend that cannot list devices contributes none
            continue
        for info in infos:
            yield name, obj, info


def spec_backends(spec: "HardwareSpec", registry: "PluginRegistry | None" = None) -> dict[str, str]:
    """Backend name per device kind of ``spec``: each device's ``backend`` field, else :func:`backend_for_kind`.

    Raises:
        SpecError: devices of one kind name different backends, or a kind is ambiguous.
    """
    out: dict[str, str] = {}
    for kind in dict.fromkeys(d.kind for d in spec.devices):
        chosen = {d.backend for d in spec.devices if d.kind == kind and d.backend}
        if len(chosen) > 1:
            raise SpecError(f"devices of kind {kind!r} name different backends {sorted(chosen)}; one backend drives "
                            "a kind in a plan. Fix: give them the same `backend`.")
        out[kind] = backend_for_kind(kind, registry, next(iter(chosen), None))[0]
    return out


def storage_unfit(spec: "HardwareSpec", backends: dict[str, str],
                  registry: "PluginRegistry | None" = None) -> "Callable[[str], str | None]":
    """``f(device name) -> why it cannot hold a Data Storage, or None``, for Algorithm 1's step 2.

    A CPU holds it in host memory. Another device needs its backend to offer one
    (to override :meth:`~pearl_core.backend.Backend.make_storage`): the runtime
    refuses a Data Storage on a device whose backend has none, so the composer
    does not place it there.
    """
    objects = {name: obj for name, obj, _ in backend_objects(registry, check_availability=False)}
    kinds = {d.name: d.kind for d in spec.devices}

    def unfit(device: str) -> str | None:
        kind = kinds.get(device)
        if kind is None or kind == "cpu":
            return None
        name = backends.get(kind, kind)
        obj = objects.get(name)
        if obj is None:
            return f"no installed backend drives kind {kind!r}, so nothing can keep a Data Storage on {device!r}"
        if type(obj).make_storage is Backend.make_storage:
            return (f"backend {name!r} offers no Data Storage on its devices (no make_storage); it stays in "
                    "host memory or on another device")
        return None

    return unfit
