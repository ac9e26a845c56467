"""pluggy hook specifications: the only hooks PEARL defines.

pluggy is used for discovery and registration only; nothing in a training loop
goes through a hook. A plugin module exposes ``@hookimpl`` functions and is
listed under the entry-point group ``pearl``::

    # pyproject.toml of a plugin
    [project.entry-points.pearl]
    mydevice = "pearl_mydevice.plugin"

    # pearl_mydevice/plugin.py
    from pearl_core.hookspecs import hookimpl

    @hookimpl
    def pearl_register_backends(register):
        from pearl_mydevice.backend import MyDeviceBackend
        register(MyDeviceBackend)
"""

from __future__ import annotations

from typing import Callable

import pluggy

PROJECT_NAME = "pearl"
ENTRY_POINT_GROUP = "pearl"

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
