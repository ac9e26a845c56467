"""From a plan's placements to the backends that execute them.

A :class:`~pearl_core.runtime.config.RuntimePlan` names a device for each
primitive (``rm_device`` with ``rm_backend``, ``learner_device``,
``storage_device``). This module finds the backend that owns each device —
the plan's choice for the device's kind (``plan.backends``), else the one
available backend of that kind — and asks it (:mod:`pearl_core.backend`):

* replay manager: :func:`make_tree` -> ``make_sum_tree(capacity, fanout, threads=, device=)``;
* learner: :func:`learner_route` -> a device trainer, the trainer's torch code on
  the backend's torch device, or the trainer with the backend's learner kernels;
* Data Storage: :func:`make_storage` -> ``make_storage(spec, capacity, device)``,
  host memory on a ``cpu`` device when the backend offers none;
* LAQ/LDQ transports: :func:`make_queue` -> ``make_transport(role, maxsize, ctx)``,
  shared-memory :class:`~pearl_core.runtime.queues.PipeQueue` by default.

Nothing here is chosen by a backend's name in the code: a third-party backend
is asked exactly as the built-in ones are. Every failure is a
:class:`~pearl_core.errors.PlacementError` naming the primitive, the device,
why, and the fix; :mod:`pearl_core.runtime.preflight` runs all of these
before a program is written or a run starts.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING, Any, Callable, Mapping

from pearl_core.errors import BackendUnavailableError, PlacementError

if TYPE_CHECKING:
    from pearl_core.backend import Backend
    from pearl_core.plugins import KernelLookup, PluginRegistry
    from pearl_core.replay.storage import DataStorage, StorageSpec

__all__ = ["LearnerRoute", "backend_for_device", "device_index", "device_kind", "device_present", "learner_route",
           "make_queue", "make_storage", "make_tree"]

#: The kind whose devices are the host: torch runs there and Data Storage defaults to host memory.
HOST_KIND = "cpu"


def device_kind(device: str) -> str:
    """``"cuda"`` for ``"cuda:1"``, ``"cpu"`` for ``"cpu"``."""
    return str(device).split(":", 1)[0]


def device_index(device: str) -> int:
    """``1`` for ``"cuda:1"``, ``0`` without an index; :class:`PlacementError` for a malformed string."""
    _, sep, idx = str(device).partition(":")
    if not sep:
        return 0
    if not idx.isdigit():
        raise PlacementError(f"device = {device!r} is malformed; expected '<kind>' or '<kind>:<index>' such as "
                             "'cuda:0'. Fix: correct the plan's device string.")
    return int(idx)


def _registry(registry: "PluginRegistry | None") -> "PluginRegistry":
    if registry is not None:
        return registry
    from pearl_core.plugins import default_registry

    return default_registry()


def backend_for_device(device: str, primitive: str, *, registry: "PluginRegistry | None" = None,
                       backends: Mapping[str, str] | None = None) -> tuple[str, "Backend"] | tuple[None, None]:
    """``(name, backend)`` of the backend that owns ``device`` for ``primitive`` (words, for messages).

    The plan's choice for the kind (``backends[kind]``) if given, else the only
    available backend of the kind. On a ``cpu`` device with no available
    backend ``(None, None)`` is returned (the host runs torch and host memory
    without one).

    Raises:
        PlacementError: the chosen backend cannot be used, none drives the kind,
            or two do and the plan did not choose.
    """
    reg, kind = _registry(registry), device_kind(device)
    chosen = (backends or {}).get(kind)
    if chosen:
        try:
            backend = reg.get_backend(chosen)
        except BackendUnavailableError as exc:
            raise PlacementError(f"{primitive} on {device!r}: backend {chosen!r}, the plan's choice for devices of "
                                 f"kind {kind!r}, cannot be used here: {exc} Fix: make that backend usable as it "
                                 "says, or place the primitive on a device that is here (the composer's "
                                 "runnable=True picks the best such plan).") from exc
        if backend.device_kind != kind:
            raise PlacementError(f"{primitive} on {device!r}: the plan chose backend {chosen!r} for kind {kind!r}, "
                                 f"but it drives kind {backend.device_kind!r}. Fix: choose a backend of kind "
                                 f"{kind!r} ({reg.backends_for_kind(kind, available_only=False)}).")
        return chosen, backend
    names = reg.backends_for_kind(kind)
    if len(names) == 1:
        return names[0], reg.get_backend(names[0])
    if len(names) > 1:
        raise PlacementError(f"{primitive} on {device!r}: backends {names} all drive devices of kind {kind!r} and "
                             "the plan does not say which to use. Fix: choose one with `backend = \"<name>\"` in the "
                             "device's table of the hardware spec, or RuntimePlan(backends={"
                             f"{kind!r}: {names[0]!r}}}).")
    if kind == HOST_KIND:
        return None, None
    installed = reg.backends_for_kind(kind, available_only=False)
    if installed:
        why = "; ".join(f"{s.name}: {s.reason}" for s in reg.status() if s.name in installed)
        raise PlacementError(f"{primitive} on {device!r}: no backend of kind {kind!r} can run here ({why}). Fix: "
                             "follow the backend's fix above, or place it on a device that is present "
                             "(`pearl devices` lists them; the composer's runnable=True picks the best such plan).")
    raise PlacementError(f"{primitive} on {device!r}: no installed backend drives devices of kind {kind!r}. Fix: "
                         "install the plugin for that kind (`pearl plugins` lists what is installed), or place it "
                         "on another device.")


def device_present(device: str, *, registry: "PluginRegistry | None" = None, backends: Mapping[str, str] | None = None,
                   emulated: bool = False) -> str | None:
    """Why ``device`` is not present here (``None`` when it is).

    The host CPU is always present. Another device is present when the backend
    that owns it reports at least ``index + 1`` devices; devices that say
    ``details["emulated"]`` (a functional emulator) count only with
    ``emulated=True``.
    """
    kind = device_kind(device)
    if kind == HOST_KIND:
        return None
    try:
        name, backend = backend_for_device(device, "a device", registry=registry, backends=backends)
    except PlacementError as exc:
        return str(exc).removeprefix(f"a device on {device!r}: ")
    assert backend is not None
    try:
        infos = list(backend.devices())
    except Exception as exc:  # noqa: BLE001 - a backend that cannot list devices has none
        return f"backend {name!r} could not list its devices ({type(exc).__name__}: {exc})"
    real = [i for i in infos if not (i.details or {}).get("emulated")]
    usable = infos if emulated else real
    index = device_index(device)
    if index < len(usable):
        return None
    if not emulated and len(infos) > len(real):
        return (f"only an emulator of it is here ({', '.join(i.name for i in infos if i not in real)}; functional "
                "emulation, its timings are not the device's). Fix: compose with emulated=True "
                "(`pearl compose --emulated`) to run on the emulator")
    return (f"backend {name!r} sees {len(usable)} device(s) of kind {kind!r}, so {device!r} is absent: the plan is a "
            "what-if plan for hardware described but not here. Fix: run it where that device is, or ask for the best "
            "runnable plan (runnable=True, `pearl compose --runnable`)")


# --------------------------------------------------------------------------- replay manager
def make_tree(backend_name: str, device: str, capacity: int, fanout: int, *, threads: int = 1,
              registry: "PluginRegistry | None" = None) -> Any:
    """The replay manager's sum tree: ``make_sum_tree(capacity, fanout, threads=, device=)`` of ``backend_name``."""
    reg = _registry(registry)
    try:
        backend = reg.get_backend(backend_name)
    except BackendUnavailableError as exc:
        raise BackendUnavailableError(f"replay manager on {device!r}: {exc}", backend=backend_name,
                                      cause=exc.cause) from exc
    if backend.max_fanout is not None and fanout > backend.max_fanout:
        raise PlacementError(f"replay manager on {device!r}: backend {backend_name!r} supports sum-tree fanouts "
                             f"2..{backend.max_fanout}; the replay asks for {fanout}. Fix: "
                             f"set_replay(fanout=<= {backend.max_fanout}), or place the replay manager elsewhere.")
    return backend.make_sum_tree(capacity, fanout, threads=threads, device=device)


