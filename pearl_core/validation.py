"""One set of validators for every value that enters PEARL at its edge.

The config dataclasses (:mod:`pearl_core.runtime.config`), the Composer's
setters (:mod:`pearl_core.composer.api`) and the hardware spec check their
values with these functions, so one value gets one rule and one message
wherever it is given. Each validator takes the value and a *label* naming the
field as the user wrote it (``"RunConfig.batch_size"``, ``"Composer.set_run:
seed"``), and returns the value normalised to a plain Python type (a numpy
integer becomes an ``int``) or raises ``error`` (default
:class:`~pearl_core.errors.SpecError`; the Composer passes
:class:`~pearl_core.errors.ComposerError`) with a message that says what was
expected, what was found and the fix::

    RunConfig.batch_size = 0 is invalid; expected an int >= 1 and <= 16,777,216. Fix: e.g. batch_size=64.

A value of the wrong type is reported the same way (``found a str``), never as
a raw ``TypeError``. The module also answers how much memory this machine has
(:func:`memory_available_bytes`) and this process may still map (:func:`address_space_limit`,
``ulimit -v``), for checks that refuse what cannot fit.
"""

from __future__ import annotations

import difflib
import math
import numbers
import os
from typing import Any, Iterable

from pearl_core.errors import SpecError

__all__ = [
    "a_type",
    "address_space_limit",
    "MAX_COUNT",
    "MAX_SEED",
    "MAX_THREADS",
    "boolean",
    "cpu_count",
    "gib",
    "int_at_least",
    "memory_available_bytes",
    "memory_total_bytes",
    "number",
    "one_of",
    "path",
    "positive_number",
    "probability",
    "seed",
    "text",
]

#: Upper bound of every counter (steps, updates, rows): counters live in int64 shared memory.
MAX_COUNT = 2**62
#: Cores or threads of one device, and threads of one primitive: more is a typo, not a machine.
MAX_THREADS = 4096
#: Seeds are ``0 <= seed <= MAX_SEED`` (numpy's and gymnasium's 32-bit range; derived seeds add offsets).
MAX_SEED = 2**32 - 1


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def a_type(value: Any) -> str:
    """``"an int"``, ``"a str"``: the type of ``value`` with its article, for "found ..." in messages."""
    name = type(value).__name__
    return f"{'an' if name[:1] in 'aeiouAEIOU' else 'a'} {name}"


def _fail(label: str, value: Any, expected: str, fix: str, error: type[Exception], found: str = "") -> Exception:
    if found == "type":
        found = f" (found {a_type(value)})"
    else:
        found = f" ({found})" if found else ""
    tail = f" Fix: {fix}." if fix else ""
    return error(f"{label} = {_shown(value)} is invalid; expected {expected}{found}.{tail}")


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def int_at_least(value: Any, label: str, low: int, high: int | None = MAX_COUNT, *, fix: str = "",
                 error: type[Exception] = SpecError) -> int:
    """``value`` as an ``int`` with ``low <= value <= high`` (``high=None``: no upper bound).

    Integral types (``int``, numpy integers) are accepted and returned as ``int``;
    ``bool`` and floats (even ``64.0``) are not.
    """
    expected = f"an int >= {low:,}"
    if not _is_int(value):
        raise _fail(label, value, expected, fix, error, "type")
    value = int(value)
    if value < low or (high is not None and value > high):
        if high is not None and (high != MAX_COUNT or value > high):  # the counters' bound only when it binds
            expected += f" and <= {'2**62' if high == MAX_COUNT else f'{high:,}'}"
        raise _fail(label, value, expected, fix, error)
    return value


def number(value: Any, label: str, *, low: float = -math.inf, high: float = math.inf, low_open: bool = False,
           high_open: bool = False, fix: str = "", error: type[Exception] = SpecError) -> float:
    """``value`` as a finite real number in the given range (NaN and ±inf are refused).

    An ``int`` or ``float`` is returned unchanged; other reals (numpy floats) as ``float``.
    """
    bounds = []
    if low > -math.inf:
        bounds.append(f"{'>' if low_open else '>='} {low:g}")
    if high < math.inf:
        bounds.append(f"{'<' if high_open else '<='} {high:g}")
    expected = "a finite number" + (" " + " and ".join(bounds) if bounds else "")
    if not _is_real(value):
        raise _fail(label, value, expected, fix, error, "type")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int too large for a float
        raise _fail(label, value, expected, fix, error, "too large") from None
    except (TypeError, ValueError):
        raise _fail(label, value, expected, fix, error, "type") from None
    if not finite:
        raise _fail(label, value, expected, fix, error, "not finite")
    if (value <= low if low_open else value < low) or (value >= high if high_open else value > high):
        raise _fail(label, value, expected, fix, error)
    return value if type(value) in (int, float) else float(value)


