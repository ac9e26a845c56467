"""Bounded message queues between the processes of a parallel run.

* :class:`MessageQueue` — what the runtime needs of a queue (the stdlib names).
* :class:`PipeQueue` — a bounded single-producer/single-consumer queue over a
  pipe with the :class:`queue.Queue` method names; ``put`` blocks (or raises
  :class:`queue.Full`) once ``maxsize`` messages are unread.
* :func:`put_while` — a put that gives up when its receiver stopped listening.

Messages are the small typed values of :mod:`pearl_core.runtime.messages`;
bulk data stays in shared memory.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import select
import threading
from typing import Any, Protocol

from pearl_core.errors import InvalidValueError

__all__ = ["MessageQueue", "PipeQueue", "put_while"]


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
        self._poller = None  # select.poll on the reader, made at the first poll(0) (see poll)

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
        """
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
        """Unread messages (approximate while the other side is active; Linux)."""
        return self.maxsize - self._free.get_value()

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
        """Close both ends in this process (idempotent)."""
        self._reader.close()
        self._writer.close()
