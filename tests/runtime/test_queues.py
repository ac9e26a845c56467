"""Sequence numbers and counts on the LAQ/LDQ transports (pearl_core.runtime.queues.SequencedQueue).

A backend's transport that loses, repeats or reorders a message is a TransportError naming it (at once when a
later message reveals the gap, within the grace period when the lost message was the last one), never a silent
loss or a receiver that waits forever. The runs end-to-end are in tests/runtime/test_queues_transport_faults.py.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
import time

import pytest

from pearl_core.errors import TransportError
from pearl_core.runtime.queues import PipeQueue, SequencedQueue
from pearl_core.runtime.shm import ShmArena
from pearl_core.testing.transports import FaultyTransport

CTX = mp.get_context("spawn")


@pytest.fixture
def arena():
    with ShmArena("test") as a:
        yield a


def _seq(arena, inner, grace_s=0.2) -> SequencedQueue:
    return SequencedQueue(inner, "LAQ", "FaultyTransport (backend 'acme')", arena, grace_s=grace_s)


def test_an_intact_transport_passes_every_message_in_order(arena):
    q = _seq(arena, PipeQueue(8, CTX))
    try:
        for i in range(20):
            q.put(("m", i))
            assert q.poll(1.0)
            assert q.get(timeout=1.0) == ("m", i)
        assert q.sent == q.received == 20
        assert not q.poll(0) and not q.poll(0.3)  # nothing missing: waiting is not an error
    finally:
        q.close()


def test_a_lost_message_followed_by_another_is_an_error_at_once_naming_the_transport(arena):
    q = _seq(arena, FaultyTransport(8, CTX, drop=2))
    try:
        for i in range(5):
            q.put(i)
        assert [q.get(timeout=1.0) for _ in range(2)] == [0, 1]
        with pytest.raises(TransportError, match=r"the LAQ transport FaultyTransport \(backend 'acme'\) message 2 "
                                                 r"was lost") as err:
            q.get(timeout=1.0)
        assert err.value.expected == 2 and err.value.found == 3 and err.value.queue == "LAQ"
        assert "acme" in err.value.transport
        assert q.get(timeout=1.0) == 4  # resynchronised: the fault is reported once
    finally:
        q.close()


def test_a_repeated_message_is_an_error(arena):
    q = _seq(arena, FaultyTransport(8, CTX, repeat=1))
    try:
        for i in range(3):
            q.put(i)
        assert [q.get(timeout=1.0) for _ in range(2)] == [0, 1]
        with pytest.raises(TransportError, match="message 1 arrived again or out of order"):
            q.get(timeout=1.0)
    finally:
        q.close()


@pytest.mark.parametrize("wait", ["get", "poll", "check"])
def test_a_lost_last_message_is_an_error_within_the_grace_period(arena, wait):
    q = _seq(arena, FaultyTransport(8, CTX, drop=1))
    try:
        q.put("a")
        q.put("b")  # lost, and nothing follows it: only the count can tell
        assert q.get(timeout=1.0) == "a"
        t = time.monotonic()
        with pytest.raises(TransportError, match=r"1 message\(s\) sent \(from message 1 on\) never arrived"):
            while time.monotonic() - t < 5.0:
                if wait == "get":
                    with pytest.raises(queue.Empty):
                        q.get(timeout=0.05)
                elif wait == "poll":
                    assert not q.poll(0.05)
                else:
                    q.check()
                    time.sleep(0.05)
        assert time.monotonic() - t < 2.0
        q.put("c")
        assert q.get(timeout=1.0) == "c"  # resynchronised
    finally:
        q.close()


def test_a_foreign_object_on_the_transport_is_an_error(arena):
    inner = PipeQueue(4, CTX)
    q = _seq(arena, inner)
    try:
        inner.put("not stamped")
        with pytest.raises(TransportError, match="not a message the core sent"):
            q.get(timeout=1.0)
    finally:
        q.close()


def _child_sends(q, n):
    q.close_receiver()
    for i in range(n):
        q.put(i, timeout=10)


def test_the_count_crosses_processes(arena):
    q = _seq(arena, FaultyTransport(8, CTX, drop=3))
    p = CTX.Process(target=_child_sends, args=(q, 4), daemon=True)
    p.start()
    try:
        got = [q.get(timeout=30) for _ in range(3)]
        assert got == [0, 1, 2]
        p.join(30)
        assert q.sent == 4  # the child's count, read here
        with pytest.raises(TransportError, match="never arrived"):
            for _ in range(100):
                q.check()
                time.sleep(0.02)
    finally:
        if p.is_alive():
            p.kill()
        q.close()


# -- the end-of-run check (settle / final_check): a loss in a run's last seconds is an error too -------------


def test_settle_with_nothing_lost_returns_the_leftovers_in_order(arena):
    q = _seq(arena, PipeQueue(8, CTX))
    try:
        for i in range(5):
            q.put(("m", i))
        assert q.get(timeout=1.0) == ("m", 0)
        items, error = q.settle()
        assert items == [("m", i) for i in range(1, 5)] and error is None
        assert q.sent == q.received == 5
        assert q.final_check() == []  # nothing left, nothing missing
    finally:
        q.close()


def test_final_check_raises_for_a_lost_last_message_naming_the_transport(arena):
    q = _seq(arena, FaultyTransport(8, CTX, drop=2))
    try:
        for i in range(3):
            q.put(i)  # the last one is lost: no later message reveals it, and nobody waits for it
        assert q.get(timeout=1.0) == 0
        with pytest.raises(TransportError, match=r"the LAQ transport FaultyTransport \(backend 'acme'\) 1 "
                                                 r"message\(s\) sent \(from message 2 on\) never arrived") as err:
            q.final_check()
        assert err.value.queue == "LAQ" and "acme" in err.value.transport
        assert err.value.expected == 2 and err.value.found is None
        assert q.received == 3  # reported once: a second check passes
        assert q.final_check(timeout_s=0.0) == []
    finally:
        q.close()


def test_settle_returns_what_it_drained_with_the_error(arena):
    q = _seq(arena, FaultyTransport(8, CTX, drop=1))
    try:
        for i in range(4):
            q.put(i)
        items, error = q.settle()  # message 1 lost between two readable ones: the drain goes on past the gap
        assert items == [0, 2, 3]
        assert isinstance(error, TransportError) and "message 1 was lost" in str(error) and error.expected == 1
    finally:
        q.close()


class _LateTransport(FaultyTransport):
    """Takes a message at ``put`` (so it is counted as sent) and delivers it ``delay_s`` later, as a slow
    transport may."""

    delay_s = 0.3

    def put(self, item, block=True, timeout=None):
        threading.Timer(self.delay_s, self.inner.put, args=(item,)).start()


def test_settle_waits_for_a_message_counted_sent_that_is_still_on_its_way(arena):
    q = _seq(arena, _LateTransport(8, CTX))
    try:
        q.put("late")
        assert not q.poll(0)  # counted as sent, not readable yet
        assert q.final_check(timeout_s=30.0) == ["late"]
    finally:
        q.close()


@pytest.mark.parametrize("drop", [None, 3])
def test_settle_after_the_sender_process_exited(arena, drop):
    q = _seq(arena, FaultyTransport(8, CTX, drop=drop))
    p = CTX.Process(target=_child_sends, args=(q, 4), daemon=True)
    p.start()
    try:
        q.close_sender()  # the sender's exit closes the stream: the drain ends at its end, without waiting
        p.join(30)
        assert p.exitcode == 0
        items, error = q.settle(timeout_s=30.0)
        if drop is None:
            assert items == [0, 1, 2, 3] and error is None
        else:
            assert items == [0, 1, 2]
            assert isinstance(error, TransportError) and "(from message 3 on) never arrived" in str(error)
    finally:
        if p.is_alive():
            p.kill()
        q.close()
