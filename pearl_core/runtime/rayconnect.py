"""Connecting to Ray for the Ray runtime (:mod:`pearl_core.runtime.rayrun`): the import, and connects with a deadline.

``ray.init(address=...)`` keeps retrying an address nothing answers at for minutes without a word;
:func:`connect_ray` probes an address with a host and port first (a TCP connect bounded by
:func:`connect_timeout`: ``RayRuntime(connect_timeout_s=...)``, ``$PEARL_RAY_CONNECT_TIMEOUT_S``, or 30 s),
so an unreachable cluster is a :class:`~pearl_core.errors.SpecError` naming the address and the fix.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time

from pearl_core.errors import SpecError

__all__ = ["CONNECT_TIMEOUT_ENV", "CONNECT_TIMEOUT_S", "RAY_INSTALL", "connect_ray", "connect_timeout", "import_ray"]

#: How to install the Ray runtime's dependency.
RAY_INSTALL = "pip install 'pearl-core[ray]'"


def import_ray():
    """``import ray``, or a :class:`SpecError` saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise SpecError(f"the Ray runtime needs Ray, which is not installed here ({exc}). Fix: {RAY_INSTALL} "
                        "(Ray >= 2.40), or train on one machine with SerialRuntime / ParallelRuntime.") from exc
    return ray


#: Seconds a connection to a Ray cluster may take before it is given up (``$PEARL_RAY_CONNECT_TIMEOUT_S``
#: overrides it; so does ``RayRuntime(connect_timeout_s=...)``).
CONNECT_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_ENV = "PEARL_RAY_CONNECT_TIMEOUT_S"
_FIX = ("Fix: start the cluster (`ray start --head` on its head node, `ray start --address HEAD:6379` on the "
        "others) and give its address (HOST:6379, ray://HOST:10001, or 'auto' on one of its nodes)")


def connect_timeout(timeout_s: float | None = None) -> float:
    """The connect deadline: ``timeout_s``, else ``$PEARL_RAY_CONNECT_TIMEOUT_S``, else :data:`CONNECT_TIMEOUT_S`."""
    value: object = timeout_s
    if timeout_s is None:
        raw = os.environ.get(CONNECT_TIMEOUT_ENV, "").strip()
        if not raw:
            return CONNECT_TIMEOUT_S
        try:
            value = float(raw)
        except ValueError:
            value = raw  # refused below
        where = f"${CONNECT_TIMEOUT_ENV}"
    else:
        where = "connect_timeout_s"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and value > 0):
        raise SpecError(f"{where} = {value!r}; expected seconds > 0 (default {CONNECT_TIMEOUT_S:g}).")
    return float(value)


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a Ray address to probe, or ``None`` when it names none (``"auto"``, ``"local"``)."""
    rest = address.split("://", 1)[1] if "://" in address else address
    rest = rest.split("/", 1)[0]
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _probe(address: str, timeout_s: float) -> None:
    """Raise :class:`SpecError` unless something accepts a TCP connection at ``address`` within ``timeout_s``.

    ``ray.init`` keeps retrying an address nothing answers at for minutes, without a word; a plain TCP
    connect tells in at most ``timeout_s`` (at once when the host refuses).
    """
    hp = _host_port(address)
    if hp is None:
        return
    t = time.monotonic()
    try:
        with socket.create_connection(hp, timeout=timeout_s):
            return
    except socket.timeout:
        why = f"no answer within {timeout_s:g} s (connect_timeout_s; ${CONNECT_TIMEOUT_ENV})"
    except OSError as exc:
        why = f"{type(exc).__name__}: {exc.strerror or exc} after {time.monotonic() - t:.1f} s"
    raise SpecError(f"cannot connect to the Ray cluster at {address!r}: nothing accepts connections at "
                    f"{hp[0]}:{hp[1]} ({why}). {_FIX}; raise connect_timeout_s (or ${CONNECT_TIMEOUT_ENV}) "
                    "for a slow network.")


def connect_ray(ray, address: str | None, timeout_s: float | None = None) -> bool:
    """Connect this process to Ray unless it is already: to the cluster at ``address``, or (``None``)
    a local Ray started here. Returns whether it was started here (the caller shuts it down).

    An address with a host and port is probed first (a TCP connect bounded by ``timeout_s``, default
    :func:`connect_timeout`), so an unreachable cluster is an error within that deadline, not a silent wait.

    Raises:
        SpecError: no cluster answers at ``address`` (or a local Ray cannot start), with the address and the fix.
    """
    if ray.is_initialized():
        return False
    deadline = connect_timeout(timeout_s)
    try:
        if address is not None:
            _probe(address, deadline)
            ray.init(address=address, logging_level=logging.WARNING)
            return False
        ray.init(include_dashboard=False, logging_level=logging.WARNING)
        return True
    except SpecError:
        raise
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError here
        where = f"the Ray cluster at {address!r}" if address is not None else "a local Ray"
        raise SpecError(f"cannot connect to {where}: {type(exc).__name__}: {str(exc).strip()[:300]}. "
                        f"{_FIX}.") from exc
