"""Shared-memory transport: round trips, torn-read protection, backpressure, cleanup."""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import queue
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pearl_core.errors import InvalidValueError, PearlError
from pearl_core.runtime.queues import PipeQueue
from pearl_core.runtime.shared import Control, WeightBuffer
from pearl_core.runtime.shm import Layout, ShmArena, ShmBlock, SlotRing, list_segments

pytestmark = pytest.mark.usefixtures("no_leaks")

CTX = mp.get_context("spawn")
FIELDS = {"obs": ((3,), np.float32), "action": ((), np.int64), "done": ((), np.bool_)}


# --------------------------------------------------------------------------- child bodies


def _ring_producer(handle, q, n_items):
    ring = SlotRing.attach(handle)
    for i in range(n_items):
        if not ring.wait_writable(timeout=30):
            q.put(("timeout", i))
            return
        s = ring.slot(ring.head)
        s["obs"][:] = i
        s["action"][:] = i * 10
        s["done"][:] = i % 2 == 1
        seq = ring.commit()
        q.put(("slot", seq))
    q.put(("end", n_items))


def _weight_writer(handle, versions, q):
    buf = WeightBuffer.attach(handle)
    template = buf.empty_like()
    for v in range(1, versions + 1):
        for arr in template.values():
            arr.fill(v)  # every element of every array equals the version it belongs to
        buf.publish(template)
    q.put(("done", buf.version))


def _queue_producer(q, n):
    for i in range(n):
        q.put(i)


# --------------------------------------------------------------------------- layout and blocks


def test_layout_aligns_every_array_to_a_cache_line():
    lay = Layout.of({"a": ((3,), np.int8), "b": ((2, 5), np.float64), "c": ((), np.bool_)})
    offsets = [off for *_, off in lay.fields]
    assert offsets == [0, 64, 192]
    assert all(off % 64 == 0 for off in offsets)
    assert lay.nbytes == 256


def test_layout_rejects_empty_and_negative():
    with pytest.raises(InvalidValueError):
        Layout.of({})
    with pytest.raises(InvalidValueError):
        Layout.of({"x": ((-1,), np.float32)})


def test_block_attach_sees_owner_writes_and_close_unlinks():
    with ShmArena("t") as arena:
        block = arena.block(Layout.of(FIELDS), "blk")
        block.arrays["obs"][:] = [1, 2, 3]
        other = ShmBlock.attach(block.handle)
        np.testing.assert_array_equal(other.arrays["obs"], [1, 2, 3])
        other.arrays["action"][...] = 7
        assert int(block.arrays["action"]) == 7
        other.close()
        name = block.name
        assert name in list_segments(os.getpid())
    assert name not in list_segments(os.getpid())
    with pytest.raises(PearlError, match="does not exist"):
        ShmBlock.attach(block.handle)


def test_arena_unlinks_on_error_and_on_garbage_collection():
    with pytest.raises(RuntimeError):
        with ShmArena("err") as arena:
            arena.block(Layout.of(FIELDS), "x")
            assert list_segments(os.getpid())
            raise RuntimeError("boom")
    assert not list_segments(os.getpid())

    arena = ShmArena("gc")
    arena.block(Layout.of(FIELDS), "y")
    assert list_segments(os.getpid())
    del arena
    gc.collect()
    assert not list_segments(os.getpid())


