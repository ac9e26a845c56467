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

**Memory.** The pool is allocated at the start for :data:`FRAMES_PER_TRANSITION`
frames per transition (episodes of 10 steps or more) plus room for the worst case
of one ``add`` of up to :data:`RESERVE_ROWS` rows (:func:`frame_storage_bytes`: what
the start-up memory check counts), and it stays that size however long the run:
the frames of the transitions an ``add`` overwrites count as free for it. It grows
only for content that shares fewer frames than that (stacks that do not move by
one frame per step, episodes shorter than 10 steps): by what is missing, at least
an eighth, before anything of an ``add`` is written, so a failed allocation changes
nothing (and is a :class:`~pearl_core.replay.memory.StorageMemoryError` naming the
size and the fix).

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
from pearl_core.replay.memory import zeros as _zeros
from pearl_core.replay.storage import TRANSITION_FIELDS, Batch, DataStorage, StorageSpec

__all__ = ["FRAMES_PER_TRANSITION", "FRAME_MIN_SIDE", "RESERVE_ROWS", "FrameStorage", "frame_storage_bytes",
           "frame_storage_fits", "storage_row_bytes"]

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


#: Frames per transition the memory estimates assume for frame storage (one new frame per step, plus the
#: episodes' first stacks; ``FrameStorage.frames_per_transition`` measures it).
FRAMES_PER_TRANSITION = 1.1


#: Rows of one ``add`` whose worst case (every frame new) the pool has room for from the start.
RESERVE_ROWS = 64


def _start_pool(capacity: int, frames: int) -> int:
    """Frames the pool starts with: :data:`FRAMES_PER_TRANSITION` per transition plus one worst-case ``add``."""
    return math.ceil(FRAMES_PER_TRANSITION * capacity) + 2 * frames * RESERVE_ROWS + 16


def frame_storage_bytes(spec: StorageSpec, capacity: int) -> int:
    """Host bytes a :class:`FrameStorage` of ``capacity`` holds, from its start to however long it runs, for
    content that shares frames as stacked frames do (:data:`FRAMES_PER_TRANSITION`): the pool it starts
    with, the per-transition tables and the other fields. The start-up memory check counts this."""
    (shape, dtype) = spec.fields()["obs"]
    frame = math.prod(shape[1:]) * dtype.itemsize
    pool = _start_pool(capacity, int(shape[0]))
    return int(capacity * (storage_row_bytes(spec, True) - math.ceil(FRAMES_PER_TRANSITION * frame))
               + pool * (frame + 8))


