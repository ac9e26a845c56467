"""The frame pool's memory: what the start-up check counts is what a frame storage holds, however long it runs."""

from __future__ import annotations

import numpy as np
import pytest

from pearl_core.replay.frames import FrameStorage, frame_storage_bytes, storage_row_bytes
from pearl_core.replay.storage import DataStorage, StorageSpec

F, H, W = 4, 36, 36
SPEC = StorageSpec((F, H, W), np.uint8, (), np.int64)


def stacked_rows(steps: int, seed: int, episode: int = 12):
    """One frame-stacking environment's transitions (an episode's first stack repeats its reset frame)."""
    rng = np.random.default_rng(seed)
    frame = lambda: rng.integers(0, 256, (H, W), dtype=np.uint8)  # noqa: E731
    stack, left, rows = np.stack([frame()] * F), episode, []
    for _ in range(steps):
        nxt = np.concatenate([stack[1:], frame()[None]])
        left -= 1
        rows.append((stack, nxt, left == 0))
        stack, left = (np.stack([frame()] * F), episode) if left == 0 else (nxt, left)
    return rows


def add_all(storages, rows, batch: int):
    for i in range(0, len(rows), batch):
        chunk = rows[i:i + batch]
        cols = (np.stack([r[0] for r in chunk]), np.zeros(len(chunk), np.int64), np.ones(len(chunk), np.float32),
                np.stack([r[1] for r in chunk]), np.array([r[2] for r in chunk]))
        for s in storages:
            s.add(*cols)


def test_a_frame_storage_filled_three_times_over_holds_what_the_startup_check_counts():
    capacity = 600
    frames, plain = FrameStorage(SPEC, capacity), DataStorage(SPEC, capacity)
    counted = frame_storage_bytes(SPEC, capacity)
    start_pool = frames.pool_frames
    assert frames.nbytes <= counted
    add_all((frames, plain), stacked_rows(3 * capacity + 7, seed=1), batch=32)
    # Filled past capacity, the overwritten transitions' frames are reused: the pool did not grow (it
    # doubled before), and the storage holds no more than the start-up check counted ...
    assert frames.pool_frames == start_pool, (frames.pool_frames, start_pool)
    assert frames.nbytes <= counted, (frames.nbytes, counted)
    # ... which is close to what it needs (not the plain storage's size), and the content is exact.
    assert counted < 0.4 * capacity * storage_row_bytes(SPEC, False)
    idx = np.arange(capacity)
    for name in ("obs", "next_obs"):
        np.testing.assert_array_equal(getattr(frames.gather(idx), name), getattr(plain.gather(idx), name))


def test_the_machine_check_counts_the_frame_pool(monkeypatch):
    import gymnasium as gym

    from pearl_core.errors import SpecError
    from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan
    from pearl_core.runtime.machine import check_machine, host_memory_bytes

    class Frames(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (F, H, W), np.uint8)
        action_space = gym.spaces.Discrete(3)

    gym.register("PearlTestFrames-v0", entry_point=Frames)
    try:
        capacity = 5_000
        cfg = RunConfig(env_id="PearlTestFrames-v0", trainer="DQN", replay=ReplayConfig(capacity=capacity))
        plan = RuntimePlan()
        per_row = host_memory_bytes(cfg, plan, storage_row_bytes(SPEC, True))  # capacity * row: what it counted
        old = sum(per_row.values())
        need = old - per_row["Data Storage"] + frame_storage_bytes(SPEC, capacity)
        assert need > old
        with pytest.raises(SpecError, match="host memory"):
            check_machine(cfg, plan, memory_bytes=old + 1)
        check_machine(cfg, plan, memory_bytes=need + 1)
    finally:
        gym.registry.pop("PearlTestFrames-v0", None)



