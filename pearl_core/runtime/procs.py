"""How the parallel runtime starts its worker processes.

Every actor and learner process needs torch, numpy, gymnasium and PEARL's runtime
modules. Started with ``spawn``, each child imports them itself (torch, plus
``torch._dynamo``, which torch's optimizers import on first use): seconds of CPU
per child before its first env step, at every run and every actor restart.

On platforms that have it (Linux, macOS) workers therefore start from
multiprocessing's *fork server*: one clean, single-purpose process that imports
:mod:`pearl_core.runtime._preload` once and forks a worker per request. The first
run in a Python process pays the imports once (in the server, overlapped with the
host building its own trainer); later runs, and actor restarts, start in a fraction
of a second. The server is not a copy of the host (no threads, no CUDA context, no
open files of the user's) — what makes plain ``fork`` unsafe does not apply.

Liveness: a worker watches the host through multiprocessing's parent sentinel
(:class:`HostWatch`), which works the same under both methods. Its parent pid would
not do: a fork-server worker's parent is the server, which lives on while any of
its workers does.

Under both methods a worker first re-imports the main script from its file (that is
why runs start under ``if __name__ == "__main__":``). A script read from stdin
(``python - < script.py``) has no file, so no worker could start:
:func:`check_main_module` refuses such a run before any process starts.

``PEARL_START_METHOD=spawn`` (or ``forkserver``) chooses explicitly. Spawn is the
default where there is no fork server (Windows). The fork server keeps the
environment it started with: set environment variables that workers must see
(``CUDA_VISIBLE_DEVICES``, ...) before the first run, or use ``spawn``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from typing import Any

from pearl_core.errors import SpecError

__all__ = ["START_METHOD_ENV", "STOP_SIGNALS", "HostWatch", "check_main_module", "ignore_stop_signals",
           "install_stop_handlers", "quick_exit", "restore_stop_handlers", "start_method", "worker_context"]

#: Environment variable that overrides the start method (``forkserver`` or ``spawn``).
START_METHOD_ENV = "PEARL_START_METHOD"
_METHODS = ("forkserver", "spawn")
_PRELOAD = ["pearl_core.runtime._preload"]


def start_method() -> str:
    """The start method for worker processes: ``$PEARL_START_METHOD``, else the fork server where available."""
    chosen = os.environ.get(START_METHOD_ENV, "").strip()
    available = mp.get_all_start_methods()
    if chosen:
        if chosen not in _METHODS or chosen not in available:
            ok = [m for m in _METHODS if m in available]
            raise SpecError(
                f"{START_METHOD_ENV}={chosen!r}: not a start method PEARL can use here; expected one of {ok}. "
                f"Fix: unset {START_METHOD_ENV} (the default is {ok[0]!r}) or set it to one of those."
            )
        return chosen
    return "forkserver" if "forkserver" in available else "spawn"


def check_main_module() -> None:
    """Refuse to start workers when the main module names a file that does not exist.

    ``spawn`` and ``forkserver`` workers re-import the main module from its file; a
    script run from stdin (``python - < script.py``, ``__file__ == "<stdin>"``) has none,
    and every worker would die before PEARL's code runs. An interactive session or
    ``python -c`` has no ``__file__`` at all and is fine (nothing is re-imported).

    Raises:
        SpecError: the main module's file does not exist (the message says how to run it).
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or getattr(main, "__spec__", None) is not None or path is None:
        return  # run as a module (python -m), interactive, or python -c: nothing to re-import by path
    if not os.path.isfile(path):
        how = "a script read from stdin (`python - < script.py`)" if path == "<stdin>" else "a script without a file"
        raise SpecError(
            f"the parallel runtime cannot start its workers: the main module's file is {path!r}, which does not "
            f"exist ({how}). Each worker process starts by re-importing the main script from its file, so none "
            "could start. Nothing was started. Fix: save the script to a file and run `python script.py` (with "
            "the code that starts the run under `if __name__ == \"__main__\":`), or use the SerialRuntime."
        )


def worker_context(early: bool = False):
    """The multiprocessing context workers start from.

    Args:
        early: start the fork server now (if that is the method and it is not running), so
            its imports overlap the caller's own set-up.

    Raises:
        SpecError: a bad ``$PEARL_START_METHOD``, or a main script without a file (:func:`check_main_module`).
    """
    check_main_module()
    method = start_method()
    ctx = mp.get_context(method)
    if method == "forkserver":
        # Affects only a server started after this call; one already running is used as it is.
        ctx.set_forkserver_preload(_PRELOAD)
        if early:
            from multiprocessing import forkserver

            forkserver.ensure_running()
    return ctx


class HostWatch:
    """In a worker: has the host (the process that started this one) exited?

    Looks at most every ``every_s`` seconds (a zero-timeout wait on multiprocessing's
    parent sentinel, a few microseconds), so it can sit in a hot loop. In a process
    not started by multiprocessing it never reports the host gone.
    """

    def __init__(self, every_s: float = 0.05):
        self._parent = mp.parent_process()
        self._every = every_s
        self._next = 0.0
        self._gone = False

    def gone(self) -> bool:
        if self._gone or self._parent is None:
            return self._gone
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self._every
            self._gone = not self._parent.is_alive()
        return self._gone


def quick_exit(code: int) -> None:
    """Leave a worker without interpreter teardown (seconds for a process that imported torch)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed, replaced or missing stream must not stop the exit
            pass
    os._exit(code)


#: The signals that end a run cleanly with a final checkpoint (SIGHUP where the platform has it: a closed
#: terminal or ssh session, ``kill -HUP``).
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


def install_stop_handlers(target: Any) -> dict[int, Any]:
    """SIGINT / SIGTERM / SIGHUP (:data:`STOP_SIGNALS`) set ``target.interrupted`` (the signal's name) and
    ``target.interrupted_at`` (``time.monotonic()`` of the first) instead of raising or ending the process, so
    the run's loop stops cleanly with a checkpoint; a second Ctrl-C raises :class:`KeyboardInterrupt` (the
    ``finally`` clauses still clean up). ``target.interrupted`` / ``interrupted_at`` are reset to ``None`` here.
    Only in the main thread (elsewhere nothing is installed: Python delivers signals to the main thread only).
    Returns the handlers replaced, for :func:`restore_stop_handlers`."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    target.interrupted = None
    target.interrupted_at = None

    def on_signal(signum, frame):
        if target.interrupted is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # second Ctrl-C: abort now
        if target.interrupted_at is None:
            target.interrupted_at = time.monotonic()  # from now on every wait is cut short
        target.interrupted = signal.Signals(signum).name

    old = {}
    try:
        for sig in STOP_SIGNALS:
            old[sig] = signal.signal(sig, on_signal)
    except BaseException:
        restore_stop_handlers(old)
        raise
    return old


def restore_stop_handlers(old: dict[int, Any]) -> None:
    """Put back the handlers :func:`install_stop_handlers` replaced."""
    for sig, handler in old.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def ignore_stop_signals() -> None:
    """In a worker: SIGINT and SIGHUP (a terminal's Ctrl-C, or its closing, reach the whole process group) are
    the host's to act on; the worker ignores them and stops when the host tells it to (or is gone)."""
    for name in ("SIGINT", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
