"""Plugin discovery: entry points in the group ``pearl``, registered through pluggy.

Each entry point is loaded inside ``try``/``except``. A plugin that fails to import
or to register is *recorded* (see :meth:`PluginRegistry.plugins`, shown by
``pearl plugins``) and never stops the others; its error is raised, wrapped in
:class:`BackendUnavailableError`, only when its backend is asked for.

Set ``PEARL_DISABLE_PLUGIN_AUTOLOAD=1`` to skip entry points (tests then register
plugins by hand with :meth:`PluginRegistry.register_plugin`).

Contract versions: a plugin module declares the plugin contract version it was written against
(``PEARL_PLUGIN_API = "1.1"``, :mod:`pearl_core.hookspecs`). A missing declaration warns (the
plugin is served as ``1.0``), another major than :data:`~pearl_core.hookspecs.PLUGIN_API_VERSION`'s
refuses the plugin, a newer minor warns; every backend object is adapted to its plugin's version
and guarded (:func:`pearl_core.plugin_guard.adapt_backend`: older hooks, cost-model deadlines,
checked sum trees). Warnings are logged and kept in :attr:`PluginRecord.warnings`.

A backend name belongs to one plugin: when two plugins register the same name, neither gets it
(whatever the entry points' order); the backend is reported unavailable, naming both
distributions, until one of them is uninstalled.

Native learner kernels are found by device, never by a backend's name:
:func:`kernel_lookup` (``kernel_lookup("cuda:0")("dqn_mlp")``) asks the backends
of the device's kind. The runtime hands such a lookup to trainers that accept
``learner_kernels``; a trainer never imports this module.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Callable

import pluggy

from pearl_core import hookspecs
from pearl_core.backend import Availability, Backend
from pearl_core.errors import BackendUnavailableError, InvalidValueError, PluginContractError, PluginLoadError
from pearl_core.plugin_guard import adapt_backend, declared_api, format_api

__all__ = ["AUTOLOAD_ENV", "BackendStatus", "KernelLookup", "PluginRecord", "PluginRegistry", "default_registry",
           "get_backend", "kernel_lookup", "list_backends", "reset_default_registry"]

AUTOLOAD_ENV = "PEARL_DISABLE_PLUGIN_AUTOLOAD"
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PluginRecord:
    """What happened when one plugin was loaded.

    Attributes:
        name: entry-point (plugin) name.
        distribution: name of the distribution that ships it, when known.
        version: that distribution's version, when known.
        target: the entry point's ``module[:attr]`` string, or the object's repr.
        backends: names of the backends it registered.
        error: the exception raised while importing or registering, or ``None``.
        traceback: formatted traceback of ``error``.
        api: the plugin contract version it declares (``"1.1"``), or ``None`` when it declares none.
        warnings: what loading it warned about (no contract version, a newer minor, a contested backend name).
    """

    name: str
    distribution: str | None
    version: str | None
    target: str
    backends: tuple[str, ...] = ()
    error: BaseException | None = None
    traceback: str = ""
    api: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def loaded(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class BackendStatus:
    """One row of :func:`list_backends`: a backend and whether it can run here."""

    name: str
    plugin: str
    distribution: str | None
    version: str | None
    available: bool
    reason: str | None = None
    error: BaseException | None = field(default=None, repr=False)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class PluginRegistry:
    """The set of loaded plugins and the backends they registered.

    Args:
        autoload: load the ``pearl`` entry points now. ``None`` (default) means
            yes unless the environment variable ``PEARL_DISABLE_PLUGIN_AUTOLOAD``
            is set to ``1``/``true``/``yes``.
        group: entry-point group to scan.
    """

    def __init__(self, *, autoload: bool | None = None, group: str = hookspecs.ENTRY_POINT_GROUP):
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        self._group = group
        self._records: dict[str, PluginRecord] = {}
        self._classes: dict[str, tuple[type[Backend], str]] = {}
        self._instances: dict[str, Backend] = {}
        self._api: dict[str, tuple[int, int]] = {}  # plugin name -> the contract version it is served as
        self._contested: dict[str, list[str]] = {}  # backend name -> the plugins that claim it
        if autoload is None:
            autoload = os.environ.get(AUTOLOAD_ENV, "").strip().lower() not in ("1", "true", "yes")
        if autoload:
            self.load_entry_points()

    # -- loading -----------------------------------------------------------------
    def load_entry_points(self) -> None:
        """Import and register every entry point of the group; failures are recorded."""
        for ep in sorted(metadata.entry_points(group=self._group), key=lambda e: e.name):
            if ep.name in self._records:
                continue
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else None
            version = dist.version if dist is not None else None
            try:
                obj = ep.load()
            except BaseException as exc:  # any import failure is recorded
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                self._record_failure(ep.name, dist_name, version, ep.value, exc)
                continue
            self.register_plugin(obj, name=ep.name, distribution=dist_name, version=version, target=ep.value)

    def register_plugin(
        self,
        plugin: Any,
        *,
        name: str,
        distribution: str | None = None,
        version: str | None = None,
        target: str | None = None,
    ) -> PluginRecord:
        """Register a plugin object (usually a module with ``@hookimpl`` functions).

        Never raises for a broken plugin: the failure is recorded and returned.
        """
        target = target or getattr(plugin, "__name__", repr(plugin))
        if name in self._records:
            raise PluginLoadError(
                f"a plugin named {name!r} is already registered ({self._records[name].target}); "
                "fix: give the entry point a unique name."
            )
        registered: list[tuple[str, type[Backend]]] = []
        who = f"plugin {name!r} ({_dist_text(distribution, version, target)})"
        try:
            api, declared, notes = _check_api(plugin, who)
        except PluginContractError as exc:
            return self._record_failure(name, distribution, version, target, exc)

        def register(backend_cls: type) -> None:
            if not (isinstance(backend_cls, type) and issubclass(backend_cls, Backend)):
                raise PluginLoadError(
                    f"plugin {name!r} registered {backend_cls!r}; expected a subclass of "
                    "pearl_core.backend.Backend."
                )
            bname = getattr(backend_cls, "name", None)
            if not isinstance(bname, str) or not bname:
                raise PluginLoadError(f"plugin {name!r}: backend class {backend_cls.__name__} has no `name`.")
            if any(b == bname for b, _ in registered):
                raise PluginLoadError(f"plugin {name!r} registers backend {bname!r} twice; fix: choose another "
                                      "backend name for one of its classes.")
            registered.append((bname, backend_cls))

        try:
            self._pm.register(plugin, name=name)
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            return self._record_failure(name, distribution, version, target, exc)
        try:
            for impl in self._pm.hook.pearl_register_backends.get_hookimpls():
                if impl.plugin is plugin:
                    impl.function(register=register)
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            self._pm.unregister(plugin)
            return self._record_failure(name, distribution, version, target, exc)
        for note in notes:
            _log.warning("%s", note)
        self._api[name] = api
        self._records[name] = PluginRecord(
            name, distribution, version, target, tuple(b for b, _ in registered),
            api=declared and format_api(declared), warnings=tuple(notes))
        for bname, cls in registered:
            owner = self._classes.pop(bname, None)
            claimants = self._contested.get(bname) or ([owner[1]] if owner is not None else [])
            if not claimants:
                self._classes[bname] = (cls, name)
                continue
            self._contested[bname] = [*claimants, name]  # neither plugin gets the name, whatever the load order
            self._instances.pop(bname, None)
            text = self._contest_text(bname)
            _log.warning("%s", text)
            for plugin_name in self._contested[bname]:
                rec = self._records[plugin_name]
                self._records[plugin_name] = dataclasses.replace(rec, warnings=(*rec.warnings, text))
        return self._records[name]

    def _contest_text(self, bname: str) -> str:
        names = " and ".join(f"plugin {p!r} ({self._dist_of(p)})" for p in self._contested[bname])
        return (f"backend {bname!r} is claimed by {names}; a backend name belongs to one plugin, so neither is used. "
                f"Fix: uninstall the distribution that should not provide {bname!r} (or ask its authors to rename "
                "their backend).")

    def _dist_of(self, plugin: str) -> str:
        rec = self._records.get(plugin)
        return "?" if rec is None else _dist_text(rec.distribution, rec.version, rec.target)

    def _record_failure(self, name, distribution, version, target, exc) -> PluginRecord:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        record = PluginRecord(name, distribution, version, target, (), exc, tb)
        self._records[name] = record
        return record

    # -- queries -------------------------------------------------------------------
    def plugins(self) -> list[PluginRecord]:
        """Every plugin seen, loaded or not, sorted by name."""
        return [self._records[k] for k in sorted(self._records)]

    def backend_names(self) -> list[str]:
        """Names of every registered backend (available or not); a name two plugins claim is not one."""
        return sorted(self._classes)

    def device_kinds(self) -> tuple[str, ...]:
        """The ``device_kind`` of every registered backend class, sorted (no backend is created)."""
        kinds = {getattr(cls, "device_kind", None) for cls, _ in self._classes.values()}
        return tuple(sorted(k for k in kinds if isinstance(k, str) and k))

    def learner_kernel(self, device: str, name: str, backend: str | None = None) -> Any | None:
        """The learner kernel ``name`` of a backend that drives ``device``'s kind, or ``None``.

        The kind is ``device`` up to the first ``":"`` (``"cuda:0"`` -> ``"cuda"``).
        With ``backend`` (the plan's choice for that kind) only that backend is
        asked; otherwise the available backends of the kind, in name order, and
        the first :meth:`~pearl_core.backend.Backend.learner_kernel` that is not
        ``None`` wins. Never raises for a missing or broken backend: a backend
        whose ``learner_kernel`` raises is logged and skipped.
        """
        kind = str(device).split(":", 1)[0]
        for bname in self.backend_names():
            cls, plugin = self._classes[bname]
            if getattr(cls, "device_kind", None) != kind or not self._availability(bname)[0].available:
                continue
            if backend is not None and bname != backend:
                continue
            try:
                kernel = self._instance(bname).learner_kernel(name)
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop a trainer
                _log.warning("backend %r (plugin %r): learner_kernel(%r) raised %s; it is skipped",
                             bname, plugin, name, _describe(exc))
                continue
            if kernel is not None:
                return kernel
        return None

    def _instance(self, name: str) -> Backend:
        inst = self._instances.get(name)
        if inst is None:
            cls, plugin = self._classes[name]
            owner = f"backend {name!r} (plugin {plugin!r}, {self._dist_of(plugin)})"
            inst = self._instances[name] = adapt_backend(cls(), owner, self._api.get(plugin, (1, 0)))
        return inst

    def _availability(self, name: str) -> tuple[Availability, BaseException | None]:
        try:
            return self._instance(name).availability(), None
        except Exception as exc:  # noqa: BLE001 - a backend that crashes is just unavailable
            return Availability.no(f"availability check raised {_describe(exc)}"), exc

    def status(self) -> list[BackendStatus]:
        """One :class:`BackendStatus` per backend, plus one per plugin that failed to load."""
        rows = []
        for name in self.backend_names():
            _, plugin = self._classes[name]
            rec = self._records[plugin]
            avail, err = self._availability(name)
            rows.append(BackendStatus(name, plugin, rec.distribution, rec.version, avail.available, avail.reason, err))
        for name in sorted(self._contested):
            plugins = self._contested[name]
            rows.append(BackendStatus(name, ", ".join(plugins), ", ".join(self._dist_of(p) for p in plugins), None,
                                      False, self._contest_text(name)))
        for rec in self.plugins():
            if rec.error is not None:
                rows.append(
                    BackendStatus(
                        rec.name, rec.name, rec.distribution, rec.version, False,
                        f"plugin failed to load ({_describe(rec.error)})", rec.error,
                    )
                )
        return rows

    def get_backend(self, name: str) -> Backend:
        """Return the backend called ``name``, ready to use.

        Raises:
            BackendUnavailableError: unknown name, its plugin failed to load, or the
                backend reports itself unavailable here. ``.cause`` holds the
                original error when there is one.
        """
        if name in self._contested:
            raise BackendUnavailableError(f"backend {name!r} is not available: {self._contest_text(name)}",
                                          backend=name)
        if name not in self._classes:
            usable = self._usable_names()
            failed = self._failed_plugin_for(name)
            if failed is not None:
                dist = failed.distribution or failed.target
                raise BackendUnavailableError(
                    f"backend {name!r} is not available: plugin {failed.name!r} ({dist}) failed to load "
                    f"({_describe(failed.error)}). Available: {usable}. Fix: repair or reinstall {dist} "
                    "(`pearl plugins` shows the traceback).",
                    backend=name,
                    cause=failed.error,
                ) from failed.error
            raise BackendUnavailableError(
                f"no backend named {name!r} is registered. Available: {usable}. Fix: install the plugin "
                f"that provides backend {name!r} (PEARL's own are pearl-cpu, pearl-cuda and pearl-fpga), or "
                "correct the name.",
                backend=name,
            )
        try:
            backend = self._instance(name)
        except Exception as exc:
            raise BackendUnavailableError(
                f"backend {name!r} could not be created: {_describe(exc)}.", backend=name, cause=exc
            ) from exc
        avail, err = self._availability(name)
        if not avail.available:
            raise BackendUnavailableError(
                f"backend {name!r} is not available: {avail.reason}. Available: {self._usable_names()}.",
                backend=name,
                cause=err,
            )
        return backend

    def _failed_plugin_for(self, name: str) -> PluginRecord | None:
        """The failed plugin that most likely provides backend ``name``: one whose entry-point,
        distribution or module name contains it, else the only failed plugin, else ``None``."""
        failed = [r for r in self.plugins() if r.error is not None]
        key = name.lower().replace("-", "_")

        def names(r: PluginRecord) -> list[str]:
            return [str(x).lower().replace("-", "_") for x in (r.name, r.distribution, r.target.split(":")[0]) if x]

        matching = [r for r in failed if any(key == n or key in n.split(".")[0].split("_") for n in names(r))]
        if len(matching) == 1:
            return matching[0]
        return failed[0] if len(failed) == 1 else None

    def spec_fields_for_kind(self, kind: str) -> tuple[str, ...] | None:
        """The hardware-spec fields the registered backends of ``kind`` read (the union of their classes'
        ``spec_fields``, sorted), or ``None`` when no backend of that kind is registered."""
        classes = [self._classes[n][0] for n in self.backends_for_kind(kind, available_only=False)]
        if not classes:
            return None
        fields = set()
        for cls in classes:
            declared = getattr(cls, "spec_fields", ())
            fields.update(f for f in declared if isinstance(f, str)) if isinstance(declared, tuple) else None
        return tuple(sorted(fields))

    def backends_for_kind(self, kind: str, *, available_only: bool = True) -> list[str]:
        """Names of the backends whose ``device_kind`` is ``kind`` (available here, by default), sorted."""
        return [n for n in self.backend_names() if getattr(self._classes[n][0], "device_kind", None) == kind
                and (not available_only or self._availability(n)[0].available)]

    def _usable_names(self) -> list[str]:
        return [n for n in self.backend_names() if self._availability(n)[0].available]


def _dist_text(distribution: str | None, version: str | None, target: str | None) -> str:
    if distribution:
        return f"{distribution} {version}" if version else distribution
    return f"from {target}" if target else "distribution unknown"


def _check_api(plugin: Any, who: str) -> tuple[tuple[int, int], tuple[int, int] | None, list[str]]:
    """The contract version ``plugin`` is served as, the one it declares (``None``: none), what to warn about.

    Raises:
        PluginContractError: a malformed declaration, or another major than this pearl-core's.
    """
    ours = hookspecs.PLUGIN_API_VERSION
    attr = hookspecs.PLUGIN_API_ATTR
    try:
        api = declared_api(plugin)
    except PluginContractError as exc:
        raise PluginContractError(f"{who}: {exc}") from None
    if api is None:
        return (1, 0), None, [
            f"{who} declares no plugin contract version; it is served as contract 1.0 (before versions: no "
            f"device= to make_sum_tree, ...). Fix (plugin author): add {attr} = \"{format_api(ours)}\" to the "
            "plugin module once it follows the current contract (docs/user-guide.md, 'Plugin contract versions')."]
    if api[0] != ours[0]:
        raise PluginContractError(
            f"{who} was written against plugin contract {format_api(api)}, but this pearl-core implements "
            f"{format_api(ours)}; another major version is incompatible, so the plugin is not loaded. Fix: install a "
            f"version of the plugin written for contract {ours[0]}.x (or a pearl-core of contract {api[0]}.x).")
    if api[1] > ours[1]:
        return ours, api, [
            f"{who} was written against plugin contract {format_api(api)}, newer than this pearl-core's "
            f"{format_api(ours)}: what contract {format_api(api)} added is not used. Fix: upgrade pearl-core."]
    return api, api, []


_default: PluginRegistry | None = None


def default_registry() -> PluginRegistry:
    """The registry built from installed entry points, created on first use."""
    global _default
    if _default is None:
        _default = PluginRegistry()
    return _default


def reset_default_registry() -> None:
    """Forget the default registry so the next call rescans entry points (tests use this)."""
    global _default
    _default = None


def get_backend(name: str) -> Backend:
    """Return the installed backend ``name`` (see :meth:`PluginRegistry.get_backend`)."""
    return default_registry().get_backend(name)


def list_backends() -> list[BackendStatus]:
    """Every installed backend with its availability (see :meth:`PluginRegistry.status`)."""
    return default_registry().status()


@dataclass(frozen=True)
class KernelLookup:
    """``name -> kernel factory or None`` for one device: what :func:`kernel_lookup` returns.

    Calling it asks the registry at that moment (:meth:`PluginRegistry.learner_kernel`).
    A lookup on the default registry pickles as its device string, so a trainer that
    holds one can be sent to a worker process.

    Attributes:
        device: the device the kernels are for, e.g. ``"cpu"`` or ``"cuda:0"``.
        registry: the registry asked; ``None`` means :func:`default_registry`.
        backend: ask only this backend (the plan's choice for the device's kind); ``None``: any of the kind.
    """

    device: str
    registry: PluginRegistry | None = field(default=None, compare=False, repr=False)
    backend: str | None = None

    def __call__(self, name: str) -> Any | None:
        return (self.registry or default_registry()).learner_kernel(self.device, name, self.backend)


def kernel_lookup(device: str, registry: PluginRegistry | None = None,
                  backend: str | None = None) -> Callable[[str], Any | None]:
    """A function ``name -> learner kernel factory or None`` for ``device`` (``"cpu"``, ``"cuda:0"``).

    Pass it to a trainer that accepts ``learner_kernels`` (the built-in
    :class:`~pearl_core.algorithms.DQN` does), e.g.
    ``DQN(obs_space, act_space, learner_kernels=kernel_lookup("cpu"))``; the
    runtime does this for the plan's learner device. The lookup returns ``None``
    when no available backend of the device's kind offers the kernel; it never
    raises for a missing backend. ``backend`` restricts it to that backend (the plan's choice).
    """
    if not isinstance(device, str) or not device:
        raise InvalidValueError(f"kernel_lookup: device = {device!r} is invalid; expected a device string "
                                "such as 'cpu' or 'cuda:0'.")
    return KernelLookup(device, registry, backend)
