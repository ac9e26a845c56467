"""frame_storage="auto" picks frame storage for real frame stacks only (pearl_core.runtime.framesprobe).

A single channels-first RGB image has a frame stack's shape; a frame pool refuses its content (it holds
at most 2 frames per transition), so "auto" must store such observations whole, and decide it before the
run places its storage, not at the first add.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan
from pearl_core.runtime.framesprobe import frames_are_stacked, resolve_frame_storage
from pearl_core.runtime.wiring import build_replay
from pearl_core.replay.frames import FrameStorage
from pearl_core.replay.storage import StorageSpec


class _Frames(gym.Env):
    """Random 32x32 uint8 frames, ``channels`` of them per observation (no stacking)."""

    def __init__(self, channels: int = 1):
        shape = (32, 32) if channels == 1 else (channels, 32, 32)
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self._rng = np.random.default_rng(0)

    def _obs(self):
        return self._rng.integers(0, 256, self.observation_space.shape, dtype=np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        return self._obs(), 0.0, False, False, {}


def _stacked(**_):
    return gym.wrappers.FrameStackObservation(_Frames(1), stack_size=4)


gym.register("PearlProbeStack-v0", entry_point=_stacked, max_episode_steps=50)
gym.register("PearlProbeRGB-v0", entry_point=lambda **_: _Frames(3), max_episode_steps=50)


def _config(env_id, frame_storage="auto"):
    return RunConfig(env_id=env_id, trainer="pearl_core.algorithms:DQN",
                     replay=ReplayConfig("uniform", capacity=256, frame_storage=frame_storage), batch_size=8)


def test_a_stack_of_frames_is_stored_frame_by_frame():
    assert frames_are_stacked("PearlProbeStack-v0", '{"kwargs": {}, "wrappers": []}')
    cfg = dataclasses.replace(_config("PearlProbeStack-v0"), env_wrappers=[])
    assert resolve_frame_storage(cfg) == "on"


def test_an_rgb_image_with_a_stacks_shape_is_stored_whole_and_said_so(caplog):
    cfg = dataclasses.replace(_config("PearlProbeRGB-v0"), env_wrappers=[])
    with caplog.at_level("INFO", logger="pearl_core.runtime.framesprobe"):
        assert resolve_frame_storage(cfg) == "off"
    assert "are not stacks of frames" in caplog.text
    obs = gym.spaces.Box(0, 255, (3, 32, 32), np.uint8)
    replay = build_replay(cfg, RuntimePlan(), StorageSpec.from_spaces(obs, gym.spaces.Discrete(2)))
    assert not isinstance(replay.storage, FrameStorage)
    rng = np.random.default_rng(1)
    rows = rng.integers(0, 256, (64, 3, 32, 32), dtype=np.uint8)
    replay.add(rows, np.zeros(64, np.int64), np.zeros(64, np.float32), rows[::-1].copy(), np.zeros(64, bool))
    assert replay.size == 64  # the content a frame pool would refuse is stored


@pytest.mark.parametrize("mode", ["on", "off"])
def test_an_explicit_choice_is_kept_without_a_probe(mode, monkeypatch):
    monkeypatch.setattr("pearl_core.runtime.framesprobe.frames_are_stacked",
                        lambda *a: pytest.fail("probed an explicit choice"))
    assert resolve_frame_storage(_config("CartPole-v1", mode)) == mode


def test_observations_without_a_stacks_shape_are_never_probed(monkeypatch):
    monkeypatch.setattr("pearl_core.runtime.framesprobe.frames_are_stacked",
                        lambda *a: pytest.fail("probed CartPole"))
    assert resolve_frame_storage(_config("CartPole-v1")) == "off"
