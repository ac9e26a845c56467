"""Resource fields of a hardware spec's devices that only some backends read (an FPGA's blocks and clock).

The core names no accelerator kind here: a device must give the fields its kind's registered backends
declare they read (their ``spec_fields``, e.g. ``pearl_fpga``'s), and no other resource field
(:func:`check_resource_fields`, run by :meth:`~pearl_core.composer.spec.HardwareSpec.from_dict`).
"""

from __future__ import annotations

from typing import Any

from pearl_core.errors import SpecError

__all__ = ["RESOURCE_FIELDS", "check_resource_fields"]

#: The resource fields of :class:`~pearl_core.composer.spec.DeviceSpec` that only some backends read.
RESOURCE_FIELDS = ("dsp_blocks", "ram_blocks", "ram_block_bits", "logic_ram_blocks", "logic_ram_block_bits",
                   "clock_hz")


def check_resource_fields(device: Any, registry: Any = None) -> None:
    """The resource fields (:data:`RESOURCE_FIELDS`) of ``device`` (a
    :class:`~pearl_core.composer.spec.DeviceSpec`) against what its kind's registered backends
    read (their ``spec_fields``): every one they read is given, no other one is. Nothing is checked for a kind
    no registered backend drives (the composer then notes that no backend models the device).

    Raises:
        SpecError: a field they read is missing, or one no backend of the kind reads is given.
    """
    if registry is None:
        from pearl_core.plugins import default_registry

        registry = default_registry()
    reads = registry.spec_fields_for_kind(device.kind)
    if reads is None:
        return
    owner = f"device {device.name!r}"
    names = registry.backends_for_kind(device.kind, available_only=False)
    missing = [f for f in reads if f in RESOURCE_FIELDS and getattr(device, f) is None]
    if missing:
        raise SpecError(f"{owner}: missing field(s) {missing}: backend(s) {names} of kind {device.kind!r} read them "
                        "to model it (their spec_fields). Fix: give them (the board's data sheet has them).")
    extra = [f for f in RESOURCE_FIELDS if getattr(device, f) is not None and f not in reads]
    if extra:
        raise SpecError(f"{owner}: field(s) {extra} are read by no backend of kind {device.kind!r} (backend(s) "
                        f"{names} read {list(reads)}); fix: remove them or correct the kind.")
