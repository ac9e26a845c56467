"""Bounded message queues between the processes of a parallel run.

* :class:`MessageQueue` — what the runtime needs of a queue (the stdlib names).
* :class:`PipeQueue` — a bounded single-producer/single-consumer queue over a
  pipe with the :class:`queue.Queue` method names; ``put`` blocks (or raises
  :class:`queue.Full`) once ``maxsize`` messages are unread.
* :func:`put_while` — a put that gives up when its receiver stopped listening.
* :class:`SequencedQueue` — wraps any transport (a backend's LAQ/LDQ): the core
  stamps a sequence number on every message it sends and counts what it sent in
  shared memory, and checks both on receipt, so a transport that loses,
  duplicates or reorders a message is a :class:`~pearl_core.errors.TransportError`
  naming it, within :data:`LOSS_GRACE_S` seconds, never a silent loss or a hang;
  at the end of a run the receiver drains what is left and compares the counts
  (:meth:`SequencedQueue.settle`), so a loss in the run's last seconds is one too.

Messages are the small typed values of :mod:`pearl_core.runtime.messages`;
bulk data stays in shared memory.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import select
import threading
import time
from typing import Any, Protocol

from pearl_core.errors import InvalidValueError, TransportError
from pearl_core.runtime.shm import Layout, ShmArena, ShmBlock, track_semaphore

__all__ = ["LOSS_GRACE_S", "MessageQueue", "PipeQueue", "SequencedQueue", "put_while"]

#: Seconds a message counted as sent may stay unreadable at the receiver before it counts as lost.
LOSS_GRACE_S = 3.0


class MessageQueue(Protocol):
    """What the runtime needs of a queue: the stdlib :class:`queue.Queue` names.

    :class:`PipeQueue`, ``multiprocessing.Queue`` and ``queue.Queue`` all fit.
    """

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None: ...

    def get(self, block: bool = True, timeout: float | None = None) -> Any: ...

    def put_nowait(self, item: Any) -> None: ...

    def get_nowait(self) -> Any: ...


def put_while(q: MessageQueue, item: Any, keep_waiting, poll_s: float = 0.5) -> bool:
    """``q.put(item)``, waiting for room only while ``keep_waiting()`` is true.

    A worker uses it so that a host that stopped reading (or died) cannot keep
    it blocked forever. Returns whether the item was sent.
    """
    while True:
        try:
            q.put(item, timeout=poll_s)
            return True
        except queue.Full:
            if not keep_waiting():
                return False


class PipeQueue:
    """Bounded single-producer/single-consumer message queue over a pipe.

    Messages are small picklable values (slot numbers, counters, a traceback).
    A semaphore counts the free places: ``put`` takes one (blocking, or raising
    :class:`queue.Full`), ``get`` gives it back. Unlike ``multiprocessing.Queue``
    it has no feeder thread and no lock shared between writers, so a producer
    killed mid-run cannot wedge the queue for anybody else.

    Exactly one process puts and one gets (any two, including the same one).
    Pass the queue to the other process as a ``Process`` argument. For
    :func:`multiprocessing.connection.wait`, :attr:`reader` is the object to wait on.

    Args:
        maxsize: unread messages allowed before ``put`` blocks, ``>= 1``.
        ctx: the multiprocessing context (default: ``spawn``).
    """

    def __init__(self, maxsize: int, ctx=None):
        if maxsize < 1:
            raise InvalidValueError(f"PipeQueue: maxsize = {maxsize}; expected >= 1 (every queue is bounded).")
        ctx = ctx or mp.get_context("spawn")
        self.maxsize = maxsize
        self._reader, self._writer = ctx.Pipe(duplex=False)
        self._free = ctx.BoundedSemaphore(maxsize)
        self._rlock = threading.Lock()
        self._poller: select.poll | None = None  # select.poll on the reader, made at the first poll(0) (see poll)
        # The semaphore's name is marked as this process's (for as long as the semaphore exists), so a job
        # killed outright leaves nothing the next run cannot find and remove (pearl_core.runtime.shm.clean_orphans).
        track_semaphore(self._free)

    def __getstate__(self):
        return {"maxsize": self.maxsize, "_reader": self._reader, "_writer": self._writer, "_free": self._free}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._rlock = threading.Lock()
        self._poller = None

    @property
    def reader(self):
        """The receiving connection (``multiprocessing.connection.wait`` accepts it)."""
        return self._reader

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """Send ``item``; blocks while ``maxsize`` messages are unread.

        Raises:
            queue.Full: no place within ``timeout`` (or at once if ``block`` is false).
            OSError: the queue was closed in this process.
        """
        if self._free is None:
            raise OSError("PipeQueue.put: the queue is closed in this process")
        if not self._free.acquire(block, timeout if block else None):
            raise queue.Full
        try:
            self._writer.send(item)
        except BaseException:
            self._free.release()
            raise

    def put_nowait(self, item: Any) -> None:
        self.put(item, block=False)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Receive the oldest message.

        Raises:
            queue.Empty: nothing arrived within ``timeout`` (or at once if ``block`` is false).
            EOFError: the producer's end is closed and nothing is left.
        """
        with self._rlock:
            if not self._reader.poll(timeout if block else 0):
                raise queue.Empty
            item = self._reader.recv()
        if self._free is not None:
            self._free.release()
        return item

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def poll(self, timeout: float = 0.0) -> bool:
        """Whether a message (or the end of the stream) is waiting; waits up to ``timeout`` seconds.

        ``poll(0)`` sits in a worker's hot loop, so it asks one ``select.poll`` object kept for
        the reader instead of building a selector per call.
        """
        if timeout == 0 and hasattr(select, "poll"):
            if self._poller is None:
                self._poller = select.poll()
                self._poller.register(self._reader.fileno(), select.POLLIN)
            return bool(self._poller.poll(0))
        return self._reader.poll(timeout)

    def qsize(self) -> int:
        """Unread messages (approximate while the other side is active; Linux; 0 once closed)."""
        return 0 if self._free is None else self.maxsize - self._free.get_value()

    def empty(self) -> bool:
        return not self._reader.poll(0)

    def full(self) -> bool:
        return self.qsize() >= self.maxsize

    def close_sender(self) -> None:
        """This process only receives: close its copy of the sending end.

        Once every copy of the sending end is closed (the producer exited or
        died), :meth:`get` raises ``EOFError`` instead of waiting forever.
        """
        self._writer.close()

    def close_receiver(self) -> None:
        """This process only sends: close its copy of the receiving end.

        Once every copy of the receiving end is closed, :meth:`put` raises
        ``BrokenPipeError``: a producer notices that its consumer is gone.
        """
        self._reader.close()

    def close(self) -> None:
        """Close both ends in this process (idempotent) and drop its semaphore: multiprocessing unlinks a named
        semaphore, and PEARL its marker, when the last reference to it goes (at once, unless a ``Process``
        object that was given this queue is still alive)."""
        self._reader.close()
        self._writer.close()
        self._free = None


