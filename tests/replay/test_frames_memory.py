"""The frame pool's memory: what the start-up check counts is what a frame storage holds, however long it runs."""

from __future__ import annotations

import resource
import sys

import numpy as np
import pytest

from pearl_core.replay.frames import FrameStorage, frame_storage_bytes, storage_row_bytes
from pearl_core.replay.memory import StorageMemoryError
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
    assert frames.nbytes <= counted  # the pool is allocated at its bound, at the start: nothing is allocated later
    add_all((frames, plain), stacked_rows(3 * capacity + 7, seed=1), batch=32)
    # Filled past capacity, the overwritten transitions' frames are reused: the pool's high-water mark (what
    # it occupies) stays at the typical 1.1 frames per transition of 12-step episodes, under the bound ...
    assert frames._touched <= 1.1 * capacity + 32 * F, frames._touched
    assert frames.resident_bytes <= capacity * storage_row_bytes(SPEC, True) + 32 * F * (H * W + 8)
    assert frames.nbytes <= counted, (frames.nbytes, counted)
    # ... the bound is far below a plain storage's size, and the content is exact.
    assert counted < 0.4 * capacity * storage_row_bytes(SPEC, False)
    idx = np.arange(capacity)
    for name in ("obs", "next_obs"):
        np.testing.assert_array_equal(getattr(frames.gather(idx), name), getattr(plain.gather(idx), name))


def test_the_machine_check_counts_the_frame_pool_at_its_bound(monkeypatch):
    import gymnasium as gym

    from pearl_core.errors import SpecError
    from pearl_core.runtime import machine
    from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan

    class Frames(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (F, H, W), np.uint8)
        action_space = gym.spaces.Discrete(3)

    monkeypatch.setattr(machine, "address_space_limit", lambda: None)  # whatever ulimit -v this test runs under
    gym.register("PearlTestFrames-v0", entry_point=Frames)
    try:
        capacity = 5_000
        cfg = RunConfig(env_id="PearlTestFrames-v0", trainer="DQN", replay=ReplayConfig(capacity=capacity))
        plan = RuntimePlan()
        # the actor slots and batches carry whole stacks (the plain row); the Data Storage is the pool's bound
        parts = machine.host_memory_bytes(cfg, plan, storage_row_bytes(SPEC, False),
                                          frame_storage_bytes(SPEC, capacity))
        need = sum(parts.values())
        typical = need - parts["Data Storage"] + capacity * storage_row_bytes(SPEC, True)  # 1.1 frames a transition
        assert typical < 0.8 * need
        storage = f"{parts['Data Storage'] / 2**20:,.1f} MiB"
        for short in (typical, need - 1):  # the typical estimate, or a byte less than the worst case: refused
            with pytest.raises(SpecError, match=rf"needs about [0-9.]+ GiB of host memory \(Data Storage \(frame "
                                                rf"storage, counted at its frame pool's bound\) {storage}, .*"
                                                rf"Fix: a smaller replay capacity \(about [0-9,]+ would fill"):
                machine.check_machine(cfg, plan, memory_bytes=short)
        machine.check_machine(cfg, plan, memory_bytes=need)
    finally:
        gym.registry.pop("PearlTestFrames-v0", None)


# ---------------------------------------------------------------------------- the worst case: short episodes
TINY = StorageSpec((F, 16, 16), np.uint8, (), np.int64)


def short_episode_rows(steps: int, seed: int, longest: int):
    """Episodes of 1 to ``longest`` steps (an environment that terminates at once): every few transitions a
    new reset stack (its reset frame repeated, as gymnasium's FrameStackObservation pads)."""
    rng = np.random.default_rng(seed)
    frame = lambda: rng.integers(0, 256, (16, 16), dtype=np.uint8)  # noqa: E731
    rows, stack, left = [], None, 0
    for _ in range(steps):
        if left == 0:
            stack, left = np.stack([frame()] * F), int(rng.integers(1, longest + 1))
        nxt = np.concatenate([stack[1:], frame()[None]])
        left -= 1
        rows.append((stack, nxt, left == 0))
        stack = nxt
    return rows


