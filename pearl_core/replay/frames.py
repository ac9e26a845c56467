"""Frame-efficient Data Storage: each frame of stacked image observations stored once.

A stacked observation (the ``"atari"`` preset's ``(4, 84, 84)``: the last four
frames, oldest first) shares three frames with its ``next_obs`` and all four
with the ``next_obs`` of the transition before it, so a plain
:class:`~pearl_core.replay.storage.DataStorage` holds every frame eight times.
:class:`FrameStorage` keeps a pool of single frames (``obs[j]``, the slices along
the first axis) and, per transition, the pool indices of its ``obs`` and
``next_obs`` frames; :meth:`~FrameStorage.gather` rebuilds both stacks from
them. The other fields are stored as in the plain storage.

Sharing is decided by **content**, never assumed, so what comes back is always
exactly what was added (whatever the environment, wrappers, interleaving of
actors and environments, episode boundaries or ring wrap-around):

* ``obs`` reuses the frames of an earlier transition's ``next_obs`` whose bytes are
  equal (the previous step of the same environment: looked up by a hash of the
  stack, then compared byte for byte); otherwise its frames are stored, a frame
  equal to the one before it in the stack (an episode's first stack repeats
  its reset frame) shared with it;
* ``next_obs`` reuses ``obs``'s frames 1..F-1 when its first F-1 frames equal them
  (the stack moved by one frame) and stores only its newest frame; otherwise
  all of its frames are stored.

Frames are reference-counted: a frame returns to the pool's free list when the
last transition that uses it is overwritten. With the Atari preset a transition
costs one frame plus its episode's first frame spread over the episode:
``frames_per_transition`` (the pool's frames in use / stored transitions) is about
``1 + 1/episode length``.

**Memory: a pool mapped at its bound.** The frames a transition costs depend on the
content, not on the spec: a stack that moved by one frame costs one frame, an episode's
first stack its distinct frames (one when it repeats its reset frame, as gymnasium's
``FrameStackObservation`` pads, which the Atari preset uses), so episodes of L steps
cost ``1 + 1/L`` frames per transition: 1.1 for L >= 10 (:data:`FRAMES_PER_TRANSITION`),
2 for an environment that terminates at once, the worst case of frame stacks
(:data:`MAX_FRAMES_PER_TRANSITION`). A pool sized for the typical case had to grow
for short episodes, beyond what the start-up check had counted, and each growth held
the old and the new pool at once. So the pool is allocated once, at the start, at its
bound: ``max_frames_per_transition`` (default 2) frames per transition plus room for
one ``add`` of :data:`RESERVE_ROWS` rows whose frames are all new;
:func:`frame_storage_bytes`, what the start-up memory check counts, is that, and
nothing of the pool is allocated later. It does not make the typical case bigger in
memory: a large ``np.zeros`` is mapped zero pages (glibc's ``calloc`` maps large blocks)
that take memory only when written,
and frames are taken lowest index first, a freed frame before a never-written one,
so the memory the pool occupies is its high-water mark of frames in use
(:attr:`~FrameStorage.resident_bytes`), 1.1 frames per transition for typical
episodes; the address space (``ulimit -v``) is the bound from the start, so a limit
below it is refused at the start, never in the middle of a run. Counting 2 frames
per transition, not the ``2 * F`` of content that shares nothing (a plain storage's
stacks), keeps the check close to what a run needs; the price is a check that counts
2 frames per transition where typical episodes occupy 1.1 (Atari at 1M transitions:
about 14 GB counted, 8 GB occupied; a plain storage is 56 GB). Content that would pass the bound
(stacks that do not move by one frame a step, the channels of an image that are not
frames of a stack, episodes of one step whose first stack has several distinct
frames) is refused: the ``add`` raises a
:class:`~pearl_core.replay.memory.StorageMemoryError` naming the frames per transition
and the fix (``ReplayConfig(frame_storage='off')``) and changes nothing. The bound
holds at every size (that many frames per stored transition, plus the room for one
``add``), so such content is refused in its first adds, not when the replay has
filled. What an ``add`` takes is counted exactly before anything is written (the same
lookups the write then uses), and the frames of the transitions it overwrites count
as free for it.

What it does not save: the actors still send whole stacks to the replay and
batches leave it as whole stacks (the traffic is that of a plain storage), and a
checkpoint with ``save_replay`` holds the stacks rebuilt (as large as a plain
storage's).
"""

