"""The shared state of a parallel run, in shared memory: the weight buffer and the control words.

* :class:`WeightBuffer` — one copy of a trainer's weights guarded by a
  sequence lock: the writer makes the counter odd, copies, makes it even; a
  reader retries until it saw the same even counter before and after its copy,
  so it never returns a torn mix of two versions.
* :class:`Control` — the run's counters and flags, one writer per word.

Both live in :class:`~pearl_core.runtime.shm.ShmBlock` segments of the run's
:class:`~pearl_core.runtime.shm.ShmArena`.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import time
from typing import Any, Mapping

import numpy as np

from pearl_core.errors import InvalidValueError
from pearl_core.runtime.shm import STRONG_ORDERING, BlockHandle, Layout, ShmArena, ShmBlock

__all__ = ["Control", "Heartbeat", "WeightBuffer", "WeightHandle"]


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
        self._seq = None  # type: ignore[assignment]  # closed: a later use fails loudly
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
    ``beat``          worker w   heartbeat of worker ``w`` (actor i at ``[i]``, the
                                 learner at ``[n_actors]``): a counter and what it is
                                 doing, one word (:class:`Heartbeat`, :meth:`status`)
    ``dropped``       actor i    transitions with non-finite values it dropped
    ================  =========  ==================================================
    """

    def __init__(self, block: ShmBlock):
        self.block = block
        a = block.arrays
        self._stop, self.actor_steps, self._env_budget = a["stop"], a["actor_steps"], a["env_budget"]
        self._updates, self._update_budget = a["updates"], a["update_budget"]
        self.beat, self.dropped = a["beat"], a["dropped"]

    @classmethod
    def create(cls, arena: ShmArena, n_actors: int) -> Control:
        words = ((8,), np.int64)
        per_worker = ((n_actors + 1,), np.int64)
        layout = Layout.of({
            "stop": words, "actor_steps": ((n_actors,), np.int64), "env_budget": words,
            "updates": words, "update_budget": words, "beat": per_worker, "dropped": ((n_actors,), np.int64),
        })
        return cls(arena.block(layout, "control"))

    @property
    def learner_slot(self) -> int:
        """The learner's index in the per-worker words (after the actors')."""
        return int(self.actor_steps.shape[0])

    def heartbeat(self, worker: int) -> "Heartbeat":
        """The writer of worker ``worker``'s heartbeat word (one per worker process)."""
        return Heartbeat(self.beat, worker)

    def status(self, worker: int) -> tuple[int, int, int]:
        """``(word, phase, arg)`` of worker ``worker``: the word changes at every mark."""
        word = int(self.beat[worker])
        return word, (word >> 32) & 31, word & 0xFFFFFFFF

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


class Heartbeat:
    """``mark(phase, arg)``: one worker tells the host it is alive and what it is doing.

    One int64 word per worker: a counter (bits 37-62, bumped at every call), the
    phase (bits 32-36, a :class:`~pearl_core.runtime.messages.Phase`) and its
    argument (bits 0-31: an environment index, an update number). A single aligned
    store through a memoryview (about 0.1 µs), so it can sit before every
    ``env.step``; the host only compares words, so the counter may wrap.
    """

    __slots__ = ("_view", "_i", "_n")

    def __init__(self, words: np.ndarray, worker: int):
        self._view = words.data
        self._i = worker
        self._n = int(words[worker]) >> 37

    def __call__(self, phase: int, arg: int = 0) -> None:
        self._n = n = self._n + 1
        self._view[self._i] = ((n & 0x3FFFFFF) << 37) | (phase << 32) | (arg & 0xFFFFFFFF)