def positive_number(value: Any, label: str, *, high: float = math.inf, fix: str = "",
                    error: type[Exception] = SpecError) -> float:
    """A finite number ``> 0`` (and ``<= high``)."""
    return number(value, label, low=0.0, low_open=True, high=high, fix=fix, error=error)


def probability(value: Any, label: str, *, fix: str = "", error: type[Exception] = SpecError) -> float:
    """A finite number in ``[0, 1]``."""
    return number(value, label, low=0.0, high=1.0, fix=fix, error=error)


def boolean(value: Any, label: str, *, fix: str = "", error: type[Exception] = SpecError) -> bool:
    """``True`` or ``False`` (not ``0``/``1``, not ``"yes"``)."""
    if not isinstance(value, bool):
        raise _fail(label, value, "True or False", fix or "pass True or False", error, "type")
    return value


def one_of(value: Any, label: str, choices: Iterable[str], *, fix: str = "",
           error: type[Exception] = SpecError) -> str:
    """One of ``choices`` (strings); an unknown string gets the closest choice as the fix."""
    choices = list(choices)
    expected = " or ".join(repr(c) for c in choices) if len(choices) <= 3 else f"one of {choices}"
    if not isinstance(value, str):
        raise _fail(label, value, expected, fix or f"use {expected}", error, "type")
    if value not in choices:
        close = difflib.get_close_matches(value, choices, n=1)
        hint = f"did you mean {close[0]!r}?" if close else (fix or f"use {expected}")
        raise error(f"{label} = {_shown(value)} is unknown; expected {expected}. Fix: {hint}")
    return value


def text(value: Any, label: str, *, expected: str = "a non-empty string", fix: str = "",
         error: type[Exception] = SpecError) -> str:
    """A non-empty ``str`` (not only blanks); ``expected`` says what it names."""
    if not isinstance(value, str) or not value.strip():
        raise _fail(label, value, expected, fix, error, "type" if not isinstance(value, str) else "")
    return value


def path(value: Any, label: str, *, fix: str = "", error: type[Exception] = SpecError) -> str:
    """A filesystem path (``str`` or ``os.PathLike`` of ``str``), returned as ``str``; not empty.

    Whether the path can be used here (no NUL byte, a writable place) is a
    question for this machine: :func:`pearl_core.runtime.machine.check_machine`.
    """
    expected = "a path (a str or pathlib.Path)"
    try:
        as_str = os.fspath(value)
    except TypeError:
        raise _fail(label, value, expected, fix, error, "type") from None
    if not isinstance(as_str, str):
        raise _fail(label, value, expected, fix, error, "type")
    if not as_str:
        raise _fail(label, value, "a path that is not empty", fix, error)
    return as_str


def seed(value: Any, label: str, *, error: type[Exception] = SpecError) -> int:
    """A seed: an int in ``[0, MAX_SEED]`` (gymnasium, numpy and torch all accept those)."""
    return int_at_least(value, label, 0, MAX_SEED, fix="a non-negative int below 2**32, e.g. seed=0", error=error)


# ----------------------------------------------------------------------------- this machine
def gib(nbytes: float) -> str:
    """``nbytes`` in GiB for messages (``"1.50 GiB"``)."""
    return f"{nbytes / 2**30:,.2f} GiB"


def _meminfo(key: str) -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                name, _, rest = line.partition(":")
                if name == key:
                    return int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _sysconf(name: str) -> int | None:
    try:
        pages, size = os.sysconf(name), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None
    return pages * size if pages > 0 and size > 0 else None


def memory_total_bytes() -> int | None:
    """Physical memory of this machine in bytes (``None`` when it cannot be read)."""
    return _meminfo("MemTotal") or _sysconf("SC_PHYS_PAGES")


def memory_available_bytes() -> int | None:
    """Memory a new allocation can get now without swapping, in bytes (``None`` when unknown).

    Linux's ``MemAvailable`` (free memory plus reclaimable caches), else the
    free pages (``os.sysconf``), else the physical memory.
    """
    return _meminfo("MemAvailable") or _sysconf("SC_AVPHYS_PAGES") or memory_total_bytes()


def _mapped_bytes() -> int:
    """Bytes this process maps now (its virtual size, ``/proc/self/statm``); 0 when it cannot be read."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            pages = int(fh.read().split()[0])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return 0


def address_space_limit() -> tuple[int, int] | None:
    """``(limit, left)``: this process's soft address-space limit (``ulimit -v``, ``RLIMIT_AS``) in bytes,
    and what it may still map under it (the limit less what it maps now; the whole limit where that cannot
    be read); ``None`` when there is no such limit."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        unlimited = resource.RLIM_INFINITY
    except (ImportError, OSError, ValueError, AttributeError):
        return None
    if soft == unlimited or soft < 0:
        return None
    return int(soft), max(0, int(soft) - _mapped_bytes())


def cpu_count() -> int:
    """CPU cores this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
