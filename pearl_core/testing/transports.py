"""The conformance suite for a backend's LAQ/LDQ transport (:meth:`pearl_core.backend.Backend.make_transport`).

Usage, in a plugin's test module::

    from pearl_core.testing import TransportConformance

    class TestMyTransport(TransportConformance):
        def make_queue(self, maxsize, ctx):
            return MyBackend().make_transport("laq", maxsize, ctx)

The suite holds a queue to :class:`~pearl_core.runtime.queues.PipeQueue`'s
surface and guarantees (the runtime relies on both):

* in one process: order kept; bounded (``put_nowait`` raises ``queue.Full`` once
  ``maxsize`` messages are unread, ``put(timeout=...)`` too, and a refused put
  delivers nothing); ``get_nowait`` / ``get(timeout=...)`` raise ``queue.Empty``
  when nothing is waiting; ``poll``; ``reader`` works with
  :func:`multiprocessing.connection.wait`; ``close`` is idempotent;
* across processes (started with :attr:`TransportConformance.start_method`,
  ``spawn`` by default, so the queue must pickle into the child): a child that
  sends :attr:`TransportConformance.messages` messages, small and large, delivers
  each exactly once and in order, and ``get`` then raises ``EOFError`` (sender
  gone, nothing left); a child receives everything the host sends in order and
  sees ``EOFError`` once the host closed its end; a child's ``put_nowait`` raises
  ``queue.Full`` after exactly ``maxsize`` unread messages.

Every wait has a timeout (:attr:`TransportConformance.timeout_s`), so a broken
transport fails the test instead of hanging it; no assertion is about time.

:class:`FaultyTransport` is a deliberately broken transport (it loses or repeats
one message) for testing what the runtime does with such a plugin: the core
stamps a sequence number on each message and counts them
(:class:`~pearl_core.runtime.queues.SequencedQueue`), so the run ends with a
:class:`~pearl_core.errors.TransportError` naming the transport, after a
checkpoint, instead of losing data silently or hanging.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
from multiprocessing.connection import wait
from typing import Any

import pytest

__all__ = ["FaultyTransport", "TransportConformance", "message"]


class FaultyTransport:
    """A transport that loses (``drop``) or delivers twice (``repeat``) the message put number ``n`` (0-based,
    counted in the sending process); otherwise a :class:`~pearl_core.runtime.queues.PipeQueue`.

    A test stands it in for a backend's ``make_transport`` to check that the runtime detects the fault.
    """

    def __init__(self, maxsize: int, ctx: Any = None, *, drop: int | None = None, repeat: int | None = None):
        from pearl_core.runtime.queues import PipeQueue

        self.inner = PipeQueue(maxsize, ctx)
        self.drop, self.repeat, self.puts = drop, repeat, 0

    @property
    def reader(self):
        return self.inner.reader

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        n = self.puts
        if n == self.drop:  # "sent", never delivered
            self.puts += 1
            return
        self.inner.put(item, block, timeout)
        self.puts += 1
        if n == self.repeat:
            self.inner.put(item, block, timeout)

    def put_nowait(self, item: Any) -> None:
        self.put(item, block=False)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        return self.inner.get(block, timeout)

    def get_nowait(self) -> Any:
        return self.inner.get_nowait()

    def poll(self, timeout: float = 0.0) -> bool:
        return self.inner.poll(timeout)

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


def message(i: int) -> tuple:
    """Message ``i`` of the cross-process tests: ``(i, payload)``, a few of them larger than a pipe's buffer."""
    if i % 250 == 3:
        return (i, bytes([i % 256]) * 200_000)
    return (i, ("x" * (i % 7), i * 0.5, None if i % 2 else [i]))


def _produce(q: Any, n: int, report: Any) -> None:
    """Child: send messages ``0..n-1`` through ``q``, then exit (its end of ``q`` closes)."""
    try:
        q.close_receiver()
        for i in range(n):
            q.put(message(i), timeout=60)
        report.send("ok")
    except BaseException as exc:  # noqa: BLE001 - reported to the test, which fails with it
        report.send(f"the producer failed at a put: {type(exc).__name__}: {exc}")


def _consume(q: Any, n: int, timeout_s: float, report: Any) -> None:
    """Child: receive ``n`` messages, check them, then expect ``EOFError`` once the host closed its end."""
    try:
        q.close_sender()
        for i in range(n):
            got = q.get(timeout=timeout_s)
            if got != message(i):
                report.send(f"message {i}: received {_short(got)}, expected {_short(message(i))} "
                            "(lost, duplicated or reordered)")
                return
        try:
            extra = q.get(timeout=timeout_s)
        except EOFError:
            report.send("ok")
            return
        report.send(f"after the {n} messages sent, get() returned {_short(extra)} instead of raising EOFError")
    except BaseException as exc:  # noqa: BLE001 - reported to the test, which fails with it
        report.send(f"the consumer failed: {type(exc).__name__}: {exc}")


