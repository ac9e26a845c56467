"""Shared-memory transport for the parallel runtime: named array blocks and slot rings.

The run's shared state built on them (the weight buffer, the control words) is in
:mod:`pearl_core.runtime.shared`; the bounded message queues in
:mod:`pearl_core.runtime.queues`.

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
* :class:`ShmArena` — creates blocks and unlinks every one of them on
  :meth:`~ShmArena.close`, at garbage collection or at interpreter exit,
  whichever comes first, so no ``/dev/shm`` segment outlives the run.

Segment names start with :data:`SHM_PREFIX` followed by the creating process id,
so leaks are easy to find (``ls /dev/shm/pearl_*``). The named semaphores of the run's
queues (multiprocessing's ``/dev/shm/sem.mp-*``, whose names carry no owner) get a
marker ``pearl_<pid>_sem_<name>`` beside them (:func:`track_semaphore`), which lives exactly
as long as the semaphore object and is registered with multiprocessing's resource tracker
like a segment (a marker is an empty POSIX shared-memory name). A host killed alone leaves
nothing: its resource tracker unlinks the segments, semaphores and markers. When a whole
job is killed outright (SIGKILL of the host, its fork server and its resource tracker)
nobody unlinks them; :func:`clean_orphans`, called when the next parallel run starts (and
by a parent that saw its child host die, e.g. the composer's calibration), removes the
segments and marked semaphores whose owner process is gone — never those of a live process.

Memory ordering: the cursors and the sequence counter are aligned ``int64``
words written with single stores. On x86-64 (total store order) a reader that
sees a counter also sees the data written before it. On weakly ordered CPUs
(ARM) that guarantee needs fences Python cannot issue; there
:data:`STRONG_ORDERING` is ``False`` and the weight buffer falls back to a
process-shared lock.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import secrets
import time
import weakref
from multiprocessing import shared_memory
from typing import Any, Iterable, Mapping

import numpy as np

from pearl_core.errors import InvalidValueError, PearlError

__all__ = [
    "SHM_PREFIX",
    "STRONG_ORDERING",
    "BlockHandle",
    "Layout",
    "RingHandle",
    "ShmArena",
    "ShmBlock",
    "SlotRing",
    "clean_orphans",
    "list_segments",
    "track_semaphore",
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


SHM_DIR = "/dev/shm"
#: The marker of a semaphore: ``pearl_<owner pid>_sem_<semaphore name>``.
SEM_MARK = "sem_"
_OWNER_RE = re.compile(rf"^{re.escape(SHM_PREFIX)}(\d+)_")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True  # someone else's live process
    except (OSError, OverflowError):
        return False
    return True


def track_semaphore(sem: Any) -> str | None:
    """Mark ``sem`` (a multiprocessing semaphore with a name in ``/dev/shm``) as this process's: a marker file
    ``pearl_<pid>_sem_<name>`` that lives as long as the semaphore object (multiprocessing unlinks a named
    semaphore when its object is collected; the marker goes in the same collection, so a marker never misses
    a semaphore that is still there for longer than the two unlinks). The marker is registered with the
    resource tracker, which removes it with the run's segments if this process is killed alone.
    Returns the marker's path (``None``: none made)."""
    name = getattr(getattr(sem, "_semlock", None), "name", None)
    if not name or not os.path.isdir(SHM_DIR):
        return None
    pid = os.getpid()
    marker = f"{SHM_PREFIX}{pid}_{SEM_MARK}{name.lstrip('/')}"
    path = os.path.join(SHM_DIR, marker)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600))
    except OSError:
        return None
    weakref.finalize(sem, untrack_semaphore, path, pid, _tracker("register", marker))
    return path


def untrack_semaphore(path: str | None, pid: int | None = None, tracked: bool = False) -> None:
    """Remove a marker :func:`track_semaphore` made (in the process that made it; idempotent)."""
    if path is None or (pid is not None and os.getpid() != pid):
        return
    try:
        os.unlink(path)
    except OSError:
        return
    if tracked:
        _tracker("unregister", os.path.basename(path))


def _tracker(what: str, marker: str) -> bool:
    """(Un)register a marker with multiprocessing's resource tracker as the shared-memory name it is."""
    try:
        from multiprocessing import resource_tracker

        getattr(resource_tracker, what)("/" + marker, "shared_memory")
        return True
    except Exception:  # noqa: BLE001 - no tracker (e.g. at interpreter exit): clean_orphans still finds it
        return False


def clean_orphans(owners: Iterable[int] | None = None) -> list[str]:
    """Remove the PEARL segments and marked semaphores of processes that no longer exist.

    An entry of ``/dev/shm`` is removed only when its name is PEARL's (``pearl_<pid>_...``) and process
    ``<pid>`` is gone: a live owner's segments are never touched. For a semaphore marker the semaphore it
    names goes too. Linux only (``[]`` where ``/dev/shm`` does not exist); errors are skipped.

    Args:
        owners: only the entries of these pids (a parent cleaning after its child); default: every owner.

    Returns:
        The names removed (the caller logs them).
    """
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return []
    removed, alive = [], {}
    only = None if owners is None else {int(p) for p in owners}
    for name in sorted(names):
        m = _OWNER_RE.match(name)
        if m is None:
            continue
        pid = int(m.group(1))
        if only is not None and pid not in only:
            continue
        if pid not in alive:
            alive[pid] = _alive(pid)
        if alive[pid]:
            continue
        rest = name[m.end():]
        if rest.startswith(SEM_MARK):
            sem = rest[len(SEM_MARK):]
            try:
                os.unlink(os.path.join(SHM_DIR, f"sem.{sem}"))
                removed.append(f"sem.{sem}")
            except OSError:
                pass
        try:
            os.unlink(os.path.join(SHM_DIR, name))
            removed.append(name)
        except OSError:
            pass
    return removed


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

    def memory(self) -> tuple[int, int]:
        """``(address, bytes)`` of the segment's mapping in this process (e.g. to register it with a GPU
        driver as pinned memory)."""
        buf = self._shm.buf
        if buf is None:
            raise PearlError(f"segment {self.name!r} is closed in this process; expected it mapped.")
        view = np.frombuffer(buf, dtype=np.uint8)
        return int(view.ctypes.data), int(view.nbytes)

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
        self._cursor = None  # type: ignore[assignment]  # closed: a later use fails loudly
        self.block.close()
