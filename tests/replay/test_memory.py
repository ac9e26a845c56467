"""Allocation failures of the replay's storage (a ``ulimit -v`` below its need) are a StorageMemoryError."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import resource
    import numpy as np
    from pearl_core.replay.frames import FrameStorage
    from pearl_core.replay.storage import DataStorage, StorageSpec
    from pearl_core.replay.memory import StorageMemoryError

    def vm_bytes():
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * resource.getpagesize()

    limit = vm_bytes() + 256 * 2**20   # 256 MiB more than this process maps now: a `ulimit -v`
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
    spec = StorageSpec((4, 84, 84), np.uint8, (), np.int64)
    for make in (lambda: DataStorage(spec, 100_000), lambda: FrameStorage(spec, 200_000)):
        try:
            make()
        except StorageMemoryError as exc:
            assert isinstance(exc, MemoryError)
            print("REFUSED", exc)
        else:
            print("ALLOCATED")
    # fits: its frame pool is mapped at its bound now, nothing of it is allocated later. Episodes of one
    # step cost 2 frames a transition, not the typical 1.1: a pool sized for 1.1 had to grow here.
    small = FrameStorage(spec, 8_000)
    rng = np.random.default_rng(0)
    one = (np.zeros(64, np.int64), np.ones(64, np.float32), np.ones(64, bool))
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + 32 * 2**20, resource.RLIM_INFINITY))  # no room for a pool
    try:
        for _ in range(9_000 // 64):
            obs = np.repeat(rng.integers(0, 256, (64, 1, 84, 84), dtype=np.uint8), 4, axis=1)
            nxt = obs.copy()
            nxt[:, -1] = rng.integers(0, 256, (64, 84, 84), dtype=np.uint8)
            small.add(obs, one[0], one[1], nxt, one[2])
        print("ADDED", small.size, round(small.frames_per_transition, 2))
    except MemoryError as exc:
        print("ADD REFUSED", small.size, exc)
""")


def test_a_replay_beyond_the_address_space_limit_is_a_pearl_error_naming_size_and_fix():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines[:2]] == ["REFUSED", "REFUSED"], out.stdout
    plain, frames = lines[0], lines[1]
    assert "DataStorage of capacity 100,000" in plain and "(5,646,500,000 bytes)" in plain, plain  # 56,465 B a row
    assert "FrameStorage of capacity 200,000: the frame pool (2 frames per transition" in frames, frames
    for text in ("ulimit -v", "Fix: a smaller replay capacity", "frame_storage='on'", "Nothing was changed"):
        assert text in plain, plain
    # the short episodes' frames fit in the pool mapped at the start: no add allocated (or was refused)
    assert lines[2] == "ADDED 8000 2.0", lines[2]