# --------------------------------------------------------------------------- learner
@dataclasses.dataclass(frozen=True)
class LearnerRoute:
    """How the learner runs on its device.

    Attributes:
        device: the plan's learner device (``"fpga:0"``).
        backend: the backend that owns it (``None``: the host without a backend).
        how: ``"device trainer"`` (the backend's trainer for the algorithm),
            ``"torch"`` (the trainer's own code on :attr:`torch_device`) or
            ``"kernel"`` (the trainer on the host CPU, calling :attr:`kernel`
            of the backend through :attr:`kernels`).
        torch_device: where the trainer's torch networks live.
        factory: the device trainer factory (``how == "device trainer"``), else ``None``.
        kernels: the learner-kernel lookup of the device (its backend only).
        kernel: the kernel name the trainer must run (``how == "kernel"``).
    """

    device: str
    backend: str | None
    how: str
    torch_device: str
    factory: Callable[..., Any] | None = dataclasses.field(default=None, compare=False)
    kernels: "KernelLookup | None" = dataclasses.field(default=None, compare=False)
    kernel: str | None = None

    def describe(self) -> str:
        if self.how == "device trainer":
            name = getattr(self.factory, "__qualname__", None) or getattr(getattr(self.factory, "func", None),
                                                                          "__qualname__", repr(self.factory))
            return f"device trainer {name} of backend {self.backend!r} on {self.device!r}"
        if self.how == "kernel":
            return f"kernel {self.kernel!r} of backend {self.backend!r} on {self.device!r} (torch copy on the host)"
        return f"torch on {self.torch_device!r}"


