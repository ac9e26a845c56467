"""Reading the composer's frozen values back from dicts: one check for unknown keys."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from pearl_core.errors import SpecError

__all__ = ["check_fields"]


def check_fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` as a new dict, after checking every key is a field of the dataclass ``cls``.

    Raises:
        SpecError: naming the class, the unknown keys and the known ones.
    """
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise SpecError(f"{cls.__name__}: unknown field(s) {unknown}; known: {sorted(known)}.")
    return dict(data)
