"""Shared-memory transport for the parallel runtime: named array blocks, slot rings,
a versioned weight buffer and bounded pipe queues.

Bulk data never goes through a queue. Producers write numpy arrays into
preallocated ``multiprocessing.shared_memory`` segments; queues carry only small
messages (a slot number, a row count). Every piece is bounded:

* :class:`ShmBlock` — one segment holding named arrays, each 64-byte aligned.
  The creating process owns it and unlinks it; children attach by handle.
* :class:`SlotRing` — ``n_slots`` slots of ``rows`` records each, plus two
  cursors in shared memory: ``head`` (slots committed by the producer) and
  ``tail`` (slots released by the consumer). A producer may fill slot
  ``head % n_slots`` only while ``head - tail < n_slots``: a slow consumer
  stops the producer (backpressure), and nothing grows.
* :class:`WeightBuffer` — one copy of a trainer's weights guarded by a
  sequence lock: the writer makes the counter odd, copies, makes it even; a
  reader retries until it saw the same even counter before and after its copy,
  so it never returns a torn mix of two versions.
* :class:`PipeQueue` — a bounded single-producer/single-consumer queue over a
  pipe with the :class:`queue.Queue` method names; ``put`` blocks (or raises
  :class:`queue.Full`) once ``maxsize`` messages are unread.
* :class:`ShmArena` — creates blocks and unlinks every one of them on
  :meth:`~ShmArena.close`, at garbage collection or at interpreter exit,
  whichever comes first, so no ``/dev/shm`` segment outlives the run.

Segment names start with :data:`SHM_PREFIX` followed by the creating process id,
so leaks are easy to find (``ls /dev/shm/pearl_*``).

Memory ordering: the cursors and the sequence counter are aligned ``int64``
words written with single stores. On x86-64 (total store order) a reader that
sees a counter also sees the data written before it. On weakly ordered CPUs
(ARM) that guarantee needs fences Python cannot issue; there
:data:`STRONG_ORDERING` is ``False`` and :class:`WeightBuffer` falls back to a
process-shared lock.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import platform
import queue
import secrets
import select
import threading
import time
import weakref
from multiprocessing import shared_memory
from typing import Any, Iterable, Mapping, Protocol

import numpy as np

from pearl_core.errors import InvalidValueError, PearlError

__all__ = [
    "SHM_PREFIX",
    "STRONG_ORDERING",
    "BlockHandle",
    "Control",
    "Layout",
    "MessageQueue",
    "PipeQueue",
    "ShmArena",
    "ShmBlock",
    "SlotRing",
    "WeightBuffer",
    "list_segments",
    "put_while",
]

#: Every segment PEARL creates is named ``pearl_<pid>_<random>_<tag>``.
SHM_PREFIX = "pearl_"

#: Whether plain aligned stores are seen in program order by other cores.
STRONG_ORDERING = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")

_ALIGN = 64


def list_segments(pid: int | None = None) -> list[str]:
    """Names of PEARL segments present in ``/dev/shm`` (those made by ``pid`` if given).

    Linux only; returns ``[]`` where ``/dev/shm`` does not exist.
    """
    prefix = SHM_PREFIX if pid is None else f"{SHM_PREFIX}{pid}_"
    try:
        return sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix))
    except FileNotFoundError:
        return []


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


# --------------------------------------------------------------------------- layout and blocks


@dataclasses.dataclass(frozen=True)
class Layout:
    """Named arrays packed into one segment.

    Attributes:
        fields: ``(name, shape, dtype_str, offset)`` per array; offsets are
            multiples of 64 bytes (one cache line), so counters never share a
            line with data.
        nbytes: total segment size in bytes.
    """

    fields: tuple[tuple[str, tuple[int, ...], str, int], ...]
    nbytes: int

    @classmethod
    def of(cls, arrays: Mapping[str, tuple[Iterable[int], Any]]) -> Layout:
        """Pack ``{name: (shape, dtype)}`` in the given order.

        Raises:
            InvalidValueError: a negative dimension, or no arrays at all.
        """
        if not arrays:
            raise InvalidValueError("Layout.of: expected at least one array; found none.")
        out = []
        offset = 0
        for name, (shape, dtype) in arrays.items():
            shape = tuple(int(d) for d in shape)
            if any(d < 0 for d in shape):
                raise InvalidValueError(f"Layout.of: array {name!r} has a negative dimension {shape}.")
            dt = np.dtype(dtype)
            out.append((name, shape, dt.str, offset))
            size = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
            offset += -(-max(size, 1) // _ALIGN) * _ALIGN
        return cls(tuple(out), max(offset, _ALIGN))


@dataclasses.dataclass(frozen=True)
class BlockHandle:
    """Picklable reference to a segment: pass it to a child, which attaches with it."""

    name: str
    layout: Layout


class ShmBlock:
    """One shared-memory segment viewed as named numpy arrays.

    Create through :meth:`ShmArena.block` (the owner unlinks it); attach in
    another process with :meth:`attach`. ``arrays[name]`` is a writable numpy
    view into the segment.
    """

    def __init__(self, shm: shared_memory.SharedMemory, layout: Layout, owner: bool):
        self._shm = shm
        self.layout = layout
        self.owner = owner
        self.arrays: dict[str, np.ndarray] = {
            name: np.ndarray(shape, dtype=np.dtype(dt), buffer=shm.buf, offset=off)
            for name, shape, dt, off in layout.fields
        }

    @property
    def name(self) -> str:
        """The segment name (without the leading ``/``)."""
        return self._shm.name

    @property
    def handle(self) -> BlockHandle:
        """What a child process needs to attach."""
        return BlockHandle(self._shm.name, self.layout)

    @classmethod
    def attach(cls, handle: BlockHandle) -> ShmBlock:
        """Map an existing segment by handle (in any process).

        Raises:
            PearlError: the segment no longer exists (its owner has exited).
        """
        try:
            shm = shared_memory.SharedMemory(name=handle.name, create=False)
        except FileNotFoundError as exc:
            raise PearlError(
                f"shared-memory segment {handle.name!r} does not exist; expected its owner (the host "
                "process) to be alive. Fix: start workers only from a running ParallelRuntime."
            ) from exc
        return cls(shm, handle.layout, owner=False)

    def close(self) -> None:
        """Unmap the segment in this process (the name stays until :meth:`unlink`).

        Views handed out earlier keep the mapping alive; then the unmap happens
        when the last of them is garbage collected.
        """
        self.arrays = {}
        try:
            self._shm.close()
        except BufferError:
            pass  # someone still holds a view; the mapping dies with it

    def unlink(self) -> None:
        """Remove the segment name from the system (owner only; idempotent)."""
        try:
            self._shm.unlink()
        except FileNotFoundError:
            pass


class ShmArena:
    """Creates segments and guarantees they are unlinked.

    Use as a context manager, or call :meth:`close`. A garbage-collected or
    never-closed arena unlinks its segments at interpreter exit
    (``weakref.finalize``); ``multiprocessing``'s resource tracker unlinks them
    if this process is killed outright.

    Args:
        tag: a short word put in every segment name (letters, digits, ``_``).
    """

    def __init__(self, tag: str = "run"):
        self._prefix = f"{SHM_PREFIX}{os.getpid()}_{secrets.token_hex(3)}_{tag}"
        self._names: list[str] = []
        self._blocks: list[ShmBlock] = []
        self._finalizer = weakref.finalize(self, _unlink_all, self._names, os.getpid())

    def block(self, layout: Layout, tag: str) -> ShmBlock:
        """Create (zero-filled) and register one segment."""
        name = f"{self._prefix}_{tag}_{len(self._names)}"
        shm = shared_memory.SharedMemory(name=name, create=True, size=layout.nbytes)
        self._names.append(shm.name)
        block = ShmBlock(shm, layout, owner=True)
        self._blocks.append(block)
        return block

    @property
    def names(self) -> list[str]:
        """Names of the segments still registered."""
        return list(self._names)

    def close(self) -> None:
        """Unmap and unlink every segment (idempotent)."""
        for block in self._blocks:
            block.close()
        self._blocks.clear()
        self._finalizer()

    def __enter__(self) -> ShmArena:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _unlink_all(names: list[str], owner_pid: int) -> None:
    if os.getpid() != owner_pid:  # a forked copy of the owner never unlinks the owner's segments
        return
    for name in names:
        try:
            seg = shared_memory.SharedMemory(name=name, create=False)
        except FileNotFoundError:
            continue
        try:
            seg.close()
        finally:
            seg.unlink()
    names.clear()


# --------------------------------------------------------------------------- slot rings


_CURSOR = "_cursor"  # int64[16]: [0] head, [8] tail (separate cache lines)


@dataclasses.dataclass(frozen=True)
class RingHandle:
    """Picklable reference to a :class:`SlotRing`."""

    block: BlockHandle
    n_slots: int
    rows: int


class SlotRing:
    """``n_slots`` slots of ``rows`` records each, with shared head/tail cursors.

    Layout of the segment: ``_cursor`` (two ``int64`` on separate cache lines),
    then one array per field of shape ``(n_slots, rows, *field_shape)``.

    Single-producer/single-consumer protocol::

        producer: wait until ring.writable(); views = ring.slot(ring.head)
                  fill views; seq = ring.commit(); send seq on a queue
        consumer: seq = queue.get(); views = ring.slot(seq); read views
                  ring.release(seq)            # the producer may reuse the slot

    Sequence numbers grow forever (slot = ``seq % n_slots``). The producer
    advances ``head`` *before* it announces a slot, so a producer that dies
    between the two only skips a sequence number; ``release`` sets ``tail`` to
    ``seq + 1``, so skipped numbers need no release.
    """

    def __init__(self, block: ShmBlock, n_slots: int, rows: int):
        self.block = block
        self.n_slots = n_slots
        self.rows = rows
        self._cursor = block.arrays[_CURSOR]
        names = [n for n, *_ in block.layout.fields if n != _CURSOR]
        self.fields = tuple(names)
        self._slots = [{n: block.arrays[n][i] for n in names} for i in range(n_slots)]

    @classmethod
    def create(
        cls, arena: ShmArena, fields: Mapping[str, tuple[Iterable[int], Any]], n_slots: int, rows: int, tag: str
    ) -> SlotRing:
        """Allocate a ring of ``n_slots`` x ``rows`` records of ``{name: (shape, dtype)}``.

        Raises:
            InvalidValueError: ``n_slots < 1`` or ``rows < 1``.
        """
        if n_slots < 1 or rows < 1:
            raise InvalidValueError(
                f"SlotRing {tag!r}: n_slots = {n_slots}, rows = {rows}; expected both >= 1. "
                "Fix: RuntimePlan.queue_size and batch sizes must be >= 1."
            )
        arrays: dict[str, tuple[tuple[int, ...], Any]] = {_CURSOR: ((16,), np.int64)}
        for name, (shape, dtype) in fields.items():
            arrays[name] = ((n_slots, rows, *tuple(shape)), dtype)
        return cls(arena.block(Layout.of(arrays), tag), n_slots, rows)

    @classmethod
    def attach(cls, handle: RingHandle) -> SlotRing:
        """Attach to a ring created in another process."""
        return cls(ShmBlock.attach(handle.block), handle.n_slots, handle.rows)

    @property
    def handle(self) -> RingHandle:
        return RingHandle(self.block.handle, self.n_slots, self.rows)

    def slot(self, seq: int) -> dict[str, np.ndarray]:
        """Writable views of slot ``seq % n_slots``: ``{field: (rows, *shape)}``."""
        return self._slots[seq % self.n_slots]

    @property
    def head(self) -> int:
        """Slots committed so far (the next sequence number to fill)."""
        return int(self._cursor[0])

    @property
    def tail(self) -> int:
        """One past the last released sequence number."""
        return int(self._cursor[8])

    def in_use(self) -> int:
        """Committed slots not yet released."""
        return int(self._cursor[0]) - int(self._cursor[8])

    def writable(self) -> bool:
        """Whether the producer may fill slot ``head`` now."""
        return int(self._cursor[0]) - int(self._cursor[8]) < self.n_slots

    def wait_writable(self, timeout: float | None = None, stop=None, poll_s: float = 0.0005) -> bool:
        """Block until :meth:`writable` (backpressure); ``False`` on timeout or when ``stop()`` is true."""
        if self.writable():
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.writable():
            if stop is not None and stop():
                return False
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)
        return True

    def commit(self) -> int:
        """Producer: publish slot ``head``; returns its sequence number.

        Raises:
            PearlError: the ring is full (call :meth:`wait_writable` first).
        """
        seq = int(self._cursor[0])
        if seq - int(self._cursor[8]) >= self.n_slots:
            raise PearlError(
                f"SlotRing.commit: all {self.n_slots} slots are in use (head {seq}, tail "
                f"{int(self._cursor[8])}); expected a free slot. Fix: wait_writable() before filling a slot."
            )
        self._cursor[0] = seq + 1
        return seq

    def release(self, seq: int) -> None:
        """Consumer: slot ``seq`` (and every earlier one) may be reused."""
        self._cursor[8] = seq + 1

    def reset(self) -> None:
        """Owner only, with no producer or consumer running: forget all slots."""
        self._cursor[:] = 0

    def close(self) -> None:
        self._slots = []
        self._cursor = None
        self.block.close()


# --------------------------------------------------------------------------- weight buffer


@dataclasses.dataclass(frozen=True)
class WeightHandle:
    """Picklable reference to a :class:`WeightBuffer`."""

    block: BlockHandle
    names: tuple[str, ...]
    lock: Any = None


class WeightBuffer:
    """One versioned copy of a trainer's weights, written by one process, read by many.

    Sequence lock: the counter is even when the copy is complete. The writer
    sets it odd, copies every array, sets it even again (``version = counter //
    2``). A reader copies into its own arrays and accepts the copy only if the
    counter was the same even value before and after; otherwise it retries.
    Readers never block the writer.

    Create with :meth:`create` from a template (``trainer.get_weights()``);
    attach in other processes with :meth:`attach`.
    """

    _SEQ = "_seq"

    def __init__(self, block: ShmBlock, names: tuple[str, ...], lock=None):
        self.block = block
        self.names = names
        self._lock = lock
        self._seq = block.arrays[self._SEQ]
        self._views = {n: block.arrays["w_" + n] for n in names}

    @classmethod
    def create(cls, arena: ShmArena, template: Mapping[str, np.ndarray], tag: str = "weights") -> WeightBuffer:
        """Allocate room for arrays shaped like ``template`` (version 0 = nothing published yet).

        Raises:
            InvalidValueError: ``template`` is empty.
        """
        if not template:
            raise InvalidValueError(
                "WeightBuffer.create: the weight template is empty; expected the dict of numpy arrays "
                "that trainer.get_weights() returns. Fix: return the acting policy's parameters."
            )
        arrays: dict[str, tuple[tuple[int, ...], Any]] = {cls._SEQ: ((8,), np.int64)}
        for name, arr in template.items():
            a = np.asarray(arr)
            arrays["w_" + name] = (a.shape, a.dtype)
        lock = None if STRONG_ORDERING else mp.get_context("spawn").Lock()
        return cls(arena.block(Layout.of(arrays), tag), tuple(template), lock)

    @classmethod
    def attach(cls, handle: WeightHandle) -> WeightBuffer:
        return cls(ShmBlock.attach(handle.block), handle.names, handle.lock)

    @property
    def handle(self) -> WeightHandle:
        return WeightHandle(self.block.handle, self.names, self._lock)

    @property
    def version(self) -> int:
        """Number of completed :meth:`publish` calls (a publish in progress is not counted)."""
        return int(self._seq[0]) // 2

    def publish(self, weights: Mapping[str, np.ndarray]) -> int:
        """Copy ``weights`` in; returns the new version.

        Raises:
            InvalidValueError: a name is missing or a shape differs from the template
                (checked before anything is written).
        """
        for n in self.names:
            if n not in weights:
                raise InvalidValueError(
                    f"WeightBuffer.publish: weight {n!r} is missing; expected the names {list(self.names)}."
                )
            shape = np.shape(weights[n])
            if shape != self._views[n].shape:
                raise InvalidValueError(
                    f"WeightBuffer.publish: weight {n!r} has shape {shape}; expected {self._views[n].shape} "
                    "(the template's). Fix: weights must keep their shapes during a run."
                )
        if self._lock is not None:
            with self._lock:
                return self._publish(weights)
        return self._publish(weights)

    def _publish(self, weights) -> int:
        seq = int(self._seq[0])
        self._seq[0] = seq + 1  # odd: a copy is in progress
        for n in self.names:
            np.copyto(self._views[n], weights[n], casting="same_kind")
        self._seq[0] = seq + 2
        return (seq + 2) // 2

    def empty_like(self) -> dict[str, np.ndarray]:
        """Private arrays to :meth:`read_into`."""
        return {n: np.empty_like(v) for n, v in self._views.items()}

    def read_into(self, out: Mapping[str, np.ndarray], newer_than: int = -1, timeout: float = 5.0) -> int | None:
        """Copy the latest complete version into ``out`` if it is newer than ``newer_than``.

        Returns:
            The version copied, or ``None`` when nothing newer was published
            (``out`` untouched) or no consistent copy could be made before
            ``timeout`` seconds (``out`` may then hold a torn copy; do not use it).
        """
        if self._lock is not None:
            with self._lock:
                v = int(self._seq[0]) // 2
                if v <= newer_than or v == 0:
                    return None
                for n in self.names:
                    np.copyto(out[n], self._views[n])
                return v
        deadline = None
        while True:
            s1 = int(self._seq[0])
            if not s1 & 1:
                v = s1 // 2
                if v <= newer_than or v == 0:
                    return None
                for n in self.names:
                    np.copyto(out[n], self._views[n])
                if int(self._seq[0]) == s1:
                    return v
            if deadline is None:
                deadline = time.monotonic() + timeout
            elif time.monotonic() > deadline:
                return None
            time.sleep(0)  # let the writer finish

    def read(self, newer_than: int = -1, timeout: float = 5.0) -> tuple[int, dict[str, np.ndarray]] | None:
        """Like :meth:`read_into` into fresh arrays; returns ``(version, weights)`` or ``None``."""
        out = self.empty_like()
        v = self.read_into(out, newer_than, timeout)
        return None if v is None else (v, out)

    def close(self) -> None:
        self._views = {}
        self._seq = None
        self.block.close()


# --------------------------------------------------------------------------- run control words


class Control:
    """Counters and flags every process of a parallel run shares (one segment).

    Each word has a single writer, so no lock is needed:

    ================  =========  ==================================================
    word              writer     meaning
    ================  =========  ==================================================
    ``stop``          host       non-zero: every worker finishes its step and exits
    ``actor_steps``   actor i    env steps actor slot ``i`` has taken (``[i]``)
    ``env_budget``    host       actors step only while ``sum(actor_steps) <`` it
    ``updates``       learner    learner updates completed
    ``update_budget`` host       setting 2: the worker trains while ``updates <`` it
    ================  =========  ==================================================
    """

    def __init__(self, block: ShmBlock):
        self.block = block
        a = block.arrays
        self._stop, self.actor_steps, self._env_budget = a["stop"], a["actor_steps"], a["env_budget"]
        self._updates, self._update_budget = a["updates"], a["update_budget"]

    @classmethod
    def create(cls, arena: ShmArena, n_actors: int) -> Control:
        words = ((8,), np.int64)
        layout = Layout.of({
            "stop": words, "actor_steps": ((n_actors,), np.int64), "env_budget": words,
            "updates": words, "update_budget": words,
        })
        return cls(arena.block(layout, "control"))

    @classmethod
    def attach(cls, handle: BlockHandle) -> Control:
        return cls(ShmBlock.attach(handle))

    @property
    def handle(self) -> BlockHandle:
        return self.block.handle

    @property
    def stop(self) -> bool:
        return bool(self._stop[0])

    def request_stop(self) -> None:
        self._stop[0] = 1

    def total_steps(self) -> int:
        """Env steps taken by all actors together."""
        return int(self.actor_steps.sum())

    @property
    def env_budget(self) -> int:
        return int(self._env_budget[0])

    @env_budget.setter
    def env_budget(self, value: int) -> None:
        self._env_budget[0] = value

    @property
    def updates(self) -> int:
        return int(self._updates[0])

    @updates.setter
    def updates(self, value: int) -> None:
        self._updates[0] = value

    @property
    def update_budget(self) -> int:
        return int(self._update_budget[0])

    @update_budget.setter
    def update_budget(self, value: int) -> None:
        self._update_budget[0] = value

    def close(self) -> None:
        self.block.close()


# --------------------------------------------------------------------------- bounded pipe queue


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

        ``poll(0)`` sits in a worker's hot loop: it asks one ``select.poll`` object kept for
        the reader (~1 us) instead of building a selector per call (~30 us here).
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
