"""Bounded waits of the parallel runtime's host: the stall watchdog and the evaluation thread.

* :class:`Watchdog` — reads every worker's heartbeat (``Control.beat``, written by
  its :class:`~pearl_core.runtime.shared.Heartbeat` in every loop, wait and before
  every environment or trainer call) and reports a worker whose beat has not moved
  for ``stall_timeout_s`` (or, after a (re)start, for ``startup_s``). A worker
  waiting for the host still beats, so only a call that never returns (a frozen
  ``env.step``, ``update_policy``) stops it. The host observes the beats itself:
  while the host is busy elsewhere nothing can look stalled, since a beat that moved
  in between is seen as moved.
* :class:`EvalJob` — a greedy evaluation in a daemon thread. Unlike a thread pool's
  worker, a thread frozen in an environment holds up neither the host's shutdown
  nor the interpreter's exit.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any, Callable, Iterable

from pearl_core.runtime.messages import Phase

__all__ = ["EvalJob", "Watchdog"]


class Watchdog:
    """Watches the heartbeats of the workers of one run.

    Args:
        ctrl: the run's :class:`~pearl_core.runtime.shared.Control`.
        stall_timeout_s: seconds without a beat that count as a stall (``None``: never).
        startup_s: seconds a (re)started worker may take to its first beat.
        every_s: the fastest rate of looks.
    """

    def __init__(self, ctrl, stall_timeout_s: float | None, startup_s: float, every_s: float = 0.25):
        self.ctrl = ctrl
        self.timeout = stall_timeout_s
        self.startup = startup_s
        self.every = every_s
        now = time.monotonic()
        # per worker: (beat last seen, when it was seen to change, whether it beat since its start)
        self._seen = [(int(b), now, True) for b in ctrl.beat]
        self._next = 0.0

    def restarted(self, worker: int) -> None:
        """Worker ``worker`` was started again: it has ``startup_s`` to its first beat."""
        self._seen[worker] = (int(self.ctrl.beat[worker]), time.monotonic(), False)

    def idle_s(self, worker: int) -> float:
        """Seconds since ``worker``'s beat was last seen to move (observed now)."""
        self._observe(worker, time.monotonic())
        return time.monotonic() - self._seen[worker][1]

    def doing(self, worker: int) -> str:
        """What ``worker`` last said it was doing."""
        try:
            _, phase, arg = self.ctrl.status(worker)
            return Phase(phase).describe(arg)
        except ValueError:
            return "(unknown)"

    def _observe(self, worker: int, now: float) -> None:
        beat = int(self.ctrl.beat[worker])
        if beat != self._seen[worker][0]:
            self._seen[worker] = (beat, now, True)

    def look(self, workers: Iterable[int]) -> tuple[int, float, bool] | None:
        """Observe ``workers`` (at most every ``every_s``); ``(worker, idle_s, had_started)`` of one past its
        limit, else ``None``."""
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + self.every
        for w in workers:
            self._observe(w, now)
            _, since, started = self._seen[w]
            limit = self.timeout if started else self.startup
            if limit is not None and now - since > limit:
                return w, now - since, started
        return None


class EvalJob:
    """``fn()`` in a daemon thread, with the future-like calls the host needs.

    Attributes:
        steps: the env-step count of the policy snapshot it evaluates.
        traceback: the formatted traceback when ``fn`` raised (else ``""``).
    """

    def __init__(self, fn: Callable[[], Any], steps: int, name: str = "pearl-eval"):
        self.steps = steps
        self.traceback = ""
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._result = fn()
        except BaseException as exc:  # noqa: BLE001 - carried to the host, which decides
            self._error = exc
            self.traceback = traceback.format_exc()
        finally:
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds; whether it has finished."""
        return self._done.wait(timeout)

    def result(self) -> Any:
        """``fn``'s return value (call once :meth:`done`); re-raises what it raised."""
        if self._error is not None:
            raise self._error
        return self._result
