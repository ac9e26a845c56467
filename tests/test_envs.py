"""Integer (image) observations must have exactly their space's dtype: never cast with wrap-around."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from pearl_core.envs import make_env
from pearl_core.errors import InvalidDTypeError, PearlError

SHAPE = (4, 10, 10)


class Frames(gym.Env):
    """A uint8 image env that returns its frames as ``dtype`` (281 where they overflow uint8)."""

    observation_space = gym.spaces.Box(0, 255, SHAPE, np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, dtype: str = "uint8", value: float = 7):
        self.dtype, self.value, self.t = np.dtype(dtype), value, 0

    def reset(self, seed=None, options=None):
        self.t = 0
        return np.full(SHAPE, 7, np.uint8), {}

    def step(self, action):
        self.t += 1
        return np.full(SHAPE, self.value).astype(self.dtype), 1.0, self.t >= 8, False, {}


@pytest.fixture(autouse=True, scope="module")
def frames_env():
    gym.register("PearlTestFrames-v1", entry_point=Frames)
    yield
    gym.registry.pop("PearlTestFrames-v1", None)


@pytest.mark.parametrize("dtype,value,found", [("int64", 281, "dtype int64, values in [281, 281]"),
                                               ("float32", 12.0, "dtype float32, values in [12.0, 12.0]"),
                                               ("int16", 5, "dtype int16, values in [5, 5]")])
def test_frames_of_another_dtype_are_refused_naming_env_and_dtype(dtype, value, found):
    env = make_env("PearlTestFrames-v1", kwargs={"dtype": dtype, "value": value}, wrappers=())
    env.reset(seed=0)
    with pytest.raises(InvalidDTypeError) as info:
        env.step(0)
    msg = str(info.value)
    for text in ("environment 'PearlTestFrames-v1': step() returned", found, "expected uint8",
                 "281 is 25 as uint8", "Fix: return np.asarray(obs, dtype=np.uint8)"):
        assert text in msg, msg


def test_frames_of_the_exact_dtype_pass_and_float_spaces_are_not_checked():
    env = make_env("PearlTestFrames-v1", wrappers=())
    env.reset(seed=0)
    assert env.step(0)[0].dtype == np.uint8
    assert type(make_env("CartPole-v1")).__name__ != "ObservationDtypeGuard"


def test_a_run_stops_at_the_first_wrong_frame_instead_of_storing_it_wrapped(tmp_path):
    from pearl_core.runtime.config import ReplayConfig, RunConfig, StopCriteria
    from pearl_core.runtime.serial import SerialRuntime

    cfg = RunConfig(env_id="PearlTestFrames-v1", trainer="DQN", env_kwargs={"dtype": "int64", "value": 281},
                    env_wrappers=(), replay=ReplayConfig(capacity=64), batch_size=8, learning_starts=1_000,
                    stop=StopCriteria(max_env_steps=32), log_dir=str(tmp_path / "run"))
    with pytest.raises(PearlError, match="returned an observation that is a ndarray of dtype int64"):
        SerialRuntime(cfg, progress=False, plot=False).run()