from __future__ import annotations

import math
import zlib
from typing import Mapping

import numpy as np

from pearl_core.errors import SpecError
from pearl_core.replay.memory import StorageMemoryError
from pearl_core.replay.memory import zeros as _zeros
from pearl_core.replay.storage import TRANSITION_FIELDS, Batch, DataStorage, StorageSpec
from pearl_core.validation import number

__all__ = ["FRAMES_PER_TRANSITION", "FRAME_MIN_SIDE", "MAX_FRAMES_PER_TRANSITION", "RESERVE_ROWS", "FrameStorage",
           "frame_storage_bytes", "frame_storage_fits", "storage_row_bytes"]

#: ``"auto"`` picks frame storage for observations of at least this many pixels a side (Atari's 84x84
#: stacks, not MinAtar's 10x10 grids, whose channels are not frames of a stack).
FRAME_MIN_SIDE = 32

_OBS = ("obs", "next_obs")


def frame_storage_fits(spec: StorageSpec) -> bool:
    """``spec``'s observations are stacks of image frames ``(F, H, W)``, ``F >= 2``, ``H, W >= FRAME_MIN_SIDE``,
    of an integer dtype (the case ``ReplayConfig.frame_storage="auto"`` stores frame by frame)."""
    shape = spec.obs_shape
    return (len(shape) == 3 and shape[0] >= 2 and min(shape[1:]) >= FRAME_MIN_SIDE
            and spec.obs_dtype.kind in "iu")


#: Frames per transition of typical content, what ``pearl plan`` assumes (one new frame per step, plus
#: the episodes' first stacks; ``FrameStorage.frames_per_transition`` measures it).
FRAMES_PER_TRANSITION = 1.1

#: Frames per transition a frame pool holds at most by default, what the start-up memory check counts: episodes
#: of one step, each first stack repeating its reset frame (one frame) and its ``next_obs`` moved by one (one).
MAX_FRAMES_PER_TRANSITION = 2


#: Rows of one ``add`` whose worst case (every frame new) the pool has room for from the start.
RESERVE_ROWS = 64


def _reserve_frames(frames: int) -> int:
    """Room for one ``add`` of :data:`RESERVE_ROWS` rows whose frames are all new."""
    return 2 * frames * RESERVE_ROWS + 16


def _max_pool(capacity: int, frames: int, per_transition: float = MAX_FRAMES_PER_TRANSITION) -> int:
    """The pool's frames: ``per_transition`` frames per transition plus one worst-case ``add``."""
    return math.ceil(per_transition * capacity) + _reserve_frames(frames)


def frame_storage_bytes(spec: StorageSpec, capacity: int,
                        max_frames_per_transition: float = MAX_FRAMES_PER_TRANSITION) -> int:
    """Host bytes a :class:`FrameStorage` of ``capacity`` (and ``max_frames_per_transition``) may ever hold,
    whatever it stores and however long: its pool at the bound (that many frames per transition plus one
    worst-case ``add``, allocated at the start; an ``add`` that needs more is refused), the per-transition
    tables and the other fields. The start-up memory check counts this."""
    (shape, dtype) = spec.fields()["obs"]
    frame = math.prod(shape[1:]) * dtype.itemsize
    pool = _max_pool(capacity, int(shape[0]), max_frames_per_transition)
    return int(capacity * (storage_row_bytes(spec, True) - math.ceil(FRAMES_PER_TRANSITION * frame))
               + pool * (frame + 8))


def storage_row_bytes(spec: StorageSpec, frames: bool) -> int:
    """Host bytes one stored transition takes: every field's row, or with ``frames`` the fields other than
    the observations, :data:`FRAMES_PER_TRANSITION` frames and the per-transition tables (typical content;
    the most a frame storage may hold is :func:`frame_storage_bytes`)."""
    layout = spec.fields()
    if not frames:
        return sum(math.prod(shape) * dtype.itemsize for shape, dtype in layout.values())
    (shape, dtype) = layout["obs"]
    frame = math.prod(shape[1:]) * dtype.itemsize
    other = sum(math.prod(sh) * dt.itemsize for name, (sh, dt) in layout.items() if name not in _OBS)
    tables = 2 * shape[0] * 8 + 8 + 1 + 8  # frame indices, stack hash, written flag, reference count
    return int(other + math.ceil(FRAMES_PER_TRANSITION * frame) + tables)