def _takes(cls: type, name: str) -> bool:
    try:
        return name in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False


def learner_route(trainer_cls: type, device: str, config: Mapping[str, Any] | None = None, *,
                  registry: "PluginRegistry | None" = None, backends: Mapping[str, str] | None = None) -> LearnerRoute:
    """How ``trainer_cls`` runs on ``device``; :class:`PlacementError` when no backend can run it there.

    In order: the owning backend's :meth:`~pearl_core.backend.Backend.device_trainer`;
    the trainer's torch code on the backend's ``torch_device_type``; the trainer
    (on the host CPU) with one of the backend's learner kernels that the trainer
    names in ``trainer_cls.learner_kernel_names`` and takes through ``learner_kernels``.
    """
    from pearl_core.plugins import kernel_lookup

    name, backend = backend_for_device(device, "learner", registry=registry, backends=backends)
    kernels = kernel_lookup(device, registry, name)
    if backend is None:  # the host without a backend: torch on the CPU
        return LearnerRoute(device, None, "torch", "cpu", None, kernels)
    try:
        factory = backend.device_trainer(trainer_cls, device, dict(config or {}))
    except Exception as exc:  # a broken plugin is a refusal, not a crash
        raise PlacementError(f"learner on {device!r}: backend {name!r}.device_trainer({trainer_cls.__qualname__}) "
                             f"raised {type(exc).__name__}: {exc}. Fix: report it to the plugin's authors, or place "
                             "the learner elsewhere.") from exc
    if factory is not None:
        return LearnerRoute(device, name, "device trainer", "cpu", factory, kernels)
    ttype = backend.torch_device_type
    if ttype:
        torch_device = ttype if ttype == HOST_KIND else f"{ttype}:{device_index(device)}"
        return LearnerRoute(device, name, "torch", torch_device, None, kernels)
    wanted = tuple(getattr(trainer_cls, "learner_kernel_names", ()))
    offered = [k for k in wanted if kernels(k) is not None] if _takes(trainer_cls, "learner_kernels") else []
    if offered:
        return LearnerRoute(device, name, "kernel", "cpu", None, kernels, offered[0])
    raise PlacementError(
        f"learner on {device!r}: backend {name!r} cannot run {trainer_cls.__qualname__} there: torch does not run on "
        f"kind {device_kind(device)!r} (torch_device_type is None), it offers no device trainer for it, and no "
        f"learner kernel the trainer uses (the trainer names {list(wanted) or 'none'} in learner_kernel_names"
        f"{'' if _takes(trainer_cls, 'learner_kernels') else ' and takes no learner_kernels'}). Fix: place the "
        "learner on a cpu or cuda device, or use a trainer that this backend supports.")


