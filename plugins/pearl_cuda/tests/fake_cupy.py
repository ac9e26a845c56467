"""A numpy stand-in for the slice of cupy that pearl_cuda.sumtree uses, for tests without a GPU.

``RawModule.get_function`` parses the kernel's signature from the real CUDA
source and every launch is checked against it (argument count, pointer dtypes,
scalar C types, launch shape) before a numpy re-implementation of the kernel
runs. So the host face's plumbing (what is launched, with which arguments, in
which order) is exercised for real; the kernels' arithmetic is re-stated here
from the source, independently of pearl_cuda.emulation.
"""

from __future__ import annotations

import re
import types

import numpy as np

_PTR = {"double": np.float64, "i64": np.int64, "int": np.int32}
_SCALAR = {"double": np.float64, "i64": np.int64, "int": np.int32}


# ---- streams, events and asynchronous host->device copies
# ``ndarray.set`` does not read its host source when it is called: the copy is queued and runs at
# the next synchronisation point (an event's or a stream's ``synchronize``) or before any device
# read (``take``, ``get``, ``asnumpy``). A caller that refills a pinned staging buffer before the
# copy from it has completed therefore stores the *new* contents, as on a GPU; device work itself
# runs in issue order (one in-order queue), which is all the storage relies on.
_PENDING: list = []  # [(sequence number, thunk)]
_SEQ = [0]
#: Counters the storage tests read: host->device copies queued, bytes of pinned memory allocated.
STATS = {"h2d_copies": 0, "pinned_bytes": 0, "syncs": 0}
#: Stream traffic, in issue order, for tests that check how work is ordered between streams:
#: ``("wait", waiting stream, stream the event was recorded on)`` and ``("take", current stream)``.
LOG: list = []


def _flush(upto=None):
    while _PENDING and (upto is None or _PENDING[0][0] <= upto):
        _PENDING.pop(0)[1]()


class Stream:
    _stack: list = []

    def __init__(self, null=False, non_blocking=False, ptds=False):
        self.null = null

    def __enter__(self):
        Stream._stack.append(self)
        return self

    def __exit__(self, *a):
        Stream._stack.pop()
        return False

    def synchronize(self):
        STATS["syncs"] += 1
        _flush()

    def wait_event(self, event):
        LOG.append(("wait", self, event._stream))  # device work is one in-order queue here: only logged

    def record(self, event=None):
        event = event or Event()
        event.record(self)
        return event


_NULL_STREAM = Stream(null=True)
Stream.null = _NULL_STREAM


def ExternalStream(ptr, device_id=-1):  # mirrors cupy.cuda.ExternalStream
    return Stream()


def get_current_stream():
    return Stream._stack[-1] if Stream._stack else _NULL_STREAM


class Event:
    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self._seq = None
        self._stream = None

    def record(self, stream=None):
        self._seq = _SEQ[0]
        self._stream = stream if stream is not None else get_current_stream()

    def synchronize(self):
        STATS["syncs"] += 1
        if self._seq is not None:
            _flush(self._seq)

    @property
    def done(self):
        return self._seq is None or not _PENDING or _PENDING[0][0] > self._seq


def alloc_pinned_memory(nbytes):
    STATS["pinned_bytes"] += int(nbytes)
    return bytearray(int(nbytes))


class ndarray(np.ndarray):  # mirrors cupy.ndarray
    def get(self, stream=None, order="C", out=None, blocking=True):
        _flush()
        if out is None:
            return np.array(self, copy=True)
        assert isinstance(out, np.ndarray) and not isinstance(out, ndarray), "get(out=...) takes a numpy array"
        assert out.dtype == self.dtype, f"get(out=...): dtype {out.dtype} for {self.dtype} (cupy raises)"
        assert out.shape == self.shape, f"get(out=...): shape {out.shape} for {self.shape} (cupy raises)"
        assert out.flags.c_contiguous, "get(out=...): a non-contiguous out (cupy raises)"
        np.copyto(out, np.asarray(self).view(np.ndarray))
        return out

    def set(self, arr, stream=None):
        if not isinstance(arr, np.ndarray) or isinstance(arr, ndarray):
            raise TypeError("Only numpy.ndarray can be set to cupy.ndarray")
        if self.dtype != arr.dtype:
            raise TypeError(f"{arr.dtype} array cannot be set to {self.dtype} array")
        if self.shape != arr.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self.shape}, new shape: {arr.shape}")
        assert self.flags.c_contiguous, "Cannot set to non-contiguous array"
        dst = self.view(np.ndarray)
        _SEQ[0] += 1
        STATS["h2d_copies"] += 1
        _PENDING.append((_SEQ[0], lambda: np.copyto(dst, arr)))  # reads `arr` later, as a DMA engine does