@pytest.mark.parametrize("longest", [1, 2])
def test_short_episodes_past_capacity_never_hold_more_than_the_startup_check_counts(longest):
    capacity = 2_000
    frames, plain = FrameStorage(TINY, capacity), DataStorage(TINY, capacity)
    counted = frame_storage_bytes(TINY, capacity)
    rows = short_episode_rows(3 * capacity + 11, seed=4, longest=longest)
    peak = frames.nbytes
    for i in range(0, len(rows), 48):  # the ring wraps three times
        add_all((frames, plain), rows[i:i + 48], batch=48)
        peak = max(peak, frames.nbytes)
    # episodes of one step cost 2 frames per transition, of 1-2 steps about 1.7 (the typical estimate is 1.1):
    # accepted, and never more than the start-up check counted
    assert frames.frames_per_transition > (1.99 if longest == 1 else 1.5), frames.frames_per_transition
    assert frames.resident_bytes > capacity * storage_row_bytes(TINY, True)  # beyond the typical estimate
    assert peak <= counted, (peak, counted)
    idx = np.arange(capacity)
    for name in ("obs", "next_obs", "done"):
        np.testing.assert_array_equal(getattr(frames.gather(idx), name), getattr(plain.gather(idx), name))


def test_content_beyond_the_bound_is_refused_in_its_first_adds_and_changes_nothing():
    capacity = 2_000
    frames, plain = FrameStorage(TINY, capacity), DataStorage(TINY, capacity)
    rng = np.random.default_rng(7)

    def random_rows(n):  # stacks that share no frame (not frames of a stack): 8 frames a transition
        obs = rng.integers(0, 256, (2, n, F, 16, 16), dtype=np.uint8)
        return [(obs[0, i], obs[1, i], False) for i in range(n)]

    with pytest.raises(StorageMemoryError) as refused:
        for _ in range(capacity // 32):
            rows = random_rows(32)
            before = (frames.size, frames.cursor, frames.frames_in_use, frames._refs.copy(), frames._index.copy())
            add_all((frames,), rows, batch=32)
            add_all((plain,), rows, batch=32)
    # refused in its first adds (not when the replay has filled), the refused add changed nothing
    assert frames.size < capacity // 4, frames.size
    assert (frames.size, frames.cursor, frames.frames_in_use) == before[:3]
    np.testing.assert_array_equal(frames._refs, before[3])
    np.testing.assert_array_equal(frames._index, before[4])
    idx = np.arange(frames.size)
    np.testing.assert_array_equal(frames.gather(idx).obs, plain.gather(idx).obs)
    assert frames.nbytes <= frame_storage_bytes(TINY, capacity)
    text = str(refused.value)
    for part in (f"FrameStorage of capacity {capacity:,}", f"{frames.pool_frames:,} frames",
                 "what the start-up memory check counted", "Nothing was changed", "frame_storage='off'"):
        assert part in text, text
    # with the bound of a plain storage's frames, any content is accepted (and counted as such)
    wide = FrameStorage(TINY, capacity, max_frames_per_transition=None)
    add_all((wide,), random_rows(capacity + 5), batch=64)
    assert wide.size == capacity and wide.nbytes <= frame_storage_bytes(TINY, capacity, 2 * F)


def resident() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_the_pool_is_mapped_at_its_bound_but_occupies_only_the_frames_written():
    spec = StorageSpec((4, 84, 84), np.uint8, (), np.int64)
    before = resident()
    frames = FrameStorage(spec, 20_000)
    assert frames.nbytes > 250 * 2**20  # the bound: 2 frames of 7 KB per transition, mapped at once
    rows = stacked_rows(64, seed=2)  # 36x36 frames: grow them to 84x84 by tiling
    obs = np.stack([np.tile(r[0], (1, 3, 3))[:, :84, :84] for r in rows])
    nxt = np.stack([np.tile(r[1], (1, 3, 3))[:, :84, :84] for r in rows])
    frames.add(obs, np.zeros(64, np.int64), np.ones(64, np.float32), nxt, np.zeros(64, bool))
    grown = resident() - before
    # zero pages until written: the pool occupies the frames it took (about 70 of 40,000), not its bound
    assert grown < 0.1 * frames.nbytes, (grown, frames.nbytes)
    assert frames.resident_bytes < 0.1 * frames.nbytes