def check_route_taken(trainer: Any, route: LearnerRoute) -> None:
    """After building a kernel-route trainer: it must run the kernel (``trainer.engine == "native"``)."""
    if route.how == "kernel" and getattr(trainer, "engine", None) != "native":
        raise PlacementError(
            f"learner on {route.device!r}: {type(trainer).__qualname__} did not take kernel {route.kernel!r} of "
            f"backend {route.backend!r} (its engine is {getattr(trainer, 'engine', None)!r}, expected 'native'), "
            "so the learner would not run on that device. Fix: use a network the kernel supports (a ReLU MLP for "
            "'dqn_mlp'), or place the learner on a cpu or cuda device.")


# --------------------------------------------------------------------------- Data Storage
def make_storage(spec: "StorageSpec", capacity: int, device: str, *, registry: "PluginRegistry | None" = None,
                 backends: Mapping[str, str] | None = None, frames: str = "off") -> "DataStorage":
    """The Data Storage on ``device``: the owning backend's ``make_storage``, or host memory on a ``cpu`` device.

    ``frames`` (``ReplayConfig.frame_storage``): in host memory, ``"on"`` stores observation frames once
    each (:class:`~pearl_core.replay.frames.FrameStorage`), ``"auto"`` does where the observations are
    stacked image frames (:func:`~pearl_core.replay.frames.frame_storage_fits`), ``"off"`` never.
    """
    from pearl_core.replay.frames import FrameStorage, frame_storage_fits
    from pearl_core.replay.storage import DataStorage

    name, backend = backend_for_device(device, "Data Storage", registry=registry, backends=backends)
    storage = backend.make_storage(spec, capacity, device) if backend is not None else None
    if storage is None:
        if device_kind(device) == HOST_KIND:
            if frames == "on" or (frames == "auto" and frame_storage_fits(spec)):
                return FrameStorage(spec, capacity)
            return DataStorage(spec, capacity)
        raise PlacementError(f"Data Storage on {device!r}: backend {name!r} offers no device-resident storage "
                             "(make_storage returned None). Fix: place the Data Storage in host memory "
                             "(storage_device='cpu'), or on a device whose backend has one.")
    if not isinstance(storage, DataStorage) or getattr(storage, "device", None) != device:
        raise PlacementError(f"Data Storage on {device!r}: backend {name!r}.make_storage returned "
                             f"{type(storage).__name__} on {getattr(storage, 'device', None)!r}; expected a "
                             f"DataStorage with .device == {device!r}. Fix: report it to the plugin's authors.")
    return storage


# --------------------------------------------------------------------------- transports
def make_queue(role: str, maxsize: int, ctx: Any, device: str, *, registry: "PluginRegistry | None" = None,
               backends: Mapping[str, str] | None = None) -> Any:
    """The LAQ (``role="laq"``) or LDQ (``"ldq"``) to a learner on ``device``: its backend's transport
    or a PipeQueue."""
    from pearl_core.runtime.queues import PipeQueue

    name, backend = backend_for_device(device, "learner transport", registry=registry, backends=backends)
    q = backend.make_transport(role, maxsize, ctx) if backend is not None else None
    return PipeQueue(maxsize, ctx) if q is None else q
