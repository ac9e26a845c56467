"""Frame-efficient Data Storage (:mod:`pearl_core.replay.frames`): exact, and about one frame per transition.

The conformance suite runs on it against the host DataStorage (random rows: no frame is shared, every
value must come back); the tests below feed it real frame-stack streams (several environments
interleaved, episode ends, the ring wrapping around) and check every gathered stack against the frames
the stream produced, and the frames it holds per transition.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pearl_core.replay.frames import FrameStorage, frame_storage_fits
from pearl_core.replay.storage import DataStorage, StorageSpec
from pearl_core.testing import StorageConformance


class TestFrameStorageConformance(StorageConformance):
    def make_storage(self, spec, capacity):  # random rows share no frame: the bound of a plain storage's frames
        return FrameStorage(spec, capacity, max_frames_per_transition=None)


F, H, W = 4, 36, 36
SPEC = StorageSpec((F, H, W), np.uint8, (), np.int64)


def streams(n_envs: int, steps: int, seed: int, episode: tuple[int, int] = (5, 40), static: float = 0.0):
    """Transitions of ``n_envs`` frame-stacking environments stepped in turn, as actors produce them.

    Each environment emits random frames (sometimes a repeat of the last one, with probability
    ``static``); a stack is the last F frames, an episode's first stack repeats its reset frame
    (gymnasium's FrameStackObservation with padding 'reset'). Returns the rows in insertion order.
    """
    rng = np.random.default_rng(seed)
    rows = []
    state = []
    for _ in range(n_envs):
        first = rng.integers(0, 256, (H, W), dtype=np.uint8)
        state.append({"stack": np.stack([first] * F), "left": int(rng.integers(*episode))})
    for t in range(steps):
        e = t % n_envs
        s = state[e]
        if rng.random() < static:
            frame = s["stack"][-1].copy()
        else:
            frame = rng.integers(0, 256, (H, W), dtype=np.uint8)
        nxt = np.concatenate([s["stack"][1:], frame[None]])
        s["left"] -= 1
        done = s["left"] == 0
        rows.append((s["stack"].copy(), int(rng.integers(0, 6)), float(rng.standard_normal()), nxt, done))
        if done or rng.random() < 0.02:  # an episode's end, or a truncation: the env resets
            first = rng.integers(0, 256, (H, W), dtype=np.uint8)
            state[e] = {"stack": np.stack([first] * F), "left": int(rng.integers(*episode))}
        else:
            s["stack"] = nxt
    return rows


def add_in_batches(storages, rows, rng, most: int = 40):
    i = 0
    while i < len(rows):
        k = int(rng.integers(1, most))
        chunk = rows[i:i + k]
        cols = [np.stack([r[j] for r in chunk]) if j in (0, 3) else np.array([r[j] for r in chunk])
                for j in range(5)]
        cols[2] = cols[2].astype(np.float32)
        for s in storages:
            s.add(*cols)
        i += k


@pytest.mark.parametrize("n_envs,capacity,static", [(1, 500, 0.0), (3, 257, 0.0), (8, 100, 0.3), (2, 64, 0.9)])
def test_gathered_stacks_equal_the_frames_the_envs_produced(n_envs, capacity, static):
    rows = streams(n_envs, 1_500, seed=n_envs, static=static)
    frames, plain = FrameStorage(SPEC, capacity), DataStorage(SPEC, capacity)
    rng = np.random.default_rng(7)
    add_in_batches((frames, plain), rows, rng)
    assert frames.size == plain.size == capacity and frames.cursor == plain.cursor
    idx = np.arange(capacity)
    got, want = frames.gather(idx), plain.gather(idx)
    for name in ("obs", "action", "reward", "next_obs", "done"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    # ... and the slots hold the last `capacity` rows of the streams, across episode ends and wrap-around
    order = (np.arange(capacity) - plain.cursor) % capacity  # slot -> age rank
    last = rows[-capacity:]
    for slot in range(0, capacity, 7):
        np.testing.assert_array_equal(got.obs[slot], last[order[slot]][0])
        np.testing.assert_array_equal(got.next_obs[slot], last[order[slot]][3])


def test_about_one_frame_per_transition():
    rows = streams(4, 6_000, seed=3, episode=(100, 300))
    frames = FrameStorage(SPEC, 2_000)
    add_in_batches((frames,), rows, np.random.default_rng(0))
    per = frames.frames_per_transition
    # one new frame per step, plus each episode's first stack (one frame: its repeats are shared)
    assert 1.0 <= per <= 1.1, per
    plain_bytes = 2 * F * H * W * frames.capacity
    frame_bytes = frames.frames_in_use * H * W
    assert frame_bytes <= 0.14 * plain_bytes


def test_frames_return_to_the_pool_and_it_does_not_grow_in_steady_state():
    rows = streams(2, 4_000, seed=5, episode=(50, 80))
    frames = FrameStorage(SPEC, 300)
    add_in_batches((frames,), rows[:1_000], np.random.default_rng(1))
    pool = frames.pool_frames
    add_in_batches((frames,), rows[1_000:], np.random.default_rng(2))
    assert frames.pool_frames == pool  # overwritten transitions gave their frames back
    assert frames.frames_in_use == int((frames._refs > 0).sum())
    # every held frame's count equals the references the stored transitions make
    counts = np.bincount(frames._index.reshape(-1), minlength=frames.pool_frames)
    np.testing.assert_array_equal(frames._refs, counts)


def test_bad_rows_change_nothing():
    frames = FrameStorage(SPEC, 50)
    add_in_batches((frames,), streams(1, 60, seed=1), np.random.default_rng(0))
    before = (frames.size, frames.cursor, frames.frames_in_use, frames._refs.copy(), frames._index.copy())
    obs = np.zeros((3, F, H, W), np.uint8)
    with pytest.raises(Exception):
        frames.add(obs, np.zeros(3, np.int64), np.array([0.0, np.nan, 0.0]), obs, np.zeros(3, bool))
    after = (frames.size, frames.cursor, frames.frames_in_use, frames._refs, frames._index)
    assert before[:3] == after[:3]
    np.testing.assert_array_equal(before[3], after[3])
    np.testing.assert_array_equal(before[4], after[4])


def test_auto_choice_is_for_stacked_frames_only():
    assert frame_storage_fits(StorageSpec((4, 84, 84), np.uint8, (), np.int64))
    assert not frame_storage_fits(StorageSpec((4, 10, 10), np.uint8, (), np.int64))  # MinAtar's channels
    assert not frame_storage_fits(StorageSpec((4,), np.float32, (), np.int64))
    assert not frame_storage_fits(StorageSpec((3, 84, 84), np.float32, (), np.int64))


def test_the_replay_stores_atari_frames_once_and_the_memory_check_counts_them():
    pytest.importorskip("ale_py", reason="needs the pixels extra (make test installs it)")
    pytest.importorskip("cv2", reason="needs the pixels extra (make test installs it)")
    from pearl_core.envs import env_spaces
    from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan
    from pearl_core.runtime.machine import check_machine, row_bytes
    from pearl_core.runtime.wiring import build_replay

    spec = StorageSpec.from_spaces(*env_spaces("ALE/Pong-v5"))
    cfg = RunConfig(env_id="ALE/Pong-v5", trainer="pearl_core.algorithms:DQN", replay=ReplayConfig(capacity=1000))
    assert type(build_replay(cfg, RuntimePlan(), spec).storage) is FrameStorage
    off = RunConfig(env_id="ALE/Pong-v5", trainer="pearl_core.algorithms:DQN",
                    replay=ReplayConfig(capacity=1000, frame_storage="off"))
    assert type(build_replay(off, RuntimePlan(), spec).storage) is DataStorage
    plain, framed = row_bytes("ALE/Pong-v5", "off"), row_bytes("ALE/Pong-v5", "auto")
    assert plain == 2 * 4 * 84 * 84 + 8 + 4 + 1 + 4  # obs, next_obs, action, reward, done, steps
    assert framed < 0.15 * plain
    # 1M Atari transitions: ~56 GB plain, ~8 GB as frames; the check before a run says so with the fix
    big = RunConfig(env_id="ALE/Pong-v5", trainer="pearl_core.algorithms:DQN",
                    replay=ReplayConfig(capacity=1_000_000, frame_storage="off"), log_dir="/tmp/pearl-frames-check")
    with pytest.raises(Exception, match="smaller replay capacity"):
        check_machine(big, RuntimePlan(), memory_bytes=20 * 2**30)
    check_machine(dataclasses.replace(big, replay=ReplayConfig(capacity=1_000_000)), RuntimePlan(),
                  memory_bytes=20 * 2**30)


def test_replay_state_round_trip_keeps_every_stack():
    from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan
    from pearl_core.runtime.wiring import build_replay, replay_state

    cfg = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN",
                    replay=ReplayConfig(capacity=120, frame_storage="on"))
    replay = build_replay(cfg, RuntimePlan(), SPEC)
    assert type(replay.storage) is FrameStorage
    add_in_batches((replay.storage,), streams(3, 300, seed=9), np.random.default_rng(3))
    state = replay_state(replay)
    back = build_replay(cfg, RuntimePlan(), SPEC, state=state)
    idx = np.arange(replay.storage.size)
    a, b = replay.storage.gather(idx), back.storage.gather(idx)
    for name in ("obs", "action", "reward", "next_obs", "done"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert back.storage.cursor == replay.storage.cursor
    assert back.storage.frames_per_transition < 1.3  # restored rows share their frames again
