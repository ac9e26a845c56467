"""pluggy hook specifications: the only hooks PEARL defines.

pluggy is used for discovery and registration only; nothing in a training loop
goes through a hook. A plugin module exposes ``@hookimpl`` functions and is
listed under the entry-point group ``pearl``::

    # pyproject.toml of a plugin
    [project.entry-points.pearl]
    mydevice = "pearl_mydevice.plugin"

    # pearl_mydevice/plugin.py
    from pearl_core.hookspecs import hookimpl

    PEARL_PLUGIN_API = "1.1"  # the contract version this plugin was written against (a literal)

    @hookimpl
    def pearl_register_backends(register):
        from pearl_mydevice.backend import MyDeviceBackend
        register(MyDeviceBackend)

The plugin contract is versioned (:data:`PLUGIN_API_VERSION`, ``(major, minor)``). A plugin
module states the version it was written against as a *literal* string in
:data:`PLUGIN_API_ATTR` (``PEARL_PLUGIN_API = "1.1"``; never import the constant, or the
declaration always matches). At load (:mod:`pearl_core.plugins`): no declaration warns and
the plugin is treated as ``1.0``; another major is refused; an older minor is served as that
minor (what later minors added is not passed to it, :data:`OPTIONS_SINCE`); a newer minor
warns (what this pearl-core lacks is not used). History (:data:`PLUGIN_API_HISTORY`):

* ``1.0``: the :class:`~pearl_core.backend.Backend` contract, ``make_sum_tree(capacity,
  fanout, threads=...)``, the cost models ``analytic_cells`` / ``profile_cells``.
* ``1.1``: ``make_sum_tree`` also receives ``device=`` (the plan's replay-manager device,
  e.g. ``"cuda:1"``).
"""

from __future__ import annotations

from typing import Callable

import pluggy

PROJECT_NAME = "pearl"
ENTRY_POINT_GROUP = "pearl"

#: The plugin contract version this pearl-core implements: a new major breaks plugins, a new minor adds to it.
PLUGIN_API_VERSION: tuple[int, int] = (1, 1)
#: The module attribute in which a plugin declares the contract version it was written against (``"1.1"``).
PLUGIN_API_ATTR = "PEARL_PLUGIN_API"
#: What each minor of the current major added (``pearl plugins`` and the load warnings quote it).
PLUGIN_API_HISTORY: dict[tuple[int, int], str] = {
    (1, 0): "the Backend contract; make_sum_tree(capacity, fanout, threads=); analytic_cells / profile_cells",
    (1, 1): "make_sum_tree also receives device= (the plan's replay-manager device)",
}
#: hook -> keyword options the core passes, with the contract version that introduced each. A backend whose
#: plugin declares an older version is called without them.
OPTIONS_SINCE: dict[str, dict[str, tuple[int, int]]] = {"make_sum_tree": {"device": (1, 1)}}

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def pearl_register_backends(register: Callable[[type], None]) -> None:
    """Register the backend classes a plugin provides.

    Args:
        register: call ``register(BackendClass)`` once per backend. ``BackendClass``
            subclasses :class:`pearl_core.backend.Backend` and has a unique ``name``.
            The class is instantiated lazily, when the backend is first asked for,
            so registering must not import device libraries or touch a device.
    """
