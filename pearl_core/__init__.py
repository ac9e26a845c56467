"""PEARL core: interfaces, reference implementations, plugin discovery and replay."""

from pearl_core.errors import (
    BackendUnavailableError,
    CheckpointNotFoundError,
    EmptyTreeError,
    ExportError,
    InvalidDTypeError,
    InvalidIndexError,
    InvalidValueError,
    NotACheckpointError,
    PearlError,
    PluginLoadError,
    SpecError,
    TrainerError,
    TrainerImportError,
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
    "CheckpointNotFoundError",
    "EmptyTreeError",
    "ExportError",
    "InvalidDTypeError",
    "InvalidIndexError",
    "InvalidValueError",
    "NotACheckpointError",
    "PearlError",
    "PluginLoadError",
    "SpecError",
    "SumTree",
    "TrainerError",
    "TrainerImportError",
    "__version__",
    "Composer",
    "RuntimeGen",
    "Policy",
    "evaluate_policy",
    "load_policy",
]


def __getattr__(name: str):
    # The composer's user API, loaded on first use (it pulls in the composer package).
    if name in ("Composer", "RuntimeGen"):
        from pearl_core.composer import api

        return getattr(api, name)
    # The policy API (load a trained run, act, evaluate, export), loaded on first use (it pulls in torch).
    if name in ("Policy", "evaluate_policy", "load_policy"):
        from pearl_core import policy

        return getattr(policy, name)
    raise AttributeError(f"module 'pearl_core' has no attribute {name!r}")
