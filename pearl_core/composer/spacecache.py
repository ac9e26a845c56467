"""An environment's spaces, remembered across composes for environments that installed packages define.

Composing reads the spaces of the run's environment, which builds it: for MinAtar that imports ``minatar``
and with it seaborn, scipy and matplotlib (about 2 s on the 2-core VM), for Atari it loads the ROM. The
spaces of an environment that gymnasium itself or an installed family (ALE, MinAtar) defines depend only
on the id, its keyword arguments, PEARL's presets and the versions of the packages involved, so the
composer keeps them (``env-spaces.json`` in the profile cache's directory) under a digest of those.

Not remembered: environments registered by a user's module or script (``module:Env-v0``, or registered
before composing: their code may change without any version changing), user wrappers, and spaces other than
``Box``, ``Discrete``, ``MultiDiscrete`` and ``MultiBinary``. Those are built each time, as before.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pearl_core.errors import PearlError
from pearl_core.fileio import atomic_write

__all__ = ["CACHE_FILE", "remembered_spaces"]

#: The file in the profile cache's directory that holds remembered spaces.
CACHE_FILE = "env-spaces.json"
_KEEP = 128


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def _origin(env_id: str, wrappers: Sequence[Any] | None) -> str | None:
    """Who defines ``env_id`` (a distribution and its version, or gymnasium), or ``None``: not remembered."""
    import gymnasium

    from pearl_core.envs import PRESETS, family_distribution, wrapper_parts

    if any(wrapper_parts(w)[0] not in PRESETS for w in wrappers or ()):
        return None  # a user's wrapper: its code may change
    dist = family_distribution(env_id)
    if dist is not None:
        return f"{dist}=={_version(dist)}"
    if ":" in env_id:
        return None
    spec = gymnasium.registry.get(env_id)
    entry = getattr(spec, "entry_point", None)
    if isinstance(entry, str) and entry.startswith("gymnasium.envs."):
        return "gymnasium"
    return None


def _array(value: Any) -> dict[str, Any]:
    arr = np.ascontiguousarray(value)
    return {"dtype": arr.dtype.str, "shape": list(arr.shape), "data": base64.b64encode(arr.tobytes()).decode()}


def _unarray(row: Mapping[str, Any]) -> np.ndarray:
    data = base64.b64decode(row["data"])
    return np.frombuffer(data, dtype=np.dtype(row["dtype"])).reshape(row["shape"]).copy()


def _encode(space: Any) -> dict[str, Any] | None:
    from gymnasium import spaces

    if type(space) is spaces.Box:
        return {"kind": "Box", "dtype": np.dtype(space.dtype).str, "low": _array(space.low),
                "high": _array(space.high)}
    if type(space) is spaces.Discrete:
        return {"kind": "Discrete", "n": int(space.n), "start": int(space.start)}
    if type(space) is spaces.MultiDiscrete:
        return {"kind": "MultiDiscrete", "nvec": _array(space.nvec), "start": _array(space.start),
                "dtype": np.dtype(space.dtype).str}
    if type(space) is spaces.MultiBinary:
        return {"kind": "MultiBinary", "n": np.asarray(space.n).tolist()}
    return None


def _decode(row: Mapping[str, Any]) -> Any:
    from gymnasium import spaces

    kind = row["kind"]
    if kind == "Box":
        low, high = _unarray(row["low"]), _unarray(row["high"])
        return spaces.Box(low=low, high=high, shape=low.shape, dtype=np.dtype(row["dtype"]))
    if kind == "Discrete":
        return spaces.Discrete(int(row["n"]), start=int(row["start"]))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(_unarray(row["nvec"]), dtype=np.dtype(row["dtype"]), start=_unarray(row["start"]))
    if kind == "MultiBinary":
        return spaces.MultiBinary(row["n"])
    raise ValueError(f"unknown space kind {kind!r}")


def _read(path: Path) -> dict[str, Any]:
    try:
        known = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def remembered_spaces(directory: Path | None, env_id: str, kwargs: Mapping[str, Any] | None,
                      wrappers: Sequence[Any] | None, build: Callable[[], tuple[Any, Any]]) -> tuple[Any, Any]:
    """``build()``'s ``(observation_space, action_space)``, or the same spaces remembered in ``directory``.

    ``build`` raises on failure (nothing is kept then); an entry that cannot be read back is built again.
    """
    origin = None if directory is None else _origin(env_id, wrappers)
    if origin is None:
        return build()
    from pearl_core import envs
    from pearl_core._version import __version__

    presets = Path(envs.__file__).stat()  # PEARL's presets wrap the family's envs
    key = hashlib.sha256(json.dumps([env_id, dict(kwargs or {}), repr(wrappers), origin, sys.version,
                                     _version("gymnasium"), _version("numpy"), __version__, presets.st_size,
                                     presets.st_mtime_ns],
                                    sort_keys=True, default=repr).encode()).hexdigest()
    path = Path(directory) / CACHE_FILE  # type: ignore[arg-type]
    known = _read(path)
    row = known.get(key)
    if isinstance(row, list) and len(row) == 2:
        try:
            return _decode(row[0]), _decode(row[1])
        except (KeyError, TypeError, ValueError):
            pass  # damaged: built again below
    spaces = build()
    encoded = [_encode(space) for space in spaces]
    rows = [r for r in encoded if r is not None]
    if len(rows) < len(encoded):
        return spaces
    try:
        if tuple(_decode(r) for r in rows) != tuple(spaces):  # what would be read back is what was built
            return spaces
    except (KeyError, TypeError, ValueError):
        return spaces
    known.pop(key, None)
    kept = dict(list(known.items())[-(_KEEP - 1):])
    kept[key] = rows
    try:
        atomic_write(path, json.dumps(kept), make_parents=True)
    except (OSError, PearlError):
        pass
    return spaces
