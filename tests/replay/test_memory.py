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
    small = FrameStorage(spec, 4_000)   # fits; content that shares no frame then makes its pool grow
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 256, (2, 64, 4, 84, 84), dtype=np.uint8) for _ in range(12)]
    one = (np.zeros(64, np.int64), np.ones(64, np.float32), np.zeros(64, bool))
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes(), resource.RLIM_INFINITY))  # no more room at all
    pool, size = small.pool_frames, 0
    try:
        for obs, nxt in batches:
            small.add(obs, one[0], one[1], nxt, one[2])
            size += 64
        print("GREW", pool, small.pool_frames)
    except StorageMemoryError as exc:
        print("GROWTH REFUSED", small.size == size, exc)
""")


def test_a_replay_beyond_the_address_space_limit_is_a_pearl_error_naming_size_and_fix():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines[:2]] == ["REFUSED", "REFUSED"], out.stdout
    plain, frames = lines[0], lines[1]
    assert "DataStorage of capacity 100,000" in plain and "(5,646,500,000 bytes)" in plain, plain  # 56,465 B a row
    assert "FrameStorage of capacity 200,000: the frame pool needs" in frames, frames
    for text in ("ulimit -v", "Fix: a smaller replay capacity", "frame_storage='on'", "Nothing was changed"):
        assert text in plain, plain
    grown = lines[2]
    # the add whose pool growth failed changed nothing (the adds before it stand)
    assert grown.startswith("GROWTH REFUSED True FrameStorage of capacity 4,000: a larger frame pool needs"), grown