def storage_row_bytes(spec: StorageSpec, frames: bool) -> int:
    """Host bytes one stored transition takes: every field's row, or with ``frames`` the fields other than
    the observations, :data:`FRAMES_PER_TRANSITION` frames and the per-transition tables."""
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
    docstring).

    Attributes:
        frames_in_use: frames the stored transitions reference.
        pool_frames: frames the pool holds (in use and free).
    """

    def __init__(self, spec: StorageSpec, capacity: int, *, pool_frames: int | None = None):
        if not isinstance(spec, StorageSpec) or len(spec.obs_shape) < 1:
            found = spec.obs_shape if isinstance(spec, StorageSpec) else type(spec).__name__
            raise SpecError(f"FrameStorage needs observations with a first axis to split into frames; found "
                            f"{found}. Fix: use DataStorage for this environment.")
        self._frames = int(spec.obs_shape[0])
        self._initial_pool = pool_frames
        super().__init__(spec, capacity)

    # -- allocation --------------------------------------------------------------------------
    def allocate(self) -> dict[str, np.ndarray]:
        frame_shape, dtype = self._layout["obs"][0][1:], self._layout["obs"][1]
        arrays = {name: np.zeros((self._capacity, *shape), dtype=dt)
                  for name, (shape, dt) in self._layout.items() if name not in _OBS}
        f = self._frames
        # FRAMES_PER_TRANSITION per transition plus one worst-case add (frame_storage_bytes); grows when exhausted.
        pool = self._initial_pool or _start_pool(self._capacity, f)
        what = f"FrameStorage of capacity {self._capacity:,}: the frame pool"
        self._pool = _zeros((pool, *frame_shape), dtype, what)
        self._refs = np.zeros(pool, dtype=np.int64)
        self._free = list(range(pool - 1, -1, -1))  # a stack: pop() gives the lowest index first
        self._index = np.zeros((self._capacity, 2 * f), dtype=np.int64)  # obs frames, then next_obs frames
        self._key = np.zeros(self._capacity, dtype=np.int64)  # the hash of each slot's next_obs stack
        self._written = np.zeros(self._capacity, dtype=bool)  # slots holding a transition (whose frames are held)
        self._recent: dict[int, int] = {}  # hash of a stored next_obs stack -> the latest slot holding it
        return arrays

    @property
    def frames_in_use(self) -> int:
        return int(self._pool.shape[0] - len(self._free))

    @property
    def pool_frames(self) -> int:
        return int(self._pool.shape[0])

    @property
    def frames_per_transition(self) -> float:
        """Frames in use per stored transition (``nan`` when empty): what one transition costs in frames."""
        return self.frames_in_use / self._size if self._size else math.nan

    @property
    def nbytes(self) -> int:
        """Host bytes this storage holds: the frame pool, the per-transition tables and the other fields."""
        other = sum(a.nbytes for a in self._arrays.values())
        return int(self._pool.nbytes + self._refs.nbytes + self._index.nbytes + self._key.nbytes + other)

    def _freed_by(self, slots: np.ndarray) -> int:
        """Frames that releasing the written ``slots`` (distinct) frees: those no other transition uses."""
        held = slots[self._written[slots]]
        if not len(held):
            return 0
        idx, counts = np.unique(self._index[held].reshape(-1), return_counts=True)
        return int(np.count_nonzero(self._refs[idx] == counts))

    def _reserve(self, n: int, freed: int = 0) -> None:
        """Grow the pool so that ``n`` more frames can be taken once ``freed`` frames are released
        (before any write: a failure changes nothing)."""
        short = n - len(self._free) - freed
        if short <= 0:
            return
        old = self._pool.shape[0]
        new = old + max(short, old // 8)
        what = f"FrameStorage of capacity {self._capacity:,}: a larger frame pool"
        pool = _zeros((new, *self._pool.shape[1:]), self._pool.dtype, what,
                      f" (the stored stacks share fewer frames than {FRAMES_PER_TRANSITION} per transition)")
        refs = np.zeros(new, dtype=np.int64)
        pool[:old], refs[:old] = self._pool, self._refs
        self._pool, self._refs = pool, refs
        self._free[:0] = range(new - 1, old - 1, -1)  # under the old free frames: those are reused first

    # -- writing ----------------------------------------------------------------------------
    def _take_frame(self, frame: np.ndarray) -> int:
        i = self._free.pop()
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

    def _stack_frames(self, stack: np.ndarray) -> list[int]:
        """Pool indices holding ``stack``'s frames: an equal earlier ``next_obs`` stack's, or new ones."""
        key = zlib.crc32(stack.data.cast("B"))
        slot = self._recent.get(key)
        if slot is not None:
            idx = self._index[slot, self._frames:]
            if _bytes_equal(self._pool[idx], stack):
                np.add.at(self._refs, idx, 1)
                return [int(i) for i in idx]
        out: list[int] = []
        for j in range(self._frames):
            if j and _bytes_equal(stack[j], stack[j - 1]):
                self._refs[out[-1]] += 1
                out.append(out[-1])
            else:
                out.append(self._take_frame(stack[j]))
        return out

    def store(self, slots: np.ndarray, rows: Mapping[str, np.ndarray]) -> None:
        f = self._frames
        # Worst case, every frame of both stacks is new: make room before writing anything, counting the
        # frames the overwritten transitions free (released first), so a full replay does not grow the pool.
        self._reserve(2 * f * len(slots), self._freed_by(slots))
        for name, values in rows.items():
            if name not in _OBS:
                self._arrays[name][slots] = values
        obs = np.ascontiguousarray(rows["obs"])
        nxt = np.ascontiguousarray(rows["next_obs"])
        for slot in slots[self._written[slots]].tolist():
            self._release(slot)
            self._written[slot] = False
        for r, slot in enumerate(slots.tolist()):
            o_idx = self._stack_frames(obs[r])
            if _bytes_equal(nxt[r, :-1], obs[r, 1:]):
                n_idx = o_idx[1:] + [self._take_frame(nxt[r, -1])]
                np.add.at(self._refs, o_idx[1:], 1)
            else:
                n_idx = [self._take_frame(nxt[r, j]) for j in range(f)]
            self._index[slot, :f] = o_idx
            self._index[slot, f:] = n_idx
            key = zlib.crc32(memoryview(nxt[r]).cast("B"))
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