def _fill(q: Any, limit: int, report: Any) -> None:
    """Child: ``put_nowait`` until ``queue.Full`` (at most ``limit`` tries); report how many went in."""
    try:
        q.close_receiver()
        for i in range(limit):
            try:
                q.put_nowait(("fill", i))
            except queue.Full:
                report.send(i)
                return
        report.send(limit)
    except BaseException as exc:  # noqa: BLE001 - any failure of the child is reported to the parent
        report.send(f"the child failed: {type(exc).__name__}: {exc}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 80 else text[:77] + "..."


class TransportConformance:
    """Subclass and implement :meth:`make_queue` to run the whole suite on a transport.

    Attributes:
        maxsize: capacity of the queues the tests make (small, so that bounds are reached).
        messages: messages sent in each cross-process test.
        start_method: how the child processes start (``"spawn"``: the queue must pickle).
        timeout_s: the longest any single wait may take before the test fails.
    """

    maxsize: int = 4
    messages: int = 1000
    start_method: str = "spawn"
    timeout_s: float = 30.0

    def make_queue(self, maxsize: int, ctx: Any) -> Any:
        """A new, empty queue of the transport under test, bounded by ``maxsize``."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement make_queue(self, maxsize, ctx). Fix: return your "
            "transport, e.g. MyBackend().make_transport('laq', maxsize, ctx).")

    # -- helpers ------------------------------------------------------------------
    def _ctx(self):
        return mp.get_context(self.start_method)

    def _queue(self, maxsize: int | None = None) -> Any:
        q = self.make_queue(self.maxsize if maxsize is None else maxsize, self._ctx())
        assert q is not None, f"{type(self).__name__}.make_queue returned None; expected a queue."
        return q

    def _child(self, target, *args):
        """Start ``target(*args, report)`` in a child; returns ``(process, receiving end of the report pipe)``."""
        ctx = self._ctx()
        rx, tx = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=target, args=(*args, tx), daemon=True, name="pearl-transport-conformance")
        proc.start()
        tx.close()
        return proc, rx

    def _report(self, proc, rx) -> Any:
        if not rx.poll(self.timeout_s):
            return f"no report from the child within {self.timeout_s} s (exit code {proc.exitcode})"
        try:
            return rx.recv()
        except EOFError:
            proc.join(self.timeout_s)
            return f"the child died without a report (exit code {proc.exitcode})"

    def _join(self, proc) -> None:
        """Wait for a child that reported success to exit."""
        proc.join(self.timeout_s)

    @staticmethod
    def _end(proc) -> None:
        """After the test, pass or fail: a child still running (e.g. blocked on a broken queue) is killed."""
        if proc.is_alive():
            proc.kill()
        proc.join(30)

    # -- one process ----------------------------------------------------------------
    def test_keeps_order(self):
        q = self._queue()
        try:
            sent, got = [], []
            for i in range(5 * self.maxsize):
                q.put(("m", i), timeout=self.timeout_s)
                sent.append(("m", i))
                if i % 3 == 2:  # read in bursts: the queue is never asked for more than maxsize
                    got += [q.get(timeout=self.timeout_s) for _ in range(3)]
            got += [q.get(timeout=self.timeout_s) for _ in range(len(sent) - len(got))]
            assert got == sent, f"messages came back as {got}; expected the order they were put in, {sent}"
        finally:
            q.close()

    def test_put_raises_full_at_maxsize(self):
        q = self._queue()
        try:
            for i in range(self.maxsize):
                q.put_nowait(i)
            with pytest.raises(queue.Full):
                q.put_nowait("one too many")
            with pytest.raises(queue.Full):
                q.put("one too many", timeout=0.05)
            with pytest.raises(queue.Full):
                q.put("one too many", block=False)
            assert q.get(timeout=self.timeout_s) == 0
            q.put_nowait(self.maxsize)  # room for exactly one again
            with pytest.raises(queue.Full):
                q.put_nowait("one too many")
            got = [q.get(timeout=self.timeout_s) for _ in range(self.maxsize)]
            assert got == list(range(1, self.maxsize + 1)), (
                f"after refused puts the queue held {got}; expected {list(range(1, self.maxsize + 1))} "
                "(a refused put must deliver nothing)")
            assert not q.poll(0.05), "a refused put delivered its message"
        finally:
            q.close()

    def test_get_raises_empty_when_nothing_is_waiting(self):
        q = self._queue()
        try:
            with pytest.raises(queue.Empty):
                q.get_nowait()
            with pytest.raises(queue.Empty):
                q.get(timeout=0.05)
            with pytest.raises(queue.Empty):
                q.get(block=False)
            q.put("a")
            assert q.get(timeout=self.timeout_s) == "a"
            with pytest.raises(queue.Empty):
                q.get_nowait()
        finally:
            q.close()

    def test_poll_reports_waiting_messages(self):
        q = self._queue()
        try:
            assert not q.poll(0), "poll(0) on an empty queue must be false"
            assert not q.poll(0.05), "poll(timeout) on an empty queue must be false"
            q.put("a")
            assert q.poll(self.timeout_s), "poll(timeout) must be true once a message is waiting"
            assert q.get_nowait() == "a"
            assert not q.poll(0), "poll(0) must be false once the only message was taken"
        finally:
            q.close()

    def test_reader_works_with_connection_wait(self):
        q = self._queue()
        try:
            assert wait([q.reader], timeout=0) == [], "wait([q.reader]) returned the reader of an empty queue"
            q.put("a")
            ready = wait([q.reader], timeout=self.timeout_s)
            assert q.reader in ready, f"wait([q.reader]) returned {ready} with a message waiting; expected the reader"
            assert q.get_nowait() == "a"
        finally:
            q.close()

    def test_close_is_idempotent(self):
        q, q2 = self._queue(), self._queue()
        q.put("a")
        steps = [("close()", q.close), ("close() again", q.close), ("close_sender()", q2.close_sender),
                 ("close_receiver()", q2.close_receiver), ("close() after both", q2.close), ("close() again", q2.close)]
        for what, call in steps:
            try:
                call()
            except Exception as exc:  # noqa: BLE001 - any exception is the failure reported
                pytest.fail(f"{what} raised {type(exc).__name__}: {exc}; closing must be idempotent")

    # -- across processes ---------------------------------------------------------------
    def test_spawned_producer_delivers_every_message_once_then_eof(self):
        q = self._queue()
        proc, rx = self._child(_produce, q, self.messages)
        try:
            q.close_sender()  # the host only receives: once the child is gone, get() must raise EOFError
            got = []
            for i in range(self.messages):
                try:
                    got.append(q.get(timeout=self.timeout_s))
                except (queue.Empty, EOFError) as exc:
                    pytest.fail(f"received {i} of {self.messages} messages, then get() raised "
                                f"{type(exc).__name__} (messages lost); child: {self._report(proc, rx)}")
                if got[-1] != message(i):
                    pytest.fail(f"message {i}: received {_short(got[-1])}, expected {_short(message(i))} "
                                "(lost, duplicated or reordered)")
            report = self._report(proc, rx)
            assert report == "ok", report
            self._join(proc)
            try:
                extra = q.get(timeout=self.timeout_s)
            except EOFError:
                pass  # the sender is gone and nothing is left
            except queue.Empty:
                pytest.fail("with the sender gone and every message read, get() raised queue.Empty; "
                            "expected EOFError")
            else:
                pytest.fail(f"after all {self.messages} messages get() returned {_short(extra)} (a duplicate?); "
                            "expected EOFError: the sender is gone and nothing is left")
        finally:
            q.close()
            self._end(proc)

    def test_spawned_consumer_receives_every_message_in_order(self):
        q = self._queue()
        proc, rx = self._child(_consume, q, self.messages, self.timeout_s)
        try:
            q.close_receiver()  # the host only sends
            for i in range(self.messages):
                try:
                    q.put(message(i), timeout=self.timeout_s)
                except (queue.Full, OSError) as exc:
                    pytest.fail(f"put of message {i} raised {type(exc).__name__}: the child stopped taking "
                                f"messages; child: {self._report(proc, rx)}")
            q.close_sender()  # the child must now see EOFError once it has read everything
            report = self._report(proc, rx)
            assert report == "ok", f"in the child: {report}"
            self._join(proc)
        finally:
            q.close()
            self._end(proc)

    def test_bounded_across_processes(self):
        q = self._queue()
        proc, rx = self._child(_fill, q, self.maxsize + 10)
        try:
            report = self._report(proc, rx)
            assert report == self.maxsize, (
                f"a child's put_nowait took {report!r} messages before raising queue.Full; expected "
                f"maxsize = {self.maxsize}")
            self._join(proc)
            got = [q.get(timeout=self.timeout_s) for _ in range(self.maxsize)]
            want = [("fill", i) for i in range(self.maxsize)]
            assert got == want, f"the child's messages arrived as {[_short(m) for m in got]}; expected {want}"
        finally:
            q.close()
            self._end(proc)
