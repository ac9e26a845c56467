"""Peer contestants for ``benchmarks/replay_ops.py``.

Each peer is a small adapter over one library's *public* API (plus a numpy
sum tree written here as a vectorised baseline). An adapter:

* ``build(capacity, priorities)`` makes a tree of ``capacity`` leaves and fills
  it with ``priorities`` (float64, one per leaf);
* ``prepare(op, pool)`` converts the shared input pool to the peer's native
  dtypes *outside* the timed loop and returns ``(call, args)``: one timed call
  is ``call(args[k])``, with ``args`` cycled;
* ``sample_check(masses)`` returns the indices found for ``masses`` (or
  ``None`` when the peer cannot be given masses), for the agreement check.

``load_peer(name)`` returns an adapter or raises :class:`PeerUnavailable` with
the reason (typically the import error), so the benchmark can print it and skip.
"""

from __future__ import annotations

import importlib.metadata

import numpy as np

PEER_NAMES = ("numpy", "tianshou", "torchrl", "cpprb")


class PeerUnavailable(Exception):
    """The peer cannot run here; ``str(exc)`` is the reason printed by the benchmark."""


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# --------------------------------------------------------------------------- numpy


class NumpySumTree:
    """Binary sum tree over a flat ``float64`` array of ``2 * size`` nodes.

    ``size`` is ``capacity`` rounded up to a power of two; node 1 is the root,
    node ``k`` has children ``2k`` and ``2k + 1``, leaves live at
    ``[size, 2 * size)``. Every operation is vectorised over the batch: sampling
    descends one level per numpy step, updating sets the leaves and then
    recomputes the distinct parents level by level.
    """

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        size = 2  # >= 2 so that the root is an inner node
        while size < self.capacity:
            size *= 2
        self.size = size
        self.depth = size.bit_length() - 1
        self.nodes = np.zeros(2 * size, dtype=np.float64)

    def fill(self, priorities: np.ndarray) -> None:
        n = self.size
        self.nodes[n : n + self.capacity] = priorities
        while n > 1:  # rebuild bottom-up, one level per step
            half = n // 2
            np.add(self.nodes[n : 2 * n : 2], self.nodes[n + 1 : 2 * n : 2], out=self.nodes[half:n])
            n = half

    def total(self) -> float:
        return float(self.nodes[1])

    def get(self, indices: np.ndarray) -> np.ndarray:
        return self.nodes[indices + self.size]

    def update(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        nodes = self.nodes
        leaves = indices + self.size
        nodes[leaves] = priorities  # numpy: a repeated index keeps the last value
        parents = np.unique(leaves >> 1)  # sorted and distinct
        while True:
            left = parents << 1
            nodes[parents] = nodes[left] + nodes[left + 1]
            if parents[0] == 1:
                break
            parents >>= 1
            # ``parents`` stays sorted, so distinct = differs from its predecessor
            # (what np.unique returns, in O(n) instead of a sort)
            if parents.shape[0] > 1:
                keep = np.empty(parents.shape[0], dtype=bool)
                keep[0] = True
                np.not_equal(parents[1:], parents[:-1], out=keep[1:])
                parents = parents[keep]

    def sample(self, masses: np.ndarray) -> np.ndarray:
        """Smallest index whose inclusive prefix sum exceeds each mass."""
        nodes = self.nodes
        n = masses.shape[0]
        x = np.array(masses, dtype=np.float64)  # own copy: it is decremented
        idx = np.ones(n, dtype=np.int64)
        left = np.empty(n, dtype=np.float64)
        right = np.empty(n, dtype=bool)
        for _ in range(self.depth):  # five allocation-free ufunc calls per level
            idx <<= 1  # left child
            np.take(nodes, idx, out=left)
            np.greater_equal(x, left, out=right)  # go right: subtract the left subtree
            np.multiply(left, right, out=left)
            x -= left
            idx += right
        idx -= self.size
        # float drift can step into the zero padding past the last leaf
        np.minimum(idx, self.capacity - 1, out=idx)
        return idx


def _rows(a: np.ndarray) -> list:
    return list(a)  # row views, so a timed call only indexes a Python list


class NumpyPeer:
    name = "numpy"
    label = "numpy binary (this file)"

    def version(self) -> str:
        return f"numpy {np.__version__}"

    def build(self, capacity, priorities):
        self.tree = NumpySumTree(capacity)
        self.tree.fill(priorities)

    def prepare(self, op, pool):
        t = self.tree
        if op == "sample":
            return t.sample, _rows(pool["masses"])
        pairs = list(zip(_rows(pool["indices"]), _rows(pool["priorities"])))
        if op == "update":
            return (lambda a: t.update(a[0], a[1])), pairs

        def insert(a):
            t.get(a[0])
            t.update(a[0], a[1])

        return insert, pairs

    def sample_check(self, masses):
        return self.tree.sample(masses)

    def close(self):
        self.tree = None


# --------------------------------------------------------------------------- tianshou


class TianshouPeer:
    name = "tianshou"
    label = "tianshou SegmentTree"

    def __init__(self):
        try:
            from tianshou.data import SegmentTree
        except Exception as exc:  # ImportError, or anything its import chain raises
            raise PeerUnavailable(f"import tianshou.data.SegmentTree failed: {type(exc).__name__}: {exc}") from exc
        self._cls = SegmentTree

    def version(self) -> str:
        return f"tianshou {_version('tianshou')}"

    def build(self, capacity, priorities):
        self.tree = self._cls(capacity)
        self.tree[np.arange(capacity, dtype=np.int64)] = priorities

    def prepare(self, op, pool):
        t = self.tree
        if op == "sample":
            return t.get_prefix_sum_idx, _rows(pool["masses"])
        pairs = list(zip(_rows(pool["indices"]), _rows(pool["priorities"])))
        if op == "update":
            return (lambda a: t.__setitem__(a[0], a[1])), pairs

        def insert(a):
            t[a[0]]
            t[a[0]] = a[1]

        return insert, pairs

    def sample_check(self, masses):
        return np.asarray(self.tree.get_prefix_sum_idx(masses))

    def close(self):
        self.tree = None


# --------------------------------------------------------------------------- torchrl


class TorchrlPeer:
    name = "torchrl"
    label = "torchrl SumSegmentTreeFp32"

    def __init__(self):
        # torchrl's public samplers module hides a failed extension load behind
        # ``SumSegmentTreeFp32 = None``; import the extension itself to get the reason.
        try:
            from torchrl.data.replay_buffers.samplers import SumSegmentTreeFp32
        except Exception as exc:
            raise PeerUnavailable(f"import torchrl failed: {type(exc).__name__}: {exc}") from exc
        if SumSegmentTreeFp32 is None:
            try:
                import torchrl._torchrl  # noqa: F401
            except Exception as exc:
                msg = str(exc)
                if len(msg) > 300:
                    msg = msg[:300] + "..."
                raise PeerUnavailable(
                    f"torchrl's C++ extension does not load beside this torch: {type(exc).__name__}: {msg}"
                ) from exc
            raise PeerUnavailable("torchrl exposes SumSegmentTreeFp32 = None (extension not built)")
        self._cls = SumSegmentTreeFp32

    def version(self) -> str:
        return f"torchrl {_version('torchrl')}"

    def build(self, capacity, priorities):
        self.tree = self._cls(capacity)
        self.tree[np.arange(capacity, dtype=np.int64)] = priorities.astype(np.float32)

    def prepare(self, op, pool):
        t = self.tree
        if op == "sample":
            return t.scan_lower_bound, _rows(pool["masses"].astype(np.float32))
        pairs = list(zip(_rows(pool["indices"]), _rows(pool["priorities"].astype(np.float32))))
        if op == "update":
            return (lambda a: t.__setitem__(a[0], a[1])), pairs

        def insert(a):
            t[a[0]]
            t[a[0]] = a[1]

        return insert, pairs

    def sample_check(self, masses):
        return np.asarray(self.tree.scan_lower_bound(masses.astype(np.float32)))

    def close(self):
        self.tree = None


# --------------------------------------------------------------------------- cpprb


class CpprbPeer:
    name = "cpprb"
    label = "cpprb PrioritizedReplayBuffer"

    def __init__(self):
        try:
            from cpprb import PrioritizedReplayBuffer
        except Exception as exc:
            raise PeerUnavailable(f"import cpprb failed: {type(exc).__name__}: {exc}") from exc
        self._cls = PrioritizedReplayBuffer

    def version(self) -> str:
        return f"cpprb {_version('cpprb')}"

    def build(self, capacity, priorities):
        # alpha = 1, eps = 0: the stored priority is the one given (as float32).
        self.capacity = capacity
        self.rb = self._cls(capacity, {"obs": {}}, alpha=1.0, eps=0.0)
        self.rb.add(obs=np.zeros((capacity, 1), dtype=np.float32), priorities=priorities)

    def prepare(self, op, pool):
        rb = self.rb
        batch = pool["masses"].shape[1]
        if op == "sample":
            # cpprb draws its own masses: a call is RNG + tree descent + IS weights
            # + gathering the 1-float "obs" field. The masses pool is unused.
            return (lambda _a: rb.sample(batch)), [None]
        if op == "update":
            pairs = list(
                zip(
                    _rows(pool["indices"].astype(np.uint64)),
                    _rows(pool["priorities"].astype(np.float32)),
                )
            )
            return (lambda a: rb.update_priorities(a[0], a[1])), pairs
        # insert: add() writes a batch at the ring's next positions with the given
        # priorities (cpprb has no "get priority"; the indices pool is unused).
        obs = np.zeros((batch, 1), dtype=np.float32)
        prios = _rows(pool["priorities"].astype(np.float32))
        return (lambda p: rb.add(obs=obs, priorities=p)), prios

    def sample_check(self, masses):
        return None  # masses cannot be passed in

    def close(self):
        self.rb = None


_PEERS = {"numpy": NumpyPeer, "tianshou": TianshouPeer, "torchrl": TorchrlPeer, "cpprb": CpprbPeer}


def load_peer(name: str):
    """Return the adapter for ``name`` or raise :class:`PeerUnavailable`."""
    try:
        cls = _PEERS[name]
    except KeyError:
        raise PeerUnavailable(f"unknown peer {name!r}; known: {', '.join(PEER_NAMES)}") from None
    return cls()
