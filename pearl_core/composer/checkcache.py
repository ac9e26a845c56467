"""What the composer learns by building a trainer, remembered across composes.

Composing builds the trainer twice: :func:`~pearl_core.trainer_check.check_trainer` builds it and runs a few
updates, and the workload reads its layers (:func:`~pearl_core.composer.workload.learner_layers`). With
torch's optimisers each build costs more than a second (the first optimiser imports ``torch._dynamo``),
most of a warm ``pearl compose``. Both depend only on the trainer's code, its keyword arguments, the spaces
and the library versions, so the composer keeps a fingerprint of those in ``trainer-facts.json`` in the
profile cache's directory, with what it learned (``"checked"``, ``"layers"``), and does not build the trainer when the
fingerprint is known. A failure is never kept: a broken trainer is built (and explained) every time.

The code fingerprint is the size and modification time of every source file of the packages the trainer's
classes come from (its own package and its base classes'), so an edit to the trainer, to a helper module of
its package or to PEARL's algorithms makes the next compose check again. (A run checks its trainer
again when it starts, cache or not: :func:`pearl_core.runtime.wiring.build_trainer`.)
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from pearl_core.errors import ComposerError, PearlError, TrainerError
from pearl_core.fileio import atomic_write

if TYPE_CHECKING:
    from pearl_core.plugins import PluginRegistry
    from pearl_core.runtime.config import RunConfig, RuntimePlan

__all__ = ["CACHE_FILE", "check_trainer_once", "fingerprint", "learner_preflight", "remembered"]

#: The file in the profile cache's directory that holds the fingerprints of passed checks.
CACHE_FILE = "trainer-facts.json"
#: Fingerprints kept (the most recent ones); older ones are dropped when a new one is written.
_KEEP = 256
_VERSIONS = ("torch", "numpy", "gymnasium", "pearl-core")


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def _space(space: Any) -> list[Any]:
    """What the check depends on in a gymnasium space (type, shape, dtype, bounds, sizes)."""
    out: list[Any] = [type(space).__module__, type(space).__qualname__, str(getattr(space, "shape", None)),
                      str(getattr(space, "dtype", None))]
    for name in ("low", "high", "n", "start", "nvec"):
        value = getattr(space, name, None)
        if value is None:
            continue
        tobytes = getattr(value, "tobytes", None)
        out.append([name, hashlib.sha256(tobytes()).hexdigest() if tobytes else repr(value)])
    children = getattr(space, "spaces", None)
    if isinstance(children, Mapping):
        out.append([[key, _space(child)] for key, child in children.items()])
    elif isinstance(children, (list, tuple)):
        out.append([_space(child) for child in children])
    return out


#: Files of a package looked at (a package bigger than this is fingerprinted by its first files only).
_MAX_FILES = 2000


def _files(name: str) -> list[str]:
    """The source (and extension) files of module or package ``name``, as they are on disk: a package's whole
    tree, whichever of its modules this process happens to have imported."""
    module = sys.modules.get(name)
    if module is None:
        return []
    roots = list(getattr(module, "__path__", None) or [])
    if not roots:
        path = getattr(module, "__file__", None)
        return [path] if path else []
    out: list[str] = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            out += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith((".py", ".so", ".pyd"))]
            if len(out) >= _MAX_FILES:
                return out[:_MAX_FILES]
    return out


def _sources(trainer: type, extra: Sequence[type] = ()) -> list[list[Any]]:
    """(file, size, mtime) of the code the trainer's classes come from.

    The trainer's class in ``pkg.sub.mod`` brings in every file of package ``pkg.sub`` (its sibling helpers);
    each base class brings in its own module; an ``extra`` class in ``pkg.mod`` brings in package ``pkg``;
    the check's own modules always count. Files are listed from disk, so the fingerprint does not depend on
    which modules the process has imported so far.
    """
    names = {"pearl_core.trainer", "pearl_core.trainer_check", trainer.__module__.rpartition(".")[0]}
    names |= {cls.__module__ for cls in trainer.__mro__ if cls.__module__ not in ("builtins", "abc", "typing")}
    names |= {cls.__module__.rpartition(".")[0] or cls.__module__ for cls in extra}
    names.discard("")
    rows: list[list[Any]] = []
    for path in sorted({f for name in names for f in _files(name)}):
        try:
            st = os.stat(path)
        except OSError:
            rows.append([path, -1, -1])
            continue
        rows.append([path, st.st_size, st.st_mtime_ns])
    return rows


def fingerprint(trainer: type, spaces: tuple[Any, Any], kwargs: Mapping[str, Any], extra: Sequence[type] = (),
                context: str = "") -> str:
    """A digest of everything building the trainer depends on: its code (and ``extra`` classes' packages: a
    backend that builds it), the spaces, the kwargs, the library versions and a ``context`` string.

    Raises:
        ValueError: a class defined inside a function (``<locals>`` in its name): two such classes can
            share a name and differ, so nothing about them is remembered.
    """
    for cls in (trainer, *extra):
        if "<locals>" in cls.__qualname__:
            raise ValueError(f"{cls.__qualname__} is defined inside a function")
    payload = {
        "trainer": f"{trainer.__module__}:{trainer.__qualname__}",
        "extra": [f"{cls.__module__}:{cls.__qualname__}" for cls in extra],
        "context": context,
        "sources": _sources(trainer, extra),
        "spaces": [_space(spaces[0]), _space(spaces[1])],
        "kwargs": repr(sorted(kwargs.items())),
        "python": sys.version,
        "versions": [_version(dist) for dist in _VERSIONS],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=repr).encode()).hexdigest()


def _read(path: Path) -> dict[str, dict[str, Any]]:
    try:
        known = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(known, dict):
        return {}
    return {key: value for key, value in known.items() if isinstance(key, str) and isinstance(value, dict)}


def remembered(directory: Path | None, trainer: type, spaces: tuple[Any, Any], kwargs: Mapping[str, Any],
               what: str, compute: Callable[[], Any], *, extra: Sequence[type] = (), context: str = "") -> Any:
    """``compute()``'s JSON value for this trainer, spaces and kwargs: from ``directory``'s
    ``trainer-facts.json`` when it was computed before with the same fingerprint, else computed and kept.

    ``compute`` raises on failure (nothing is kept then). ``directory=None``, a trainer that cannot be
    fingerprinted, or a file that cannot be read or written only cost the computation again.
    """
    if directory is None:
        return compute()
    try:
        key = fingerprint(trainer, spaces, kwargs, extra, context)
    except Exception:  # noqa: BLE001 - a trainer that cannot be fingerprinted is built every time
        return compute()
    path = Path(directory) / CACHE_FILE
    known = _read(path)
    if what in known.get(key, {}):
        return known[key][what]
    value = compute()
    entry = {**known.pop(key, {}), what: value}
    kept = dict(list(known.items())[-(_KEEP - 1):])
    kept[key] = entry  # the most recent last: the oldest are dropped first
    try:
        atomic_write(path, json.dumps(kept, indent=0), make_parents=True)
    except (OSError, PearlError, TypeError, ValueError):
        pass
    return value


class _NotKept(Exception):
    """A preflight refusal: returned to the caller, never remembered."""


def learner_preflight(directory: Path, trainer: type, spaces: tuple[Any, Any], config: "RunConfig",
                      registry: "PluginRegistry | None") -> Callable[["RuntimePlan", Callable[[], "str | None"]],
                                                                     "str | None"]:
    """What :class:`~pearl_core.runtime.preflight.Preflight` calls to build the learner of a plan: the build,
    skipped when the same trainer code, run and device backend (its package's code) built before.

    A refusal is never remembered: the next compose builds (and explains) it again.
    """
    from pearl_core.placement import backend_for_device

    def remember(plan: "RuntimePlan", check: Callable[[], "str | None"]) -> "str | None":
        def build() -> bool:
            why = check()
            if why is not None:
                raise _NotKept(why)
            return True

        try:
            _, backend = backend_for_device(plan.learner_device, "learner", registry=registry, backends=plan.backends)
        except Exception:  # noqa: BLE001 - the build itself reports it
            return check()
        context = json.dumps([config.to_json(), plan.learner_device, sorted(plan.learner_config().items()),
                              sorted(plan.backends.items())], default=repr)
        extra = () if backend is None else (type(backend),)
        try:
            remembered(directory, trainer, spaces, config.trainer_kwargs, "learner", build, extra=extra,
                       context=context)
        except _NotKept as refusal:
            return str(refusal)
        return None

    return remember


def check_trainer_once(trainer: type, spaces: tuple[Any, Any], kwargs: Mapping[str, Any], where: str,
                       env_id: str | None, directory: Path | None) -> None:
    """:func:`~pearl_core.trainer_check.check_trainer` for the composer, skipped when the same trainer code,
    spaces and kwargs passed before (``directory``'s facts); a failure is a :class:`ComposerError` saying
    where."""
    from pearl_core.trainer_check import check_trainer

    def check() -> bool:
        check_trainer(trainer, spaces[0], spaces[1], **kwargs)
        return True

    try:
        remembered(directory, trainer, spaces, kwargs, "checked", check)
    except TrainerError as exc:
        raise ComposerError(f"{where}: trainer {trainer.__qualname__} does not fit {env_id!r}: {exc}") from exc