def _bytes_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit patterns (NaN payloads and -0.0 included), for C-contiguous arrays of one dtype and shape."""
    return a.shape == b.shape and np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8))


class FrameStorage(DataStorage):
    """A :class:`~pearl_core.replay.storage.DataStorage` that stores each frame of ``obs`` / ``next_obs`` once.

    Same contract as the plain storage (``add``, ``gather``, ``gather_into``, ``field``,
    ``size``, ``cursor``; bad input raises and changes nothing; the conformance
    suite :class:`~pearl_core.testing.StorageConformance` proves it), for any
    observation with a first axis (a frame is one slice along it; see the module
    docstring) whose transitions hold at most ``max_frames_per_transition`` frames each
    (plus one ``add``'s worst case) at any size: an ``add`` that would pass it raises
    :class:`~pearl_core.replay.memory.StorageMemoryError` and changes nothing.
    ``max_frames_per_transition`` (default :data:`MAX_FRAMES_PER_TRANSITION`, frame
    stacks): the pool's bound, allocated at the start (:func:`frame_storage_bytes`
    counts it); ``None``: ``2 * F``, a plain storage's frames, which holds any content.

    Attributes:
        frames_in_use: frames the stored transitions reference.
        pool_frames: frames the pool holds (in use and free), its bound.
        resident_bytes: the host memory it occupies (the pool up to its high-water mark).
    """

    def __init__(self, spec: StorageSpec, capacity: int, *,
                 max_frames_per_transition: float | None = MAX_FRAMES_PER_TRANSITION):
        if not isinstance(spec, StorageSpec) or len(spec.obs_shape) < 1:
            found = spec.obs_shape if isinstance(spec, StorageSpec) else type(spec).__name__
            raise SpecError(f"FrameStorage needs observations with a first axis to split into frames; found "
                            f"{found}. Fix: use DataStorage for this environment.")
        self._frames = int(spec.obs_shape[0])
        self._per_transition = float(2 * self._frames) if max_frames_per_transition is None else number(
            max_frames_per_transition, "FrameStorage: max_frames_per_transition", low=1.0,
            fix=f"e.g. {MAX_FRAMES_PER_TRANSITION} (frame stacks) or None (any content)")
        super().__init__(spec, capacity)

    # -- allocation --------------------------------------------------------------------------
    def allocate(self) -> dict[str, np.ndarray]:
        frame_shape, dtype = self._layout["obs"][0][1:], self._layout["obs"][1]
        arrays = {name: np.zeros((self._capacity, *shape), dtype=dt)
                  for name, (shape, dt) in self._layout.items() if name not in _OBS}
        f = self._frames
        # The bound, at once (frame_storage_bytes): mapped zero pages, written as frames are taken.
        pool = _max_pool(self._capacity, f, self._per_transition)
        what = (f"FrameStorage of capacity {self._capacity:,}: the frame pool ({self._per_transition:g} frames "
                "per transition and one add's worst case, what the start-up memory check counts)")
        self._pool = _zeros((pool, *frame_shape), dtype, what)
        self._refs = np.zeros(pool, dtype=np.int64)
        self._touched = 0  # frames [0, touched) have been written; the pages beyond were never touched
        self._free: list[int] = []  # written frames no transition uses: taken (last first) before new ones
        self._index = np.zeros((self._capacity, 2 * f), dtype=np.int64)  # obs frames, then next_obs frames
        self._key = np.zeros(self._capacity, dtype=np.int64)  # the hash of each slot's next_obs stack
        self._written = np.zeros(self._capacity, dtype=bool)  # slots holding a transition (whose frames are held)
        self._recent: dict[int, int] = {}  # hash of a stored next_obs stack -> the latest slot holding it
        return arrays

    @property
    def frames_in_use(self) -> int:
        return self._touched - len(self._free)

    @property
    def pool_frames(self) -> int:
        return int(self._pool.shape[0])

    @property
    def frames_per_transition(self) -> float:
        """Frames in use per stored transition (``nan`` when empty): what one transition costs in frames."""
        return self.frames_in_use / self._size if self._size else math.nan

    @property
    def nbytes(self) -> int:
        """Host bytes this storage has allocated (mapped): the frame pool at its bound, the per-transition
        tables and the other fields."""
        other = sum(a.nbytes for a in self._arrays.values())
        return int(self._pool.nbytes + self._refs.nbytes + self._index.nbytes + self._key.nbytes + other)

    @property
    def resident_bytes(self) -> int:
        """Host bytes it occupies: :attr:`nbytes` but the pool's frames never written (zero pages never
        touched; to the page)."""
        return self.nbytes - (self.pool_frames - self._touched) * (self._pool[0].nbytes + 8)

    def _freed_by(self, slots: np.ndarray) -> int:
        """Frames that releasing the written ``slots`` (distinct) frees: those no other transition uses."""
        held = slots[self._written[slots]]
        if not len(held):
            return 0
        idx, counts = np.unique(self._index[held].reshape(-1), return_counts=True)
        return int(np.count_nonzero(self._refs[idx] == counts))

    def _check_bound(self, n: int, freed: int, size: int) -> None:
        """Refuse an add that takes ``n`` frames, releases ``freed`` and leaves ``size`` transitions when its
        transitions would hold more than the bound (``max_frames_per_transition`` each plus one worst-case
        add; at capacity, the whole pool). Before any write: a refusal changes nothing."""
        in_use = self.frames_in_use - freed + n
        if in_use > min(self.pool_frames, math.ceil(self._per_transition * size) + _reserve_frames(self._frames)):
            frame = self._pool[0].nbytes
            raise StorageMemoryError(
                f"FrameStorage of capacity {self._capacity:,}: this add takes {n:,} new frames, so its {size:,} "
                f"transitions would hold {in_use:,} frames, {in_use / size:.2f} each, beyond the frame pool's "
                f"bound of {self._per_transition:g} per transition plus one add's worst case (at capacity "
                f"{self.pool_frames:,} frames, {self.pool_frames * (frame + 8):,} bytes: what the start-up memory "
                f"check counted). Expected stacks of frames that move by one frame a step (at most "
                f"{MAX_FRAMES_PER_TRANSITION} frames per transition, even in episodes of one step). Nothing was "
                "changed. Fix: ReplayConfig(frame_storage='off') for observations whose first axis is not a stack "
                "of frames (a plain storage, counted as such).")

    # -- writing ----------------------------------------------------------------------------
    def _take_frame(self, frame: np.ndarray) -> int:
        if self._free:
            i = self._free.pop()
        else:  # the lowest never-written frame: the pool's pages are touched up to its high-water mark only
            i, self._touched = self._touched, self._touched + 1
        self._pool[i] = frame
        self._refs[i] = 1
        return i

    def _release(self, slot: int) -> None:
        """Drop the references of the transition in ``slot`` (about to be overwritten)."""
        key = int(self._key[slot])
        if self._recent.get(key) == slot:
            del self._recent[key]
        for i in self._index[slot]:
            self._refs[i] -= 1
            if self._refs[i] == 0:
                self._free.append(int(i))

    def _plan(self, slots: np.ndarray, obs: np.ndarray, nxt: np.ndarray) -> tuple[list[tuple], int]:
        """How ``store`` will write each row, and the frames it will take, without changing anything.

        Per row: the slot whose ``next_obs`` frames its ``obs`` reuses (an equal stack, looked up by hash
        among the stored transitions that the add keeps and the add's earlier rows, compared byte for
        byte) or ``None`` with, per frame, whether it repeats the one before it; whether ``next_obs`` is
        ``obs`` moved by one frame; the hash of ``next_obs``.
        """
        f = self._frames
        gone = set()  # the hashes whose latest stack is in a slot this add overwrites
        for slot in slots[self._written[slots]].tolist():
            key = int(self._key[slot])
            if self._recent.get(key) == slot:
                gone.add(key)
        here: dict[int, int] = {}  # hash of an earlier row's next_obs -> that row
        plan: list[tuple] = []
        taken = 0
        for r in range(len(slots)):
            stack = obs[r]
            key = zlib.crc32(stack.data.cast("B"))
            src = None
            if key in here:
                if _bytes_equal(nxt[here[key]], stack):
                    src = int(slots[here[key]])
            elif key not in gone:
                held = self._recent.get(key)
                if held is not None and _bytes_equal(self._pool[self._index[held, f:]], stack):
                    src = held
            repeats = None
            if src is None:
                repeats = [bool(j) and _bytes_equal(stack[j], stack[j - 1]) for j in range(f)]
                taken += f - sum(repeats)
            moved = _bytes_equal(nxt[r, :-1], stack[1:])
            taken += 1 if moved else f
            nkey = zlib.crc32(memoryview(nxt[r]).cast("B"))
            here[nkey] = r
            plan.append((src, repeats, moved, nkey))
        return plan, taken

    def store(self, slots: np.ndarray, rows: Mapping[str, np.ndarray]) -> None:
        f = self._frames
        obs = np.ascontiguousarray(rows["obs"])
        nxt = np.ascontiguousarray(rows["next_obs"])
        # Count the frames this add takes, and refuse it beyond the bound before writing anything, counting
        # the frames the overwritten transitions free (released first).
        plan, taken = self._plan(slots, obs, nxt)
        self._check_bound(taken, self._freed_by(slots), min(self._size + len(slots), self._capacity))
        for name, values in rows.items():
            if name not in _OBS:
                self._arrays[name][slots] = values
        for slot in slots[self._written[slots]].tolist():
            self._release(slot)
            self._written[slot] = False
        for r, slot in enumerate(slots.tolist()):
            src, repeats, moved, key = plan[r]
            if src is None:
                o_idx: list[int] = []
                for j in range(f):
                    if repeats[j]:
                        self._refs[o_idx[-1]] += 1
                        o_idx.append(o_idx[-1])
                    else:
                        o_idx.append(self._take_frame(obs[r, j]))
            else:
                o_idx = [int(i) for i in self._index[src, f:]]
                np.add.at(self._refs, o_idx, 1)
            if moved:
                n_idx = o_idx[1:] + [self._take_frame(nxt[r, -1])]
                np.add.at(self._refs, o_idx[1:], 1)
            else:
                n_idx = [self._take_frame(nxt[r, j]) for j in range(f)]
            self._index[slot, :f] = o_idx
            self._index[slot, f:] = n_idx
            self._key[slot] = key
            self._recent[key] = slot
            self._written[slot] = True

    # -- reading ----------------------------------------------------------------------------
    def gather_into(self, idx: np.ndarray, out: Mapping[str, np.ndarray] | None = None) -> Batch:
        f = self._frames
        table = self._index[idx]
        if out is None:
            parts = {name: self._arrays[name][idx] for name in TRANSITION_FIELDS if name not in _OBS}
            parts["obs"] = self._pool[table[:, :f]]
            parts["next_obs"] = self._pool[table[:, f:]]
            return Batch.of(parts)
        for name in TRANSITION_FIELDS:
            if name not in _OBS:
                np.take(self._arrays[name], idx, axis=0, out=out[name], mode="clip")
        np.take(self._pool, table[:, :f], axis=0, out=out["obs"], mode="clip")
        np.take(self._pool, table[:, f:], axis=0, out=out["next_obs"], mode="clip")
        return Batch.of(out)

    def field(self, name: str) -> np.ndarray:
        """A read-only array of all ``capacity`` rows of a field; ``obs`` / ``next_obs`` are rebuilt (a copy
        of every stack: as large as a plain storage's field)."""
        if name not in _OBS:
            return super().field(name)
        f = self._frames
        table = self._index[:, :f] if name == "obs" else self._index[:, f:]
        rows = self._pool[table]
        rows[~self._written] = 0
        rows.flags.writeable = False
        return rows

    def __repr__(self) -> str:
        return (f"FrameStorage(spec={self._spec}, capacity={self._capacity}, size={self._size}, "
                f"frames_in_use={self.frames_in_use})")
