"""PEARL core: interfaces, reference implementations, plugin discovery and replay."""

from pearl_core.errors import (
    BackendUnavailableError,
    EmptyTreeError,
    InvalidDTypeError,
    InvalidIndexError,
    InvalidValueError,
    PearlError,
    PluginLoadError,
    SpecError,
    TrainerError,
)
from pearl_core.sumtree import SumTree
from pearl_core.backend import Availability, Backend, DeviceInfo
from pearl_core.plugins import PluginRegistry, get_backend, list_backends

from pearl_core._version import __version__
__all__ = [
    "Availability",
    "Backend",
    "DeviceInfo",
    "PluginRegistry",
    "get_backend",
    "list_backends",
    "BackendUnavailableError",
    "EmptyTreeError",
    "InvalidDTypeError",
    "InvalidIndexError",
    "InvalidValueError",
    "PearlError",
    "PluginLoadError",
    "SpecError",
    "SumTree",
    "TrainerError",
    "__version__",
    "Composer",
    "RuntimeGen",
]


def __getattr__(name: str):
    # The composer's user API, loaded on first use (it pulls in the composer package).
    if name in ("Composer", "RuntimeGen"):
        from pearl_core.composer import api

        return getattr(api, name)
    raise AttributeError(f"module 'pearl_core' has no attribute {name!r}")
