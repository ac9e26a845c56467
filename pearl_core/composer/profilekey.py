"""The profile cache's key (:mod:`pearl_core.composer.profiling`): what a cached row was measured with.

Split from :mod:`pearl_core.composer.profiling` (which re-exports these names) to keep that module small.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from typing import TYPE_CHECKING, Any, Mapping

from pearl_core.composer.plan import pearl_version
from pearl_core.composer.spec import DeviceSpec
from pearl_core.composer.workload import Workload
from pearl_core.errors import SpecError

if TYPE_CHECKING:
    from pearl_core.backend import Backend, DeviceInfo

__all__ = ["CACHE_FORMAT", "backend_settings", "cache_key"]

#: Version of the cache entries' layout and of what they measure; bump to invalidate old entries
#: (2: the CPU rows carry calibration runs of the host variants; 3: time-bounded cells, frame-consistent
#: synthetic fills, calibration runs only for the variants that can win; 4: the host's measurements are named
#: records, ``DeviceRow.costs``, not config keys, and the composer measures the host primitive by primitive;
#: 5: the learner at the thread counts of hostprofile.thread_candidates, probes within the profiling budget).
CACHE_FORMAT = 5


def _backend_version(backend: "Backend") -> str:
    version = getattr(backend, "version", None)
    if isinstance(version, str) and version:
        return version
    top = type(backend).__module__.split(".")[0]
    try:
        from importlib.metadata import PackageNotFoundError, packages_distributions, version as dist_version

        try:  # the usual layout (module pearl_cpu in distribution pearl-cpu): found without a scan
            return dist_version(top.replace("_", "-"))
        except PackageNotFoundError:
            pass
        dists = packages_distributions().get(top, [])
        if dists:
            return dist_version(dists[0])
    except Exception:  # noqa: BLE001 - metadata is best effort; the module name still keys the cache
        pass
    mod = sys.modules.get(top)
    return str(getattr(mod, "__version__", "unknown"))


def backend_settings(bname: str, backend: "Backend") -> dict[str, Any]:
    """``backend.settings()`` as a plain JSON object (what the cache key holds).

    Raises:
        SpecError: it is not a mapping with string keys and JSON values (str,
            int, float, bool, None, lists and objects of them; no NaN or infinity).
    """
    method = getattr(backend, "settings", None)
    settings = {} if method is None else method()
    try:
        if not isinstance(settings, Mapping) or not all(isinstance(k, str) for k in settings):
            raise TypeError("not a mapping with str keys")
        return json.loads(json.dumps(dict(settings), sort_keys=True, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise SpecError(f"backend {bname!r}.settings() returned {settings!r:.200}, which is not a JSON object "
                        f"({exc}); expected a mapping of str keys to JSON values (str, number, bool, None, lists, "
                        "objects). Fix: return e.g. {'build': 'avx2', 'threads': 8} from settings().") from None


def _cache_key(bname: str, backend: "Backend", device: DeviceSpec, info: "DeviceInfo", wl: Workload,
               iterations: int, settings: Mapping[str, Any], host: bool = False) -> tuple[str, dict[str, Any]]:
    from pearl_core.composer.calibrate import calibration_settings

    inputs = {
        "format": CACHE_FORMAT,
        "host_policy": calibration_settings() if host else None,  # the composer's calibration of the host
        "backend": bname,
        "backend_class": f"{type(backend).__module__}.{type(backend).__qualname__}",
        "backend_version": _backend_version(backend),
        "backend_settings": dict(settings),
        "device": device.to_dict(),
        "detected": {"name": info.name, "description": info.description, "details": dict(info.details)},
        "machine": {"node": platform.node(), "processor": platform.processor(), "cpus": os.cpu_count()},
        "workload": wl.to_dict(),
        "trainer_source": _source_digest(wl.trainer),
        "pearl_core": pearl_version(),
        "iterations": iterations,
    }
    text = json.dumps(inputs, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest(), inputs


def _source_digest(trainer: str) -> str:
    """sha256 of the source file defining the trainer's module: editing a trainer invalidates its cells.

    Found without importing (``importlib.util.find_spec``); ``""`` when there is no file to read.
    """
    import importlib.util

    module = trainer.partition(":")[0]
    try:
        spec = importlib.util.find_spec(module) if module else None
        origin = spec.origin if spec is not None else None
        if not origin or not os.path.isfile(origin):
            return ""
        with open(origin, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except (ImportError, ValueError, OSError):
        return ""


cache_key = _cache_key