def take(a, indices, axis=None, out=None):
    _flush()
    LOG.append(("take", get_current_stream()))
    assert isinstance(a, ndarray) and isinstance(indices, ndarray), "take: device arrays only"
    assert indices.dtype.kind in "iu"
    res = np.take(np.asarray(a).view(np.ndarray), np.asarray(indices).view(np.ndarray), axis=axis, mode="wrap")
    if out is None:
        return _dev(res)
    assert isinstance(out, ndarray) and out.shape == res.shape and out.dtype == res.dtype
    np.copyto(out.view(np.ndarray), res)
    return out


def _dev(a):
    return np.ascontiguousarray(a).view(ndarray)


def asarray(a, dtype=None):
    return _dev(np.array(a, dtype=dtype, copy=True))


def ascontiguousarray(a, dtype=None):
    return _dev(np.ascontiguousarray(np.asarray(a), dtype=dtype).copy())


def asnumpy(a):
    _flush()
    return np.array(a, copy=True)


def zeros(n, dtype=np.float64):
    return _dev(np.zeros(n, dtype=dtype))


def empty(n, dtype=np.float64):
    return _dev(np.full(n, 0x5A, dtype=dtype))  # garbage, like device memory


def full(n, value, dtype):
    return _dev(np.full(n, value, dtype=dtype))


def from_dlpack(x):
    """A CPU torch tensor's memory as a fake device array (shared, as DLPack shares a CUDA tensor's)."""
    import torch

    if not isinstance(x, torch.Tensor) or x.device.type != "cpu":
        raise NotImplementedError(f"fake cupy: DLPack only from CPU torch tensors, not {type(x).__name__}")
    if x.dtype == torch.bool:  # the storage must not rely on DLPack's kDLBool (older cupy/torch lack it)
        raise TypeError("fake cupy: from_dlpack of a bool tensor; view it as uint8")
    if x.requires_grad:
        raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")  # as torch does
    arr = x.numpy()
    assert arr.flags.c_contiguous, "from_dlpack of a non-contiguous tensor (the storage passes contiguous ones)"
    return arr.view(ndarray)


float64, int64, int32 = np.float64, np.int64, np.int32


def parse_signatures(code: str) -> dict[str, list[tuple[str, bool, str]]]:
    """``{kernel: [(C type, is_pointer, name), ...]}`` of every ``extern "C" __global__`` function."""
    out = {}
    for name, params in re.findall(r'extern "C" __global__ void (\w+)\(([^)]*)\)', code):
        plist = []
        for p in params.split(","):
            p = p.replace("__restrict__", "").replace("const", "").split()
            ptr = any("*" in t for t in p)
            ctype = p[0].rstrip("*")
            plist.append((ctype, ptr, p[-1].lstrip("*")))
        out[name] = plist
    return out


