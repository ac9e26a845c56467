"""The soak's faults that act inside a segment's host process (``benchmarks/soak.py``).

Some faults cannot be done from outside with a signal to a worker: a full disk, a
transport that loses a message. The segment process (the run's host) installs
them here before its run starts, disarmed; the soak arms them at a planned time
with ``SIGUSR1`` to the host, like the other faults it injects by signal. Nothing
here changes PEARL: they stand in for the operating system and a plugin.

* ``enospc-logs`` — from then on every ``fsync`` of the host fails with
  ``OSError(ENOSPC)``: a disk that filled up, as file systems with delayed
  allocation report it (the writes were taken into the page cache; the flush to
  the disk fails). The run meets it where it makes its logs durable, before its
  next checkpoint.
* ``enospc-checkpoint`` — only the ``fsync`` of a checkpoint's temporary file
  fails: the checkpoint write itself meets the full disk (the logs were synced).
* ``transport-drop`` — the CPU backend's LAQ transport is
  :class:`~pearl_core.testing.transports.FaultyTransport` (its
  ``make_transport``, as a plugin would give it); once armed, the next message
  the host puts on it is lost (counted as sent, never delivered).

Each leaves a line in the segment's output saying when it was armed.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from typing import Any

from pearl_core.testing.transports import FaultyTransport

#: The kinds a segment can install (the spec's ``"armed"``).
KINDS = ("enospc-logs", "enospc-checkpoint", "transport-drop")
#: The signal that arms the installed fault.
ARM_SIGNAL = signal.SIGUSR1


class _State:
    armed = False
    kind: str | None = None
    transports: list[Any] = []
    failed_fsyncs = 0


def armed() -> bool:
    return _State.armed


def install(kind: str | None) -> None:
    """Install fault ``kind`` (one of :data:`KINDS`) disarmed, and the ``SIGUSR1`` handler that arms it."""
    if kind is None:
        return
    if kind not in KINDS:
        raise ValueError(f"soak fault {kind!r}: expected one of {KINDS}")
    _State.kind = kind
    if kind.startswith("enospc"):
        _install_enospc(checkpoint_only=kind == "enospc-checkpoint")
    else:
        _install_transport_drop()
    signal.signal(ARM_SIGNAL, _arm)


def _arm(signum, frame) -> None:
    _State.armed = True
    for t in _State.transports:  # the host's copy: the next message it puts is lost
        t.drop_next = True
    print(f"[soak fault] {_State.kind} armed", file=sys.stderr, flush=True)


def _install_enospc(checkpoint_only: bool) -> None:
    real_fsync = os.fsync

    def fsync(fd):
        if _State.armed and (not checkpoint_only or ".checkpoint.pt." in _fd_path(fd)):
            _State.failed_fsyncs += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    os.fsync = fsync


def _fd_path(fd: Any) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}")
    except (OSError, ValueError, AttributeError):
        return ""


def _install_transport_drop() -> None:
    from pearl_core.placement import backend_for_device

    _, backend = backend_for_device("cpu", "learner transport")

    def make_transport(self, role, maxsize, ctx):
        if role != "laq":
            return None  # PEARL's own
        t = _DropNext(maxsize, ctx)  # drops nothing until armed
        _State.transports.append(t)
        return t

    type(backend).make_transport = make_transport



class _DropNext(FaultyTransport):
    """Loses the first message put after :func:`_arm` ran (``drop_next``): decided at the start of ``put``, so an
    arming that interrupts a put in progress loses the next message, not none (setting ``drop`` to the put count
    from the handler could name a message already past its check: the smoke's setting-1 drop, 1 run in 3)."""

    drop_next = False

    def put(self, item, block: bool = True, timeout: float | None = None) -> None:
        if self.drop_next:
            self.drop_next = False
            self.drop = self.puts
        super().put(item, block, timeout)
