"""From one command to a policy in use, as a user drives it: `pearl train`, `pearl eval --video`, load_policy,
evaluate_policy, export, `pearl train --resume`, and a rerun that keeps the earlier run (issue 41's acceptance).

Three workloads: DQN on CartPole-v1, SAC on Pendulum-v1, and DQN on a user's env named `module:Env-v0`
(a module in the working directory that registers it on import). Budgets are tiny: these check the
mechanism; learning targets are measured by benchmarks.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 3_000

USER_ENV = '''\
"""A user's env module: importing it registers PearlUserCartPole-v0 (a CartPole with 200-step episodes)."""
import gymnasium

gymnasium.register("PearlUserCartPole-v0", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
                   max_episode_steps=200)
'''

#: algo, env, env-step budget of the first run (the resume doubles it), extra options. DQN CartPole is the
#: acceptance command as written; SAC (one update of batch 256 per step) and the user env take smaller budgets.
WORKLOADS = {
    "dqn-cartpole": ("dqn", "CartPole-v1", BUDGET, ()),
    "sac-pendulum": ("sac", "Pendulum-v1", 1_000, ("--no-profile",)),
    "dqn-user-env": ("dqn", "pearl_user_envs:PearlUserCartPole-v0", 1_500, ("--no-profile",)),
}


def pearl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The `pearl` console script of this environment, as a user runs it."""
    script = Path(sys.executable).with_name("pearl")
    cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "pearl_core.cli"]
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("PYTHONPATH", None)
    return subprocess.run([*cmd, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def digest(directory: Path) -> dict[str, str]:
    return {p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("train-cli")
    (root / "pearl_user_envs.py").write_text(USER_ENV)
    return root


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_train_eval_video_policy_export_resume(name, work, monkeypatch):
    import torch

    from pearl_core import evaluate_policy, load_policy

    algo, env_id, budget, extra = WORKLOADS[name]
    monkeypatch.syspath_prepend(str(work))  # the user's env module, for load_policy in this process
    run_dir = work / name
    trained = pearl("train", "--algo", algo, "--env", env_id, "--max-env-steps", str(budget), "--log-dir",
                    str(run_dir), "--quiet", *extra, cwd=work)
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    assert "Choice:" in trained.stdout and str(run_dir) in trained.stdout
    if algo == "dqn" and env_id == "CartPole-v1":
        assert "preset rl-zoo dqn CartPole-v1" in trained.stdout  # the preset, printed
    result = json.loads((run_dir / "result.json").read_text())
    assert result["env_steps"] >= budget and (run_dir / "checkpoint.pt").is_file()
    assert (run_dir / "runtime.py").is_file()  # the program, kept with the run

    # pearl eval, with a video per episode; a run that names a user's module needs it trusted (importing runs it)
    videos = work / f"{name}-videos"
    user = ":" in env_id
    if user:
        refused = pearl("eval", str(run_dir), "--episodes", "1", cwd=work)
        assert refused.returncode != 0 and "--trust-checkpoint" in refused.stdout + refused.stderr
    trust = ("--trust-checkpoint",) if user else ()
    evaluated = pearl("eval", str(run_dir), "--episodes", "3", "--video", str(videos), *trust, cwd=work)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "3 episode(s)" in evaluated.stdout and "±" in evaluated.stdout
    import imageio_ffmpeg

    files = sorted(videos.glob("*.mp4"))
    assert [f.name for f in files] == ["episode-0.mp4", "episode-1.mp4", "episode-2.mp4"]
    for f in files:
        frames, _ = imageio_ffmpeg.count_frames_and_secs(str(f))
        assert frames >= 2
    shown = float(evaluated.stdout.split("mean return ")[1].split(" ")[0])

    # the policy in Python: one observation, a batch, evaluate, export
    policy = load_policy(run_dir, trust_modules=user)
    space = policy.observation_space
    space.seed(3)
    one = space.sample()
    batch = np.stack([space.sample() for _ in range(5)])
    a = policy.predict(one)
    b = policy.predict(batch)
    assert policy.action_space.contains(a if policy.discrete else a.astype(policy.action_space.dtype))
    assert len(b) == 5 and all(policy.action_space.contains(x) for x in b)
    mean, std = evaluate_policy(policy, n_episodes=3, seed=0)
    assert np.isfinite(mean) and np.isfinite(std)
    assert mean == pytest.approx(shown, abs=0.006)  # the video episodes are evaluate_policy's episodes
    ts = policy.export(work / f"{name}.pt", format="torchscript")
    with torch.no_grad():
        got = torch.jit.load(str(ts))(torch.from_numpy(batch.astype(np.float32))).numpy()
    ort = pytest.importorskip("onnxruntime", reason="the ONNX check needs onnxruntime (pearl-core[export])")
    onnx_path = policy.export(work / f"{name}.onnx", format="onnx")
    got_onnx = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(
        None, {"obs": batch.astype(np.float32)})[0]
    for out in (got, got_onnx):
        if policy.discrete:
            np.testing.assert_array_equal(out, b)
        else:
            np.testing.assert_allclose(out, b, rtol=0, atol=1e-5)

    # resume: the counters and logs continue in the run's directory
    episodes_before = rows(run_dir / "episodes.csv")
    resumed = pearl("train", "--resume", str(run_dir), "--max-env-steps", str(2 * budget), "--quiet", *trust, cwd=work)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    assert f"at {budget:,} env steps" in resumed.stdout
    again = json.loads((run_dir / "result.json").read_text())
    assert again["env_steps"] >= 2 * budget
    episodes_after = rows(run_dir / "episodes.csv")
    assert episodes_after[:len(episodes_before)] == episodes_before and len(episodes_after) > len(episodes_before)

    if name == "dqn-cartpole":  # a new run into the same directory keeps the earlier run's files
        kept = digest(run_dir)
        rerun = pearl("train", "--algo", algo, "--env", env_id, "--max-env-steps", "500", "--log-dir", str(run_dir),
                      "--quiet", "--no-profile", cwd=work)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        assert digest(run_dir) == kept
        assert json.loads((Path(f"{run_dir}-2") / "result.json").read_text())["env_steps"] >= 500


@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
def test_train_refuses_bad_input_with_the_fix_and_writes_nothing(tmp_path):
    missing = pearl("train", "--env", "CartPole-v1", cwd=tmp_path)
    assert missing.returncode == 2 and "--algo" in missing.stdout and "Fix" in missing.stdout
    bad_env = pearl("train", "--algo", "dqn", "--env", "NoSuchEnv-v0", "--no-profile", cwd=tmp_path)
    assert bad_env.returncode == 2 and "NoSuchEnv-v0" in bad_env.stdout
    bad_module = pearl("train", "--algo", "dqn", "--env", "no_such_module_x:Env-v0", "--no-profile", cwd=tmp_path)
    assert bad_module.returncode == 2 and "no_such_module_x" in bad_module.stdout
    both = pearl("train", "--algo", "dqn", "--env", "CartPole-v1", "--preset", "x.toml", "--no-preset",
                 cwd=tmp_path)
    assert both.returncode == 2 and "contradict" in both.stdout
    no_run = pearl("train", "--resume", str(tmp_path / "nothing"), cwd=tmp_path)
    assert no_run.returncode == 2 and "does not exist" in no_run.stdout
    assert list(tmp_path.iterdir()) == []
    no_eval = pearl("eval", str(tmp_path / "nothing"), cwd=tmp_path)
    assert no_eval.returncode == 2 and "does not exist" in no_eval.stdout


def test_default_run_directories():
    from pearl_core.train_cli import default_log_dir

    assert default_log_dir("dqn", "CartPole-v1") == os.path.join("runs", "dqn", "CartPole-v1")
    assert default_log_dir("SAC", "ALE/Pong-v5") == os.path.join("runs", "sac", "ALE-Pong-v5")
    assert default_log_dir("my.mod:MyTrainer", "pkg.envs:MyEnv-v0") == os.path.join("runs", "mytrainer", "MyEnv-v0")