class SequencedQueue:
    """A transport as the core uses it: every message sent carries a sequence number, and a shared counter
    holds how many were sent (a shared-memory word); the receiver checks both.

    * A message whose number is not the next one expected (one lost in between, a duplicate, or one out of
      order) raises :class:`~pearl_core.errors.TransportError` at once from ``get``.
    * Messages counted as sent that the receiver cannot read for :attr:`grace_s` seconds (the last ones lost:
      no later message reveals the gap) raise it from ``get`` / ``poll`` / :meth:`check` — so a receiver that
      waits for work notices within a bounded time instead of waiting forever.
    * At the end of a run the receiver calls :meth:`settle` (or :meth:`final_check`): it reads what is still
      readable and compares the counts, so a message lost in the run's last seconds (the sender's last one,
      which the receiver may never wait for) is an error too, not silence.

    After raising, the receiver resynchronises (the error is raised once per fault), so the run can still ask
    for the worker's state and end with a checkpoint. Exactly one process puts and one gets, as for
    :class:`PipeQueue`; pass it to the other process as a ``Process`` argument (the counter is shared memory).

    Args:
        inner: the transport (anything with :class:`PipeQueue`'s surface).
        name: the queue, for messages (``"LAQ"``, ``"LDQ"``).
        transport: who gave the transport, for messages (e.g. ``"pearl_foo.queues.FooQueue of plugin 'foo'"``).
        arena: where the shared counter lives (a one-word segment; unlinked with the arena).
        grace_s: :attr:`grace_s` (default :data:`LOSS_GRACE_S`).
    """

    def __init__(self, inner: Any, name: str, transport: str, arena: ShmArena, grace_s: float = LOSS_GRACE_S):
        self.inner, self.name, self.transport, self.grace_s = inner, name, transport, float(grace_s)
        self._block: ShmBlock | None = arena.block(Layout.of({"sent": ((1,), "<i8")}), f"{name.lower()}seq")
        self._handle = self._block.handle
        self._count = self._block.arrays["sent"]  # messages put (written by the sender only)
        self._next_put = 0  # sender side
        self._next_get = 0  # receiver side
        self._missing_since: float | None = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state.update(_block=None, _count=None, _missing_since=None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._block = ShmBlock.attach(self._handle)
        self._count = self._block.arrays["sent"]

    @property
    def reader(self):
        return self.inner.reader

    @property
    def maxsize(self) -> int:
        return getattr(self.inner, "maxsize", 0)

    @property
    def sent(self) -> int:
        """Messages the sender has put so far."""
        return int(self._count[0])

    @property
    def received(self) -> int:
        """Messages this receiver has taken so far."""
        return self._next_get

    # -- sending -------------------------------------------------------------------------
    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        self.inner.put((self._next_put, item), block, timeout)
        self._next_put += 1  # only once the transport took it (a refused put delivers nothing)
        self._count[0] = self._next_put

    def put_nowait(self, item: Any) -> None:
        self.put(item, block=False)

    # -- receiving -----------------------------------------------------------------------
    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        try:
            got = self.inner.get(block, timeout)
        except queue.Empty:
            self.check()
            raise
        self._missing_since = None
        return self._accept(got)

    def _accept(self, got: Any) -> Any:
        """The message in ``got`` (as the transport delivered it), its sequence number checked."""
        _, item, error = self._checked(got)
        if error is not None:
            raise error
        return item

    def _checked(self, got: Any) -> tuple[bool, Any, TransportError | None]:
        """``(new, message, error)`` for what the transport delivered: ``new`` is false for a foreign object
        and for a message received already (a repeat); ``error`` is the fault it reveals, if any."""
        if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], int)):
            return False, None, self._error(f"delivered {type(got).__name__} {got!r:.80}, which is not a message "
                                            "the core sent (each carries its sequence number)", self._next_get, None)
        seq, item = got
        expected = self._next_get
        if seq == expected:
            self._next_get = seq + 1
            return True, item, None
        what = (f"message {expected} was lost ({seq - expected} message(s) missing: message {seq} arrived "
                f"next)" if seq > expected else f"message {seq} arrived again or out of order (expected "
                f"message {expected})")
        self._next_get = max(expected, seq + 1)  # resynchronise: the fault is reported once
        return seq > expected, item, self._error(what, expected, seq)

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def poll(self, timeout: float = 0.0) -> bool:
        if self.inner.poll(timeout):
            return True
        self.check()
        return False

    def check(self) -> None:
        """Raise :class:`TransportError` when messages sent have not been readable for :attr:`grace_s`."""
        if self._count[0] <= self._next_get or self.inner.poll(0):  # nothing missing, or it is readable
            self._missing_since = None
            return
        now = time.monotonic()
        if self._missing_since is None:
            self._missing_since = now
            return
        if now - self._missing_since < self.grace_s:
            return
        sent, expected = int(self._count[0]), self._next_get
        self._next_get, self._missing_since = sent, None  # resynchronise: the fault is reported once
        raise self._error(f"{sent - expected} message(s) sent (from message {expected} on) never arrived: "
                          f"{self.grace_s:g} s after they were sent the transport still had nothing to read",
                          expected, None)

    def settle(self, timeout_s: float | None = None) -> tuple[list[Any], TransportError | None]:
        """The receiver's end-of-run check: read every message still readable, then compare the count sent
        with the count received.

        Call it once the sender has sent its last message (its process stopped, or it said so). Messages
        counted as sent that are not readable yet are waited for, up to ``timeout_s`` seconds (default
        :attr:`grace_s`) after they were first seen missing; nothing readable and nothing missing returns at
        once, and a sender that closed its end (``EOFError``) ends the wait, since nothing more can arrive.

        Returns:
            ``(messages, error)``: the messages read, in order (the caller handles them as the run handles
            them); and ``None``, or the :class:`~pearl_core.errors.TransportError` for the first fault seen:
            a message lost before a later one, repeated or foreign while draining, or messages sent that
            never arrived (the last ones, which no later message reveals). Never raises it: a caller that
            must still handle the messages read decides when to raise it.
        """
        wait = self.grace_s if timeout_s is None else float(timeout_s)
        now = time.monotonic()
        deadline = (now if self._missing_since is None else min(now, self._missing_since)) + wait
        items: list[Any] = []
        error: TransportError | None = None
        while True:
            missing = self._count[0] > self._next_get
            try:
                if not self.inner.poll(max(0.0, deadline - time.monotonic()) if missing else 0.0):
                    if not missing or time.monotonic() >= deadline:
                        break
                    continue
                got = self.inner.get(block=False)
            except queue.Empty:  # poll saw a message that get did not: look again, until the deadline
                if time.monotonic() >= deadline:
                    break
                continue
            except (EOFError, OSError):  # the sender is gone (or this end is closed): nothing more can arrive
                break
            new, item, fault = self._checked(got)
            if new:  # a message past a gap is still handed over (it arrived); a repeat or a foreign object not
                items.append(item)
            error = error or fault  # resynchronised: the drain goes on, the first fault is the one kept
        self._missing_since = None
        sent, expected = int(self._count[0]), self._next_get
        if sent > expected:
            self._next_get = sent  # reported once
            error = error or self._error(
                f"{sent - expected} message(s) sent (from message {expected} on) never arrived: when the run "
                f"ended the receiver had taken {expected} of the {sent} sent, and the transport had nothing more to "
                f"read (waited up to {wait:g} s for them)", expected, None)
        return items, error

    def final_check(self, timeout_s: float | None = None) -> list[Any]:
        """:meth:`settle`, raising its error: the messages still readable, in order.

        Raises:
            TransportError: a message sent was lost (or repeated, or foreign), naming the transport and queue.
        """
        items, error = self.settle(timeout_s)
        if error is not None:
            raise error
        return items

    def _error(self, what: str, expected: int, found: int | None) -> TransportError:
        return TransportError(
            f"the {self.name} transport {self.transport} {what}. PEARL stamps a sequence number on every message "
            f"it sends through a transport and counts them, so a transport that loses, duplicates or reorders "
            f"messages is stopped here instead of losing data silently. The run ends after a checkpoint. Fix: "
            f"report it to the transport's authors (run pearl_core.testing.TransportConformance on it), or plan "
            f"without that backend's transport.", transport=self.transport, queue=self.name, expected=expected,
            found=found)

    # -- the rest of the surface ---------------------------------------------------------------
    def qsize(self) -> int:
        return self.inner.qsize()

    def empty(self) -> bool:
        return self.inner.empty()

    def full(self) -> bool:
        return self.inner.full()

    def close_sender(self) -> None:
        self.inner.close_sender()

    def close_receiver(self) -> None:
        self.inner.close_receiver()

    def close(self) -> None:
        self.inner.close()