class FakeKernel:
    def __init__(self, name, params, cooperative, log):
        self.name, self.params, self.cooperative, self.log = name, params, cooperative, log

    def __call__(self, grid, block, args):
        assert len(args) == len(self.params), f"{self.name}: {len(args)} args for {len(self.params)} params"
        for a, (ctype, ptr, pname) in zip(args, self.params):
            if ptr:
                assert isinstance(a, ndarray), f"{self.name}.{pname}: expected a device array, got {type(a)}"
                assert a.dtype == _PTR[ctype], f"{self.name}.{pname}: {ctype}* given {a.dtype}"
                assert a.flags.c_contiguous
            else:
                assert type(a) is _SCALAR[ctype], f"{self.name}.{pname}: {ctype} given {type(a).__name__}"
        (gx,), (bx,) = grid, block
        assert 1 <= bx <= 1024 and gx >= 1
        kw = {pname: a for a, (_, _, pname) in zip(args, self.params)}
        if "n" in kw and self.name in ("pearl_sample", "pearl_get"):
            assert gx * bx >= kw["n"], f"{self.name}: {gx}x{bx} threads for {kw['n']} items"
        if self.name == "pearl_update_block":
            assert gx == 1
        if self.name == "pearl_update_grid":
            assert self.cooperative
        self.log.append(self.name)
        getattr(self, "_" + self.name)(**kw)

    # ---- re-implementations from kernels/sumtree.cu
    @staticmethod
    def _descend(tree, off, levels, fanout, x):
        x = x.copy()
        j = np.zeros(x.shape[0], np.int64)
        for lvl in range(1, levels + 1):
            first = off[lvl] + j * fanout
            partial = np.zeros_like(x)
            chosen = np.full(x.shape[0], -1)
            last = np.zeros(x.shape[0], np.int64)
            for c in range(fanout):
                v = tree[first + c]
                last = np.where(v > 0, c, last)
                nxt = partial + v
                hit = (chosen < 0) & (nxt > x)
                partial = np.where((chosen < 0) & ~hit, nxt, partial)
                chosen = np.where(hit, c, chosen)
            miss = chosen < 0
            x = np.where(miss, np.inf, x - partial)
            j = j * fanout + np.where(miss, last, chosen)
        return j

    def _pearl_sample(self, tree, off, levels, fanout, mass_limit, masses, out, n, err):
        x = np.asarray(masses[:n])
        total = tree[0]
        if not total > 0:
            err[0] |= 8
            out[:n] = -1
            return
        limit = mass_limit if mass_limit >= 0 else total * (1.0 + 1e-6)
        ok = (x >= 0) & (x <= limit)
        if not ok.all():
            err[0] |= 4
        res = self._descend(np.asarray(tree), np.asarray(off), int(levels), int(fanout), np.where(ok, x, 0.0))
        out[:n] = np.where(ok, res, -1)

    def _pearl_get(self, tree, leaf_off, capacity, idx, out, n, err):
        i = np.asarray(idx[:n])
        ok = (i >= 0) & (i < capacity)
        if not ok.all():
            err[0] |= 1
        out[:n] = np.where(ok, tree[leaf_off + np.where(ok, i, 0)], 0.0)

    def _pearl_update_claim(self, idx, n, capacity, owner, err):
        i = np.asarray(idx[:n])
        ok = (i >= 0) & (i < capacity)
        if not ok.all():
            err[0] |= 1
        k = np.arange(n)
        np.maximum.at(owner, i[ok], k[ok].astype(np.int32))

    def _pearl_update_leaves(self, tree, leaf_off, capacity, idx, prio, n, owner, err):
        i = np.asarray(idx[:n])
        ok = (i >= 0) & (i < capacity)
        k = np.flatnonzero(ok)
        win = k[owner[i[k]] == k]
        p = np.asarray(prio)[win]
        good = (p >= 0) & np.isfinite(p)
        if not good.all():
            err[0] |= 2
        tree[leaf_off + i[win[good]]] = p[good]
        owner[i[win]] = -1

    def _pearl_update_level(self, tree, off, level, fanout, span, capacity, idx, n):
        i = np.asarray(idx[:n])
        i = i[(i >= 0) & (i < capacity)]
        j = np.unique(i // span)
        s = np.zeros(j.shape[0])
        for c in range(fanout):
            s = s + tree[off[level + 1] + j * fanout + c]
        tree[off[level] + j] = s

    def _pearl_update_block(self, tree, off, spans, levels, fanout, capacity, idx, prio, n, owner, err):
        self._pearl_update_claim(idx, n, capacity, owner, err)
        self._pearl_update_leaves(tree, off[levels], capacity, idx, prio, n, owner, err)
        for lvl in range(int(levels) - 1, -1, -1):
            self._pearl_update_level(tree, off, lvl, fanout, spans[lvl], capacity, idx, n)

    _pearl_update_grid = _pearl_update_block

    def _pearl_rebuild_level(self, tree, off, level, fanout, nodes):
        j = np.arange(nodes)
        s = np.zeros(nodes)
        for c in range(fanout):
            s = s + tree[off[level + 1] + j * fanout + c]
        tree[off[level] + j] = s


class RawModule:
    launches: list[str] = []

    def __init__(self, code, options=(), enable_cooperative_groups=False, **_):
        self.sigs = parse_signatures(code)
        self.coop = enable_cooperative_groups
        assert "#include \"sumtree.cu\"" not in code

    def get_function(self, name):
        assert name in self.sigs, f"no kernel {name} in the source"
        return FakeKernel(name, self.sigs[name], self.coop, RawModule.launches)


class _Device:
    def __init__(self, i=0):
        self.id = i

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


cuda = types.SimpleNamespace(
    Device=_Device,
    Stream=Stream,
    ExternalStream=ExternalStream,
    Event=Event,
    get_current_stream=get_current_stream,
    alloc_pinned_memory=alloc_pinned_memory,
    get_cuda_path=lambda: None,
    runtime=types.SimpleNamespace(getDeviceCount=lambda: 1,
                                  getDeviceProperties=lambda i: {"name": b"Fake GPU", "totalGlobalMem": 2**30,
                                                                 "major": 9, "minor": 0, "multiProcessorCount": 4,
                                                                 "cooperativeLaunch": 1}),
)
__file__ = __file__  # kernels.load reads os.path.dirname(cupy.__file__)