def test_arena_unlinks_at_interpreter_exit_without_close():
    code = textwrap.dedent(
        """
        import os, sys, numpy as np
        from pearl_core.runtime.shm import ShmArena, Layout
        arena = ShmArena("exit")
        arena.block(Layout.of({"x": ((4,), np.float32)}), "z")
        print(os.getpid(), flush=True)
        sys.exit(0)  # no close(): the finalizer must unlink
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.strip())
    assert list_segments(pid) == []
    assert "leaked" not in out.stderr


def test_killed_owner_segments_are_reclaimed_by_the_resource_tracker():
    code = textwrap.dedent(
        """
        import os, signal, numpy as np
        from pearl_core.runtime.shm import ShmArena, Layout
        arena = ShmArena("kill")
        arena.block(Layout.of({"x": ((4,), np.float32)}), "z")
        print(os.getpid(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == -signal.SIGKILL
    pid = int(out.stdout.strip())
    assert list_segments(pid) == []


# --------------------------------------------------------------------------- slot rings


def test_ring_round_trip_across_processes():
    with ShmArena("ring") as arena:
        ring = SlotRing.create(arena, FIELDS, n_slots=3, rows=4, tag="exp")
        q = PipeQueue(8)
        n = 10
        p = CTX.Process(target=_ring_producer, args=(ring.handle, q, n))
        p.start()
        try:
            seen = []
            while True:
                kind, val = q.get(timeout=60)
                if kind == "end":
                    break
                assert kind == "slot"
                s = ring.slot(val)
                np.testing.assert_array_equal(s["obs"], np.full((4, 3), val, np.float32))
                np.testing.assert_array_equal(s["action"], np.full(4, val * 10))
                assert s["done"].all() == (val % 2 == 1)
                seen.append(val)
                ring.release(val)
            assert seen == list(range(n))
            assert ring.head == n and ring.tail == n
        finally:
            p.join(30)
            q.close()
        ring.close()


def test_ring_full_applies_backpressure_to_the_producer():
    with ShmArena("bp") as arena:
        ring = SlotRing.create(arena, FIELDS, n_slots=2, rows=1, tag="bp")
        q = PipeQueue(8)
        p = CTX.Process(target=_ring_producer, args=(ring.handle, q, 5))
        p.start()
        try:
            # The producer can fill two slots and must then wait for us.
            assert q.get(timeout=60) == ("slot", 0)
            assert q.get(timeout=60) == ("slot", 1)
            with pytest.raises(queue.Empty):
                q.get(timeout=0.3)
            assert ring.head == 2  # never beyond n_slots unreleased
            for expected in range(2, 5):
                ring.release(expected - 2)
                assert q.get(timeout=60) == ("slot", expected)
                assert ring.in_use() <= 2
            ring.release(4)
            assert q.get(timeout=60) == ("end", 5)
        finally:
            p.join(30)
            q.close()
        ring.close()


def test_ring_commit_without_space_raises_and_changes_nothing():
    with ShmArena("full") as arena:
        ring = SlotRing.create(arena, FIELDS, n_slots=2, rows=1, tag="f")
        assert ring.commit() == 0 and ring.commit() == 1
        assert not ring.writable()
        with pytest.raises(PearlError, match="all 2 slots are in use"):
            ring.commit()
        assert ring.head == 2
        assert not ring.wait_writable(timeout=0.01)
        ring.release(0)
        assert ring.writable() and ring.wait_writable(timeout=0)
        assert ring.commit() == 2
        assert ring.slot(2)["obs"] is ring.slot(0)["obs"]
        ring.close()


def test_ring_rejects_empty_shapes():
    with ShmArena("bad") as arena:
        with pytest.raises(InvalidValueError, match="n_slots"):
            SlotRing.create(arena, FIELDS, n_slots=0, rows=1, tag="x")


# --------------------------------------------------------------------------- weight buffer


def _template():
    return {"w": np.zeros((64, 256), np.float32), "b": np.zeros(256, np.float32), "n": np.zeros((), np.int64)}


def test_weight_buffer_round_trip_and_versions():
    with ShmArena("w") as arena:
        buf = WeightBuffer.create(arena, _template())
        assert buf.version == 0
        assert buf.read() is None  # nothing published yet
        w = {k: np.full_like(v, 3) for k, v in _template().items()}
        assert buf.publish(w) == 1
        other = WeightBuffer.attach(buf.handle)
        version, got = other.read()
        assert version == 1
        for k in w:
            np.testing.assert_array_equal(got[k], w[k])
        assert other.read(newer_than=1) is None  # nothing newer
        assert buf.publish(w) == 2 and other.version == 2
        other.close()
        buf.close()


def test_weight_buffer_rejects_bad_weights_without_publishing():
    with ShmArena("wbad") as arena:
        buf = WeightBuffer.create(arena, _template())
        with pytest.raises(InvalidValueError, match="missing"):
            buf.publish({"w": np.zeros((64, 256))})
        bad = _template()
        bad["b"] = np.zeros(3, np.float32)
        with pytest.raises(InvalidValueError, match="shape"):
            buf.publish(bad)
        assert buf.version == 0
        with pytest.raises(InvalidValueError, match="empty"):
            WeightBuffer.create(arena, {})
        buf.close()


def test_weight_buffer_never_returns_a_write_in_progress():
    with ShmArena("wip") as arena:
        buf = WeightBuffer.create(arena, _template())
        buf.publish({k: np.ones_like(v) for k, v in _template().items()})
        seq = buf.block.arrays["_seq"]
        seq[0] += 1  # a writer is in the middle of a copy
        assert buf.read(timeout=0.05) is None
        seq[0] += 1  # ... and finished
        version, got = buf.read()
        assert version == 2


def test_weight_buffer_reads_are_never_torn_under_a_concurrent_writer():
    big = {"a": np.zeros(400_000, np.float32), "b": np.zeros(300_000, np.float64), "c": np.zeros(7, np.int64)}
    with ShmArena("torn") as arena:
        buf = WeightBuffer.create(arena, big)
        q = PipeQueue(2)
        p = CTX.Process(target=_weight_writer, args=(buf.handle, 400, q))
        p.start()
        try:
            reader = WeightBuffer.attach(buf.handle)
            out = reader.empty_like()
            last = 0
            checked = 0
            while True:
                v = reader.read_into(out, newer_than=last)
                if v is not None:
                    # every element of every array carries the same version: no mix of two writes
                    for arr in out.values():
                        assert arr.min() == arr.max() == v
                    assert v > last
                    last = v
                    checked += 1
                if not p.is_alive() and reader.version == last:
                    break
            assert q.get(timeout=60) == ("done", 400)
            assert last == 400 and checked >= 1
            reader.close()
        finally:
            p.join(30)
            q.close()
        buf.close()


# --------------------------------------------------------------------------- bounded queue


def test_pipe_queue_is_bounded():
    q = PipeQueue(2)
    q.put(1)
    q.put_nowait(2)
    assert q.full() and q.qsize() == 2
    with pytest.raises(queue.Full):
        q.put_nowait(3)
    with pytest.raises(queue.Full):
        q.put(3, timeout=0.05)
    assert q.get() == 1
    q.put(3)
    assert [q.get(), q.get()] == [2, 3]
    assert q.empty()
    with pytest.raises(queue.Empty):
        q.get_nowait()
    with pytest.raises(queue.Empty):
        q.get(timeout=0.01)
    with pytest.raises(InvalidValueError):
        PipeQueue(0)
    q.close()


def test_pipe_queue_poll_sees_messages_and_the_end_of_the_stream():
    q = PipeQueue(2)
    assert not q.poll(0) and not q.poll(0.01)  # the cached poller and the waiting path agree
    q.put("x")
    assert q.poll(0) and q.poll(0.01)
    assert q.get() == "x" and not q.poll(0)
    q.close_sender()  # the only sender is gone: poll reports the end, get raises EOFError
    assert q.poll(0)
    with pytest.raises(EOFError):
        q.get()
    q.close()


def test_pipe_queue_blocks_a_producer_process_until_consumed():
    q = PipeQueue(3)
    p = CTX.Process(target=_queue_producer, args=(q, 20))
    p.start()
    try:
        got = [q.get(timeout=60)]
        with pytest.raises(queue.Empty):
            # drain what is there; at most maxsize messages can ever be unread
            while True:
                got.append(q.get(timeout=0.3))
                assert q.qsize() <= 3
                if len(got) == 20:
                    raise queue.Empty
        assert got == list(range(len(got)))
        while len(got) < 20:
            got.append(q.get(timeout=60))
        assert got == list(range(20))
    finally:
        p.join(30)
        q.close()


# --------------------------------------------------------------------------- control words


def test_control_words_are_shared():
    with ShmArena("ctl") as arena:
        ctl = Control.create(arena, n_actors=3)
        other = Control.attach(ctl.handle)
        assert not other.stop and other.total_steps() == 0
        ctl.actor_steps[1] += 5
        ctl.actor_steps[2] += 2
        ctl.env_budget = 100
        ctl.update_budget = 9
        other.updates = 4
        assert other.total_steps() == 7 and other.env_budget == 100 and other.update_budget == 9
        assert ctl.updates == 4
        ctl.request_stop()
        assert other.stop
        other.close()
        ctl.close()
