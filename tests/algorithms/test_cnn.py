"""Image observations: env families by name, the Atari and MinAtar presets, env options, a CNN DQN.

``make test`` installs the ``pixels`` extra (``ale-py`` with its ROMs, ``minatar``, OpenCV for the
Atari preprocessing). The Composer tests compose a plan for this machine, write the runtime program
with :func:`RuntimeGen` and run it in a fresh process for a few hundred env steps (the mechanism,
not learning), as ``tests/test_envs_continuous.py`` does for MuJoCo and Box2D.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from pearl_core.algorithms import DQN
from pearl_core.algorithms.cnn import ImageInput, conv_encoder
from pearl_core.composer import Composer, HardwareSpec, RuntimeGen, workload_for_env
from pearl_core.envs import default_wrappers, env_spaces, make_env
from pearl_core.errors import ComposerError, SpecError
from pearl_core.replay.storage import Batch
from pearl_core.runtime.checkpoint import load_checkpoint
from pearl_core.runtime.config import RunConfig

ROOT = Path(__file__).resolve().parents[2]
THIS_MACHINE = ROOT / "examples" / "hardware" / "this-machine.toml"

ale = pytest.importorskip("ale_py", reason="the Atari tests need ale-py (make test installs '.[pixels]')")
minatar = pytest.importorskip("minatar", reason="the MinAtar tests need minatar (make test installs '.[pixels]')")
pytest.importorskip("cv2", reason="the Atari preset needs OpenCV (make test installs '.[pixels]')")


# ---------------------------------------------------------------- families, presets, options


def test_families_register_themselves_and_apply_their_presets():
    assert default_wrappers("ALE/Pong-v5") == ("atari",)
    assert default_wrappers("MinAtar/Breakout-v1") == ("minatar",)
    assert default_wrappers("CartPole-v1") == ()
    obs, act = env_spaces("ALE/Pong-v5")
    assert (obs.shape, obs.dtype, act.n) == ((4, 84, 84), np.uint8, 6)
    obs, act = env_spaces("MinAtar/Breakout-v1")
    assert (obs.shape, obs.dtype, act.n) == ((4, 10, 10), np.uint8, 3)
    raw, _ = env_spaces("MinAtar/Breakout-v1", wrappers=())
    assert (raw.shape, raw.dtype) == ((10, 10, 4), np.bool_)


def test_minatar_preset_is_the_raw_grid_channels_first():
    raw = make_env("MinAtar/Breakout-v1", 3, wrappers=())
    pre = make_env("MinAtar/Breakout-v1", 3)
    a, _ = raw.reset(seed=3)
    b, _ = pre.reset(seed=3)
    for _ in range(30):
        np.testing.assert_array_equal(np.moveaxis(a, -1, 0).astype(np.uint8), b)
        act = raw.action_space.sample()
        a, *_ = raw.step(act)
        b, *_ = pre.step(act)


def test_atari_preset_stacks_four_frames_and_clips_rewards_for_training_only():
    train = make_env("ALE/Pong-v5", 0)
    evaluate = make_env("ALE/Pong-v5", 0, evaluation=True)
    for env in (train, evaluate):
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        prev = obs
        for _ in range(5):
            obs, *_ = env.step(0)
            # the stack shifts by one frame per step: the newest three of the last obs lead this one
            np.testing.assert_array_equal(obs[:3], prev[1:])
            prev = obs

    def wrappers(env):
        names = []
        while hasattr(env, "env"):
            names.append(type(env).__name__)
            env = env.env
        return names

    assert "TransformReward" in wrappers(train) and "EpisodicLife" in wrappers(train)
    assert "FireReset" in wrappers(train) and "FireReset" in wrappers(evaluate)  # Pong's actions include FIRE
    assert "TransformReward" not in wrappers(evaluate) and "EpisodicLife" not in wrappers(evaluate)


def test_episodic_life_ends_the_episode_on_a_lost_life_but_not_the_game():
    env = make_env("ALE/Breakout-v5", 0)
    env.reset(seed=0)
    ale_env = env.unwrapped
    start = ale_env.ale.lives()
    terminated = False
    for _ in range(5000):  # no FIRE: the ball is never launched in Breakout... launch it, then wait
        _, _, terminated, truncated, _ = env.step(1)
        if terminated or truncated:
            break
    assert terminated
    assert 0 < ale_env.ale.lives() < start  # a life lost, the game goes on
    env.reset()
    assert ale_env.ale.lives() == start - 1  # reset did not restart the game


def test_env_options_go_to_gymnasium_and_wrappers_by_import_path():
    env = make_env("CartPole-v1", kwargs={"max_episode_steps": 7},
                   wrappers=["gymnasium.wrappers:FlattenObservation"])
    env.reset(seed=0)
    steps = 0
    while True:
        steps += 1
        _, _, term, trunc, _ = env.step(0 if steps % 2 else 1)
        if term or trunc:
            break
    assert steps <= 7 and isinstance(env, gym.wrappers.FlattenObservation)


@pytest.mark.parametrize("kwargs,wrappers,needle", [
    ({"frameskip": 4}, None, "frameskip=1"),
    ({}, ["no-such-preset"], "preset name"),
    ({}, "atari", "a list of preset names"),
    ({}, ["no_such_module_xyz:f"], "cannot be imported"),
    ({}, ["gymnasium:__version__"], "not callable"),
    ({1: 2}, None, "str keys"),
    ({"x": float("nan")}, None, "JSON values"),
])
def test_bad_env_options_are_clear_errors(kwargs, wrappers, needle):
    env_id = "ALE/Pong-v5" if "frameskip" in kwargs else "CartPole-v1"
    with pytest.raises(SpecError, match=needle):
        make_env(env_id, kwargs=kwargs, wrappers=wrappers)


def test_run_config_carries_env_options_through_json():
    cfg = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", env_kwargs={"max_episode_steps": 50},
                    env_wrappers=["gymnasium.wrappers:FlattenObservation"])
    back = RunConfig.from_json(cfg.to_json())
    assert back == cfg and back.env_wrappers == ("gymnasium.wrappers:FlattenObservation",)
    assert RunConfig(env_id="ALE/Pong-v5", trainer="pearl_core.algorithms:DQN").env_wrappers is None
    with pytest.raises(SpecError, match="env_wrappers"):
        RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", env_wrappers=["bad"])


def test_composer_set_actors_checks_env_options():
    c = Composer(HardwareSpec.load(THIS_MACHINE))
    with pytest.raises(ComposerError, match="Composer.set_actors.env_wrappers"):
        c.set_actors("CartPole-v1", wrappers=[42])
    with pytest.raises(ComposerError, match="frameskip=1"):
        c.set_actors("ALE/Pong-v5", env_kwargs={"frameskip": 4})


# ---------------------------------------------------------------- the CNN DQN


def test_image_input_reads_channel_order_and_scale():
    chw = ImageInput(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), "t")
    assert (chw.chw, chw.channels_last, chw.scale) == ((4, 84, 84), False, 1 / 255)
    hwc = ImageInput(gym.spaces.Box(0, 255, (84, 84, 3), np.uint8), "t")
    assert (hwc.chw, hwc.channels_last) == ((3, 84, 84), True)
    grid = ImageInput(gym.spaces.Box(0, 1, (4, 10, 10), np.uint8), "t")
    assert grid.scale == 1.0
    x = np.random.default_rng(0).integers(0, 256, (2, 84, 84, 3), dtype=np.uint8)
    t = hwc.tensor(x, torch.device("cpu"))
    assert t.shape == (2, 3, 84, 84) and t.dtype == torch.float32
    np.testing.assert_allclose(t.numpy(), np.moveaxis(x, -1, 1) / 255.0, rtol=1e-6)
    with pytest.raises(SpecError, match="3-D image"):
        ImageInput(gym.spaces.Box(0, 1, (4,), np.float32), "t")


def test_encoders_match_their_papers():
    enc, features, kind = conv_encoder((4, 84, 84))
    assert kind == "nature" and features == 64 * 7 * 7
    assert [(m.out_channels, m.kernel_size, m.stride) for m in enc if isinstance(m, torch.nn.Conv2d)] == \
        [(32, (8, 8), (4, 4)), (64, (4, 4), (2, 2)), (64, (3, 3), (1, 1))]
    enc, features, kind = conv_encoder((4, 10, 10))
    assert kind == "small" and features == 16 * 8 * 8
    with pytest.raises(SpecError, match="at least 36x36"):
        conv_encoder((4, 10, 10), "nature")


@pytest.mark.parametrize("env_id", ["MinAtar/Breakout-v1", "ALE/Pong-v5"])
def test_cnn_dqn_update_matches_a_hand_written_step(env_id):
    """One update of the CNN DQN against the same math written out with torch here."""
    obs_space, act_space = env_spaces(env_id)
    torch.manual_seed(0)
    t = DQN(obs_space, act_space, seed=0, max_grad_norm=None, lr=1e-3)
    assert t.engine == "torch" and t.encoder == "cnn"
    ref_q = t.q_net  # the reference is computed before the step changes it
    rng = np.random.default_rng(1)
    B = 8
    obs = rng.integers(0, int(obs_space.high.max()) + 1, (B, *obs_space.shape), dtype=np.uint8)
    nxt = rng.integers(0, int(obs_space.high.max()) + 1, (B, *obs_space.shape), dtype=np.uint8)
    act = rng.integers(0, act_space.n, B)
    rew = rng.standard_normal(B).astype(np.float32)
    done = rng.random(B) < 0.3
    w = rng.uniform(0.5, 1.0, B).astype(np.float32)
    scale = t._image.scale
    with torch.no_grad():
        x, xn = (torch.from_numpy(a).float() * scale for a in (obs, nxt))
        y = torch.from_numpy(rew) + 0.99 * torch.from_numpy(~done).float() * t.target_net(xn).max(1).values
        q = ref_q(x).gather(1, torch.from_numpy(act).unsqueeze(1)).squeeze(1)
    res = t.update_policy(Batch(obs, act, rew, nxt, done), w)
    np.testing.assert_allclose(res.td_errors, (q - y).abs().numpy(), rtol=1e-5, atol=1e-6)
    assert np.isfinite(res.metrics["loss"])


def test_workload_reads_the_conv_layers_of_the_cnn_dqn():
    wl = workload_for_env("ALE/Pong-v5", 32, trainer=DQN)
    convs = [ly for ly in wl.layers if ly.kind == "conv2d"]
    assert len(convs) == 6  # three in the online net, three in the target net
    first = next(ly for ly in convs if ly.trainable)
    assert first.macs == 32 * 4 * 8 * 8 * 20 * 20  # out channels x in channels x kernel x 20x20 positions
    assert wl.obs_bytes == 4 * 84 * 84  # uint8 frames as stored


# ---------------------------------------------------------------- through the Composer

STEPS, STARTS = 400, 200


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["MinAtar/Breakout-v1", "ALE/Pong-v5"])
def test_cnn_dqn_trains_through_the_composer(tmp_path, env_id):
    c = Composer(HardwareSpec.load(THIS_MACHINE))
    c.set_actors(env_id, n_actors=1)
    c.set_train_function(DQN, batch_size=16, learning_starts=STARTS, replay_ratio=0.25, hidden_sizes=(32,),
                         target_update_every=50, total_env_steps=STEPS)
    c.set_replay("prioritized", capacity=2_000)
    c.set_stop(max_env_steps=STEPS, eval_every=10**6, eval_episodes=1)
    c.set_run(log_dir=str(tmp_path / "run"))
    plan = c.run(profile=False)
    assert plan.refusals == () and plan.runnable
    assert any(ly["kind"] == "conv2d" for ly in plan.plan.workload["layers"])
    program = RuntimeGen(plan, tmp_path / "runtime.py")
    out = subprocess.run([sys.executable, str(program), "--quiet"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["env_steps"] >= STEPS and result["stop_reason"] == "max_env_steps"
    assert 0 < result["updates"] <= (result["env_steps"] - STARTS) * 0.25 + 1
    trained = load_checkpoint(result["checkpoint_path"]).trainer_state
    fresh = DQN(*env_spaces(env_id), hidden_sizes=(32,)).state_dict()
    assert trained["updates"] == result["updates"]
    assert any(not torch.equal(fresh["q_net"][k], v) for k, v in trained["q_net"].items())
